package store

import (
	"context"
	"time"
)

// ---------------------------------------------------------------------------------------------
// Approvals: client-initiated backchannel authentication (OpenID CIBA Core 1.0)

// ApprovalStatus is where an approval request stands.
type ApprovalStatus string

const (
	// ApprovalPending: the person has not answered yet.
	ApprovalPending ApprovalStatus = "pending"
	// ApprovalApproved: the person approved; the next poll redeems it, once.
	ApprovalApproved ApprovalStatus = "approved"
	// ApprovalDenied: the person denied; the next poll learns it, once.
	ApprovalDenied ApprovalStatus = "denied"
)

// Approval is an agent's request that a person approve something ("may I do X for you?"),
// found by the hash of the auth_req_id the agent polls with, and by ID (a separate random
// identifier) from the person's account page, whose forms must never carry what the agent
// redeems with.
type Approval struct {
	Hash     []byte // SHA-256 of the auth_req_id
	ID       string // the account page's handle for it
	Project  string
	ClientID string
	Subject  string // the person asked
	Scopes   []string
	// BindingMessage is the agent's short plain text, shown to the person as text.
	BindingMessage string
	// AuthorizationDetails is the validated RFC 9396 JSON array, "" when none.
	AuthorizationDetails string
	// DeliveryMode is "poll" or "ping"; NotificationToken is the ping mode's sealed
	// client_notification_token (nil for poll).
	DeliveryMode      string
	NotificationToken []byte
	Status            ApprovalStatus
	// Interval is the least time between two polls; a poll sooner raises it (slow_down).
	Interval time.Duration
	// PolledAt is the last poll, zero before the first.
	PolledAt  time.Time
	CreatedAt time.Time
	ExpiresAt time.Time
	// DecidedAt is when the person answered, zero while pending.
	DecidedAt time.Time
}

// ApprovalBlock is a person's refusal to be asked by one client at all.
type ApprovalBlock struct {
	Project, Subject, ClientID string
	CreatedAt                  time.Time
}

// Approvals keeps approval requests and the clients people blocked from asking.
type Approvals interface {
	// CreateApproval stores a new pending request; a duplicate hash or ID is ErrConflict.
	CreateApproval(ctx context.Context, a Approval) error
	// ListApprovals returns the person's pending requests that have not expired at now,
	// oldest first.
	ListApprovals(ctx context.Context, project, subject string, now time.Time) ([]Approval, error)
	// DecideApproval sets the answer (ApprovalApproved or ApprovalDenied) of a pending,
	// unexpired request of this person and returns it; anything else (another person's
	// request, one already decided, redeemed or expired) is ErrNotFound and changes nothing.
	DecideApproval(ctx context.Context, project, subject, id string, status ApprovalStatus, now time.Time) (Approval, error)
	// PollApproval runs fn on the request while no other caller can change it, and then
	// deletes the request when fn says consume, or else stores the PolledAt and Interval fn
	// set. An error from fn changes nothing and is returned with the row. A request is
	// consumed once: a concurrent or later poll of a consumed request is ErrNotFound. Expired
	// requests are handed to fn too, so the caller can tell expired_token from an unknown id.
	PollApproval(ctx context.Context, hash []byte, fn func(*Approval) (consume bool, err error)) (Approval, error)
	// BlockClient stops a client from asking the person; blocking twice is not an error.
	// UnblockClient lifts it (ErrNotFound when not blocked).
	BlockClient(ctx context.Context, b ApprovalBlock) error
	UnblockClient(ctx context.Context, project, subject, clientID string) error
	ListBlockedClients(ctx context.Context, project, subject string) ([]ApprovalBlock, error)
	ClientBlocked(ctx context.Context, project, subject, clientID string) (bool, error)
}

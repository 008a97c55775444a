package ciba

import (
	"context"
	"time"

	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/oauth"
	"latchkey.dev/latchkey/webhook/signin"
)

// Store is what approvals use: the requests and blocks (store.Approvals), the person a
// login_hint names, the signed-in person on the approvals page, client authentication's
// one-time identifiers, and the tokens an approval is redeemed for.
type Store interface {
	oauth.ReplayStore
	signin.SessionStore
	CreateApproval(ctx context.Context, a store.Approval) error
	ListApprovals(ctx context.Context, project, subject string, now time.Time) ([]store.Approval, error)
	DecideApproval(ctx context.Context, project, subject, id string, status store.ApprovalStatus, now time.Time) (store.Approval, error)
	PollApproval(ctx context.Context, hash []byte, fn func(*store.Approval) (bool, error)) (store.Approval, error)
	BlockClient(ctx context.Context, b store.ApprovalBlock) error
	UnblockClient(ctx context.Context, project, subject, clientID string) error
	ListBlockedClients(ctx context.Context, project, subject string) ([]store.ApprovalBlock, error)
	ClientBlocked(ctx context.Context, project, subject, clientID string) (bool, error)
	GetPerson(ctx context.Context, project, id string) (store.Person, error)
	FindPerson(ctx context.Context, project, source, sourceSubject string) (store.Person, error)
	GetClient(ctx context.Context, project, id string) (store.Client, error)
	CreateTokens(ctx context.Context, tokens ...store.Token) error
}

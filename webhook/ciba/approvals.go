package ciba

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/ratelimit"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/oauth"
	"latchkey.dev/latchkey/webhook/site"
)

// CodeApprovalRequired is token exchange's refusal that started an approval request: the agent
// polls the token endpoint with the CIBA grant and the auth_req_id it carries
// (docs/approvals.md#from-a-token-exchange).
const CodeApprovalRequired = "approval_required"

// Approvals starts approval requests, for the backchannel authentication endpoint and for token
// exchange alike: one rate limit per client, the person's block list, the stored request and
// its approval.requested event.
type Approvals struct {
	env   *site.Env
	store Store
	limit *ratelimit.Limiter
}

// NewApprovals returns the starter the CIBA flow and token exchange share (Options.Approvals).
func NewApprovals(env *site.Env, st Store) *Approvals {
	return &Approvals{env: env, store: st, limit: ratelimit.New(ClientBurst, ClientEvery).Share(env.RateBuckets, "ciba.client")}
}

// Declared reports whether client may have approvals started for it: a confidential client
// declared as an OAuthClient with the ciba grant (never a self-registered one).
func Declared(p *config.Project, client *site.Client) bool {
	return p.Clients[client.ID] != nil && !client.Registered && !client.Public() && client.HasGrant(GrantType)
}

// Asks is Declared, for token exchange's Approvals interface.
func (a *Approvals) Asks(p *config.Project, client *site.Client) bool { return Declared(p, client) }

// take spends one of the client's requests; the refusal's Extra carries retry_after (seconds).
func (a *Approvals) take(ctx context.Context, p *config.Project, client *site.Client, now time.Time) *oauth.Error {
	ok, wait := a.limit.Take(ctx, p.Key+"|"+client.ID, now)
	if ok {
		return nil
	}
	secs := ratelimit.Seconds(wait)
	e := oauth.ErrTemporarilyUnavailable.WithStatus(http.StatusTooManyRequests).
		WithDescription("too many approval requests from this client; try again in " + strconv.Itoa(secs) + " s")
	e.Extra = map[string]any{"retry_after": secs}
	return &e
}

// start stores a pending request for the person unless they blocked the agent, and announces it.
func (a *Approvals) start(ctx context.Context, p *config.Project, declared *config.Client, ap store.Approval, notifyToken, person string, now time.Time) (*response, error) {
	blocked, err := a.store.ClientBlocked(ctx, p.Key, person, ap.ClientID)
	if err != nil {
		return nil, oauth.Internal(err)
	}
	if blocked {
		// Refused at once and nobody is told: blocking is how a person stops being asked.
		return nil, errAccessDeniedByPerson
	}
	id := secret.New(PrefixAuthReqID)
	ap.Hash, ap.ID = secret.Hash(id), secret.NewID()
	if ap.DeliveryMode == modePing {
		ap.NotificationToken = a.seal(id, notifyToken)
	}
	if err := a.store.CreateApproval(ctx, ap); err != nil {
		return nil, oauth.Internal(err)
	}
	a.env.Record(ctx, store.AuditRecord{
		Project: p.Key, Actor: "client:" + ap.ClientID, Action: events.ApprovalRequested, Target: person, ClientID: ap.ClientID,
		Details: map[string]string{
			"url":             p.Issuer + PagePath,
			"agent":           agentName(declared),
			"binding_message": ap.BindingMessage,
			"expires_at":      ap.ExpiresAt.UTC().Format(time.RFC3339),
		},
	})
	return &response{AuthReqID: id, ExpiresIn: int64(ap.ExpiresAt.Sub(now) / time.Second), Interval: int64(ap.Interval / time.Second)}, nil
}

// StartForExchange asks the person a refused token exchange was made for (subject) to approve
// details (validated RFC 9396 JSON) for client, which must be Declared. The answer is the
// refusal to send: approval_required (400) carrying auth_req_id, interval, expires_in and the
// approvals page's address; access_denied when the person blocked the agent;
// temporarily_unavailable when the client asked too often. The request is polled like a
// backchannel one (poll mode: an exchange names no notification token) and waits DefaultExpiry.
func (a *Approvals) StartForExchange(ctx context.Context, p *config.Project, client *site.Client, subject string, scopes []string, details string, now time.Time) error {
	declared := p.Clients[client.ID]
	if declared == nil || !Declared(p, client) {
		return errOnlyDeclaredClients
	}
	person, err := a.store.GetPerson(ctx, p.Key, subject)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !site.PersonActive(p, person)) {
		return oauth.ErrInvalidGrant.WithDescription("the person can no longer sign in to this project")
	}
	if err != nil {
		return oauth.Internal(err)
	}
	if !slices.Contains(scopes, "openid") {
		scopes = append([]string{"openid"}, scopes...)
	}
	if !client.AllowsScopes(scopes) {
		return oauth.ErrInvalidScope.WithDescription("the client may not ask for an approval of that scope")
	}
	if e := a.take(ctx, p, client, now); e != nil {
		delete(e.Extra, "retry_after")
		return *e
	}
	resp, err := a.start(ctx, p, declared, store.Approval{
		Project: p.Key, ClientID: client.ID, Subject: person.ID, Scopes: scopes, AuthorizationDetails: details,
		DeliveryMode: modePoll, Status: store.ApprovalPending, Interval: Interval, CreatedAt: now, ExpiresAt: now.Add(DefaultExpiry),
	}, "", person.ID, now)
	if err != nil {
		a.limit.Refund(ctx, p.Key+"|"+client.ID, now)
		return err
	}
	return oauth.Error{
		Code: CodeApprovalRequired, Status: http.StatusBadRequest,
		Description: "the person has been asked to approve these authorization_details; poll the token endpoint with the ciba grant",
		Extra: map[string]any{
			"auth_req_id": resp.AuthReqID, "interval": resp.Interval, "expires_in": resp.ExpiresIn,
			"approvals_uri": p.Issuer + PagePath,
		},
	}
}

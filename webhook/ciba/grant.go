package ciba

import (
	"context"
	"errors"
	"strings"

	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/oauth"
	"latchkey.dev/latchkey/webhook/site"
)

// Token endpoint errors of the CIBA grant (CIBA Core §11), all with status 400.
var (
	errPending      = oauth.Error{Code: "authorization_pending", Status: 400, Description: "the person has not answered yet"}
	errSlowDown     = oauth.Error{Code: "slow_down", Status: 400, Description: "polling too fast: wait the interval, now 5 seconds longer, between polls"}
	errExpired      = oauth.Error{Code: "expired_token", Status: 400, Description: "the request expired before it was redeemed; ask again"}
	errDenied       = oauth.ErrAccessDenied.WithStatus(400).WithDescription("the person denied the request")
	errUnknownReqID = oauth.ErrInvalidGrant.WithDescription("auth_req_id is unknown, already used, or was not issued to this client")
)

// grant redeems an auth_req_id (CIBA Core §10.1). The request is looked at under its row lock:
// while pending, the poll is timed; once answered or expired it is consumed, so the answer is
// given once and a second redemption is refused as unknown.
func (f *flow) grant(ctx context.Context, req *oauth.TokenRequest) (*oauth.TokenResponse, error) {
	id := req.Form.Get("auth_req_id")
	if id == "" {
		return nil, oauth.ErrInvalidRequest.WithDescription("auth_req_id is required")
	}
	p, client := req.Project, req.Client
	if p.Clients[client.ID] == nil || client.Registered || client.Public() {
		return nil, errOnlyDeclaredClients
	}
	slow := false
	a, err := f.store.PollApproval(ctx, secret.Hash(id), func(a *store.Approval) (bool, error) {
		// Another client's id is refused as unknown, and its poll changes nothing.
		if a.Project != p.Key || a.ClientID != client.ID {
			return false, errUnknownReqID
		}
		if !req.Now.Before(a.ExpiresAt) || a.Status != store.ApprovalPending {
			return true, nil
		}
		if !a.PolledAt.IsZero() && req.Now.Before(a.PolledAt.Add(a.Interval)) {
			slow = true
			a.Interval += SlowDownStep
		}
		a.PolledAt = req.Now
		return false, nil
	})
	var refused oauth.Error
	switch {
	case errors.As(err, &refused):
		return nil, refused
	case errors.Is(err, store.ErrNotFound):
		return nil, errUnknownReqID
	case err != nil:
		return nil, oauth.Internal(err)
	case !req.Now.Before(a.ExpiresAt):
		return nil, errExpired
	case a.Status == store.ApprovalDenied:
		return nil, errDenied
	case a.Status == store.ApprovalPending && slow:
		return nil, errSlowDown
	case a.Status == store.ApprovalPending:
		return nil, errPending
	}
	return f.issue(ctx, req, a)
}

// issue makes the tokens of an approved request for the person who approved it.
func (f *flow) issue(ctx context.Context, req *oauth.TokenRequest, a store.Approval) (*oauth.TokenResponse, error) {
	p := req.Project
	person, err := f.store.GetPerson(ctx, p.Key, a.Subject)
	if errors.Is(err, store.ErrNotFound) {
		return nil, oauth.ErrInvalidGrant.WithDescription("the person can no longer sign in to this project")
	}
	if err != nil {
		return nil, oauth.Internal(err)
	}
	// Ending a person's access (docs/leavers.md) ends what they approved before it too.
	if !site.PersonActive(p, person) || person.AccessEndedAt.After(a.DecidedAt) {
		return nil, oauth.ErrInvalidGrant.WithDescription("the person can no longer sign in to this project")
	}
	details, err := approved(a.AuthorizationDetails)
	if err != nil {
		return nil, oauth.Internal(err)
	}
	// The approval's end bounds the access token, and no refresh token outlives it: the
	// person said yes until then, so the agent asks again afterwards (docs/approvals.md).
	is := oauth.Issue{
		Client: req.Client, Subject: person.ID, Scopes: a.Scopes, AuthTime: a.DecidedAt,
		JKT: req.JKT, Person: &person, Details: details, Until: a.ExpiresAt,
	}
	tokens, resp, err := oauth.Mint(p, req.Now, is)
	if err != nil {
		return nil, oauth.Internal(err)
	}
	if err := f.store.CreateTokens(ctx, tokens...); err != nil {
		return nil, oauth.Internal(err)
	}
	rec := map[string]string{"grant_type": GrantType, "family_id": tokens[0].FamilyID, "scope": strings.Join(a.Scopes, " ")}
	if a.AuthorizationDetails != "" {
		rec["authorization_details"] = a.AuthorizationDetails
	}
	f.env.Record(ctx, store.AuditRecord{
		Project: p.Key, Time: req.Now, Actor: "client:" + req.Client.ID, Action: events.TokenIssued, Target: person.ID,
		ClientID: req.Client.ID, Outcome: store.OutcomeSuccess, Details: rec,
	})
	return &resp, nil
}

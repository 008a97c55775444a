package exchange

import (
	"context"
	"time"

	"latchkey.dev/latchkey/internal/authzdetails"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/oauth"
	"latchkey.dev/latchkey/webhook/site"
)

// ReasonDetailsExceeded is the audit reason of an exchange refused because it asked for more
// than the person approved in authorization_details (docs/authorization-details.md).
const ReasonDetailsExceeded = "authorization_details_exceeded"

// approval is what the subject token's authorization_details (RFC 9396) allow at one
// Connector: nothing to enforce when the token carries none of a type that governs it.
type approval struct {
	// details are the details the exchange is made under (the request's, narrowed, or all the
	// approved ones of the connector's types); nil when none apply.
	details []authzdetails.Detail
	// until is the subject token's expiry: the approval ends with it.
	until time.Time
}

// approvedFor holds an exchange inside the person's approval. When the subject token carries
// details of a type that governs connector c, the request's authorization_details (when sent)
// must each fit inside one of them, and without it all of them apply; a request that sends
// details for a Connector the token carries none for is refused as well, since there is
// nothing it could narrow. Both refusals are invalid_authorization_details: RFC 9396 §6.1's
// answer to a token request that asks for more than the grant, which is what an exchange is.
// A subject token without such details exchanges as before: the person approved scopes, not
// details, for it.
func (g *Grant) approvedFor(ctx context.Context, req *oauth.TokenRequest, subject store.Token, c *config.Connector) (approval, error) {
	p := req.Project
	carried, err := authzdetails.Unmarshal(subject.AuthorizationDetails)
	if err != nil {
		return approval{}, oauth.Internal(err)
	}
	approved := authzdetails.ForConnector(p.AuthorizationDetails, carried, c.Key)
	raw := req.Form.Get("authorization_details")
	if raw == "" {
		if len(approved) == 0 {
			return approval{}, nil
		}
		return approval{details: approved, until: subject.ExpiresAt}, nil
	}
	requested, err := authzdetails.Parse(p.AuthorizationDetails, raw)
	if err != nil {
		g.record(ctx, req, subject.Subject, c, ReasonDetailsExceeded, map[string]string{"problem": "invalid"})
		return approval{}, oauth.DetailsError(err)
	}
	if len(approved) == 0 || !authzdetails.Covers(approved, requested) {
		g.record(ctx, req, subject.Subject, c, ReasonDetailsExceeded, map[string]string{"requested": authzdetails.Marshal(requested)})
		// A declared agent with the ciba grant is not just refused: the person is asked.
		if g.approvals != nil && g.approvals.Asks(p, req.Client) {
			return approval{}, g.approvals.StartForExchange(ctx, p, req.Client, subject.Subject, subject.Scopes, authzdetails.Marshal(requested), req.Now)
		}
		return approval{}, oauth.ErrInvalidAuthorizationDetails.WithDescription("authorization_details asks for more than the person approved for " + c.Audience)
	}
	return approval{details: requested, until: subject.ExpiresAt}, nil
}

// agentWithin is the agent (Grant.agent) and what its approval allows at c (approvedFor).
func (g *Grant) agentWithin(ctx context.Context, req *oauth.TokenRequest, subject store.Token, client *site.Client, c *config.Connector) (*site.Client, approval, error) {
	agent, err := g.agent(ctx, req.Project, subject, client)
	if err != nil {
		return nil, approval{}, err
	}
	a, err := g.approvedFor(ctx, req, subject, c)
	return agent, a, err
}

// apply puts the approval on an exchange's answer: the details it was made under (RFC 9396
// §7), and an expires_in no later than the approval's end, so an agent that honours expires_in
// comes back, and is checked again, when the approval ends. The upstream token itself lives
// as long as the service lets it: Latchkey cannot shorten it (docs/authorization-details.md).
func (a approval) apply(resp *oauth.TokenResponse, now time.Time) *oauth.TokenResponse {
	if resp == nil || a.details == nil {
		return resp
	}
	resp.AuthorizationDetails = a.details
	left := max(int64((a.until.Sub(now)+time.Second-1)/time.Second), 1)
	if resp.ExpiresIn == 0 || resp.ExpiresIn > left {
		resp.ExpiresIn = left
	}
	return resp
}

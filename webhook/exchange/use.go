package exchange

import (
	"context"
	"net/url"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/webhook/oauth"
	"latchkey.dev/latchkey/webhook/site"
)

// Use is one use of a person's connection by the agent their access token was issued to, on
// the agent's own behalf, without the upstream token ever reaching it: the token proxy and
// Envoy external authorization (webhook/proxy, docs/token-proxy.md).
type Use struct {
	Project *config.Project
	// Agent is the client the access token was issued to, presenting it itself.
	Agent *site.Client
	// Token is the Latchkey access token the agent presented, already found live by the
	// caller (with its DPoP proof checked when it is bound to a key).
	Token string
	// JKT is the key the request's DPoP proof proved ("" without one).
	JKT       string
	Connector *config.Connector
	Now       time.Time
}

// Use decides a Use exactly as token exchange decides an exchange the agent asks for with its
// own token: the same checks, in the same order, the same refresh of the upstream token, the
// same refusals with the same connect links, audited as events.TokenProxyRefused. Only the
// handout is not written here: the proxy counts its uses per minute instead
// (events.TokenProxied). A public client never uses a person's connection, as it never
// exchanges (RFC 8693 §5).
func (g *Grant) Use(ctx context.Context, u Use) (Handout, error) {
	if u.Agent.Public() {
		return Handout{}, oauth.ErrUnauthorizedClient.WithDescription("a public client cannot use people's connected accounts")
	}
	req := &oauth.TokenRequest{
		Env: g.env, Project: u.Project, Client: u.Agent, Now: u.Now, JKT: u.JKT,
		Form: url.Values{
			"grant_type": {GrantType}, "subject_token": {u.Token}, "subject_token_type": {TokenTypeAccessToken},
			"audience": {u.Connector.Audience},
		},
	}
	return g.hand(context.WithValue(ctx, proxiedUse{}, true), req, u.Token, "", u.Connector, nil, false)
}

// proxiedUse marks the context of a Use: its refusals are audited as events.TokenProxyRefused,
// so the audit log tells a refused call through the proxy from a refused exchange.
type proxiedUse struct{}

// refusedAction is the action of a refusal decided in ctx.
func refusedAction(ctx context.Context) string {
	if ctx.Value(proxiedUse{}) != nil {
		return events.TokenProxyRefused
	}
	return events.TokenExchangeRefused
}

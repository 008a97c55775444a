package proxy

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"strings"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/dpop"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/exchange"
	"latchkey.dev/latchkey/webhook/oauth"
	"latchkey.dev/latchkey/webhook/site"
)

// User is the narrow part of token exchange the gate decides through: one use of a person's
// connection by the agent presenting its own token (exchange.Grant.Use).
type User interface {
	Use(ctx context.Context, u exchange.Use) (exchange.Handout, error)
}

// Gate decides whether a call may go to a connected service with the person's token, for the
// token proxy and for Envoy external authorization alike.
type Gate struct {
	env   *site.Env
	store Store
	use   User
	// cache keeps allowed decisions while nothing they read changed (cache.go).
	cache decisionCache
}

// NewGate returns a gate deciding through use (token exchange's decision).
func NewGate(env *site.Env, st Store, use User) *Gate {
	return &Gate{env: env, store: st, use: use}
}

// Call is one call an agent wants to make.
type Call struct {
	Project *config.Project
	// Connector is the connector's token-exchange audience.
	Connector string
	Method    string
	// Path is the path at the service, escaped as the agent sent it.
	Path string
	// HTU is the URL the call's DPoP proof must name (RFC 9449 §4.2): the address the agent
	// called, without query.
	HTU string
	// Header carries the agent's Authorization and DPoP headers.
	Header http.Header
}

// Pass is a call allowed: where it goes and the header that carries the person's token.
type Pass struct {
	Connector *config.Connector
	// Path is the path to send, escaped canonically (the one the rules were checked against).
	Path string
	// HeaderName and HeaderValue carry the person's upstream token as the service wants it.
	HeaderName, HeaderValue string
	// Token is the upstream token itself, so answers can be kept clear of it.
	Token   string
	Subject string
	Agent   string
}

// Decide checks a call in this order: the path (400), the agent's Latchkey access token and its
// DPoP proof (401), DPoP where the Project or the client requires it (401), the connector (404)
// and its rules (403), then token exchange's decision (the agent may use this connector for
// the person, the person's connection works: 403 with a connect link, 503 when the service
// does not answer a refresh). challenge receives the WWW-Authenticate value of a 401.
// An allowed decision is kept while nothing it read changed (cache.go); the token's
// presentation and the Connector's rules are checked on every call.
func (g *Gate) Decide(ctx context.Context, c Call) (Pass, *Problem) {
	p := c.Project
	now := g.env.Clock()
	path, err := cleanPath(c.Path)
	if err != nil {
		return Pass{}, problem(http.StatusBadRequest, "invalid_path", "The path cannot be forwarded", err.Error())
	}
	raw := rawToken(c.Header)
	var key cacheKey
	revision, err := g.store.Revision(ctx)
	// With AccessPolicies every call is decided: a policy sees each call's time.
	caching := err == nil && raw != "" && !g.env.HasAccessPolicy(p)
	if caching {
		key = cacheKey{project: p, connector: c.Connector, token: sha256.Sum256([]byte(raw))}
		if e, ok := g.cache.get(key, revision, now); ok {
			hw := &headerWriter{h: http.Header{}}
			req := &http.Request{Method: c.Method, Header: c.Header}
			if err := oauth.Presented(ctx, g.store, hw, req, p, c.HTU, e.token, now); err != nil {
				return Pass{}, refusal(err, hw)
			}
			if pr := checkRules(e.pass.Connector, c.Method, path); pr != nil {
				return Pass{}, pr
			}
			pass := e.pass
			pass.Path = escape(path)
			return pass, nil
		}
	}
	pass, tok, upstream, pr := g.decide(ctx, c, path, now)
	if pr == nil && caching {
		g.cache.put(key, cached{revision: revision, until: until(tok, upstream), token: tok, pass: pass})
	}
	if pr == nil {
		pass.Path = escape(path)
	}
	return pass, pr
}

// decide is Decide without the cache: it returns the access token found and when the upstream
// token handed out expires (zero when it does not say), which end the decision.
func (g *Gate) decide(ctx context.Context, c Call, path string, now time.Time) (Pass, store.Token, time.Time, *Problem) {
	p := c.Project
	hw := &headerWriter{h: http.Header{}}
	req := &http.Request{Method: c.Method, Header: c.Header}
	tok, err := oauth.ResourceAccessToken(ctx, g.env, g.store, hw, req, p, c.HTU, now)
	if err != nil {
		return Pass{}, store.Token{}, time.Time{}, refusal(err, hw)
	}
	fail := func(pr *Problem) (Pass, store.Token, time.Time, *Problem) {
		return Pass{}, store.Token{}, time.Time{}, pr
	}
	if tok.Subject == "" {
		return fail(problem(http.StatusForbidden, "no_person", "The access token speaks for no person",
			"a client_credentials token has no person whose account could be used"))
	}
	agent, err := g.env.Client(ctx, p, tok.ClientID)
	if errors.Is(err, site.ErrUnknownClient) {
		return fail(problem(http.StatusUnauthorized, oauth.ErrInvalidToken.Code, "The access token was refused", "the client the access token was issued to no longer exists"))
	}
	if err != nil {
		return fail(asProblem(oauth.Internal(err)))
	}
	if tok.JKT == "" && oauth.DPoPRequired(p, agent) {
		pr := problem(http.StatusUnauthorized, oauth.ErrInvalidToken.Code, "The access token was refused",
			"this project requires DPoP: present a DPoP-bound access token with Authorization: DPoP and a proof")
		pr.Challenge = `DPoP error="invalid_token", algs="` + strings.Join(dpop.Algorithms, " ") + `"`
		return fail(pr)
	}
	conn := p.ConnectorsByAudience[c.Connector]
	if conn == nil {
		return fail(problem(http.StatusNotFound, "unknown_connector", "No such connected service", "no connected service has that audience in this project"))
	}
	if pr := checkRules(conn, c.Method, path); pr != nil {
		return fail(pr)
	}
	h, err := g.use.Use(ctx, exchange.Use{Project: p, Agent: agent, Token: rawToken(c.Header), JKT: tok.JKT, Connector: conn, Now: now})
	if err != nil {
		return fail(asProblem(err))
	}
	name, value := credential(conn, h.Token.AccessToken)
	return Pass{
		Connector: conn, HeaderName: name, HeaderValue: value,
		Token: h.Token.AccessToken, Subject: h.Subject, Agent: agent.ID,
	}, tok, h.Token.Expiry, nil
}

// refusal is the problem for an access token refused, with the challenge the check set.
func refusal(err error, hw *headerWriter) *Problem {
	pr := asProblem(err)
	pr.Challenge = hw.h.Get("WWW-Authenticate")
	if pr.Status == http.StatusUnauthorized && pr.Challenge == "" {
		pr.Challenge = `Bearer error="invalid_token"`
	}
	return pr
}

// checkRules refuses a call the Connector's proxy rules do not let through.
func checkRules(conn *config.Connector, method, path string) *Problem {
	if conn.Proxy == nil || !allowed(conn.Proxy.Rules, method, path) {
		return problem(http.StatusForbidden, "call_not_allowed", "The connector does not allow this call",
			method+" "+path+" is not among the calls the "+conn.Audience+" connector lets through")
	}
	return nil
}

// rawToken is the access token of the Authorization header, under either scheme.
func rawToken(h http.Header) string {
	r := &http.Request{Header: h}
	if t := oauth.DPoPToken(r); t != "" {
		return t
	}
	return oauth.BearerToken(r)
}

// credential is how the service wants the person's token: an API-key connector's own header
// and format, else an RFC 6750 bearer token.
func credential(c *config.Connector, token string) (name, value string) {
	if c.APIKey != nil {
		return c.APIKey.Header, c.APIKey.HeaderValue(token)
	}
	return "Authorization", "Bearer " + token
}

// headerWriter collects the headers oauth.ResourceAccessToken sets on a refusal.
type headerWriter struct{ h http.Header }

func (w *headerWriter) Header() http.Header         { return w.h }
func (w *headerWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *headerWriter) WriteHeader(int)             {}

// clearOf reports whether s does not contain token; an empty token is in nothing.
func clearOf(s, token string) bool { return token == "" || !strings.Contains(s, token) }

// Now is the time on the server's injected clock, for counting a call decided elsewhere.
func (g *Gate) Now() time.Time { return g.env.Clock() }

package oauth

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"sync"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/webhook/site"
)

// GrantHandler handles one grant type at the token endpoint. It runs after the shared steps:
// the request is a POST form without repeated parameters, the client is authenticated and
// allowed the grant type. It returns the response or an Error (anything else is a 500).
type GrantHandler interface {
	Grant(ctx context.Context, req *TokenRequest) (*TokenResponse, error)
}

// GrantFunc adapts a function to GrantHandler.
type GrantFunc func(ctx context.Context, req *TokenRequest) (*TokenResponse, error)

func (f GrantFunc) Grant(ctx context.Context, req *TokenRequest) (*TokenResponse, error) {
	return f(ctx, req)
}

// TokenRequest is a token request after the shared steps.
type TokenRequest struct {
	Env     *site.Env
	Project *config.Project
	Client  *site.Client
	Form    url.Values
	HTTP    *http.Request
	// Now is the request's time on the injected clock, read once.
	Now time.Time
	// JKT is the thumbprint of the key the request's DPoP proof proved, "" without a proof
	// (RFC 9449). Grants bind what they issue to it.
	JKT string
}

// TokenEndpoint is /token: the shared steps, then one handler per grant type.
type TokenEndpoint struct {
	env    *site.Env
	store  Store
	mu     sync.RWMutex
	grants map[string]GrantHandler
}

// NewTokenEndpoint returns a token endpoint with the core grants: authorization_code,
// refresh_token and client_credentials.
func NewTokenEndpoint(env *site.Env, st Store) *TokenEndpoint {
	t := &TokenEndpoint{env: env, store: st, grants: map[string]GrantHandler{}}
	t.Handle(site.GrantAuthorizationCode, grant(authorizationCode).with(st))
	t.Handle(site.GrantRefreshToken, grant(refreshToken).with(st))
	t.Handle(site.GrantClientCredentials, grant(clientCredentials).with(st))
	return t
}

// Handle registers the handler of a grant type, replacing any earlier one. Token exchange
// (RFC 8693) registers itself this way from its own package.
func (t *TokenEndpoint) Handle(grantType string, h GrantHandler) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.grants[grantType] = h
}

// GrantTypes lists the registered grant types, sorted, for metadata.
func (t *TokenEndpoint) GrantTypes() []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]string, 0, len(t.grants))
	for k := range t.grants {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Handler returns the handler registered for a grant type, or nil. The server wraps each one
// to count what it answers (internal/metrics).
func (t *TokenEndpoint) Handler(grantType string) GrantHandler { return t.handler(grantType) }

func (t *TokenEndpoint) handler(grantType string) GrantHandler {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.grants[grantType]
}

func (t *TokenEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := site.Project(r)
	resp, err := t.serve(w, r, p)
	if err != nil {
		t.fail(w, p, err)
		return
	}
	WriteJSON(w, http.StatusOK, resp)
}

func (t *TokenEndpoint) serve(w http.ResponseWriter, r *http.Request, p *config.Project) (*TokenResponse, error) {
	form, client, err := readClientForm(t.env, t.store, p, w, r)
	if err != nil {
		return nil, err
	}
	gt := form.Get("grant_type")
	if gt == "" {
		return nil, ErrInvalidRequest.WithDescription("grant_type is required")
	}
	h := t.handler(gt)
	if h == nil {
		return nil, ErrUnsupportedGrantType.WithDescription("this server does not support that grant type")
	}
	if !client.HasGrant(gt) {
		return nil, ErrUnauthorizedClient.WithDescription("the client may not use this grant type")
	}
	if err := policy(t.env, p, client, gt); err != nil {
		return nil, err
	}
	now := t.env.Now()
	jkt, err := tokenProof(r.Context(), t.env, t.store, w, r, p, client, p.Issuer+"/token", now)
	if err != nil {
		return nil, err
	}
	return h.Grant(r.Context(), &TokenRequest{Env: t.env, Project: p, Client: client, Form: form, HTTP: r, Now: now, JKT: jkt})
}

// policy refuses every grant to a client the project's redirect policy refuses (docs/recognised-apps.md), so
// that a code issued, or a client registered, before the policy was switched on yields nothing
// after. The refresh grant applies the policy itself, because a refused refresh also ends the
// token's family.
func policy(env *site.Env, p *config.Project, client *site.Client, grantType string) error {
	if grantType == site.GrantRefreshToken {
		return nil
	}
	err := env.RedirectPolicy(p, client.RedirectURIs)
	switch {
	case err == nil:
		return nil
	case grantType == site.GrantClientCredentials:
		return ErrUnauthorizedClient.WithDescription(err.Error())
	default:
		return ErrInvalidGrant.WithDescription(err.Error())
	}
}

func (t *TokenEndpoint) fail(w http.ResponseWriter, p *config.Project, err error) {
	e := AsError(err)
	if e.Status >= 500 {
		t.env.ResponseLog(w).Error(err, "token endpoint failed", "project", p.Key)
	}
	WriteError(w, e)
}

// logFail writes an error response and logs it when it is the server's fault.
func logFail(env *site.Env, w http.ResponseWriter, p *config.Project, what string, err error) {
	e := AsError(err)
	if e.Status >= 500 {
		env.ResponseLog(w).Error(err, what+" failed", "project", p.Key)
	}
	WriteError(w, e)
}

// grantScopes works out the scope of a new issuance: the requested scope when given (it must
// be within allowed), else all of allowed.
func grantScopes(requested string, allowed []string) ([]string, error) {
	req, err := ParseScope(requested)
	if err != nil {
		return nil, err
	}
	if req == nil {
		return slices.Clone(allowed), nil
	}
	if !Subset(req, allowed) {
		return nil, ErrInvalidScope.WithDescription("the requested scope exceeds what was granted")
	}
	return req, nil
}

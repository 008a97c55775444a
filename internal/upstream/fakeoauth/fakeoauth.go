// Package fakeoauth is an in-process OAuth 2.0 provider that answers in the wire format of one
// real provider, so tests can run a connection through the real callback and vault code against
// each: the token answer's shape, its error bodies, whether refresh tokens rotate, the user info
// answer and revocation. Each provider is a Provider value in its own file (slack.go,
// gitlab.go, …) whose comments name the documentation pages it follows, and what could not be
// confirmed there.
//
// Like fakegithub, it skips its approval page: a browser holding SessionCookie(login) is sent
// straight back to the callback with a code. It records every request (Requests) so a test can
// check what Latchkey sent: how the client authenticated, the content type, the headers.
package fakeoauth

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/netguard"
	"latchkey.dev/latchkey/internal/upstream/catalog"
)

// Shape names a provider: its catalog preset's name.
type Shape string

// Account is a person at the provider.
type Account struct {
	ID, Login, Name, Email string
	// Number is the account's id at providers whose ids are numbers (GitHub, GitLab).
	Number int64
}

// Options configure a Server.
type Options struct {
	Shape                  Shape
	ClientID, ClientSecret string
	// RedirectURI is the app's one registered callback, matched exactly.
	RedirectURI string
	Accounts    []Account
	Now         func() time.Time
	// AccessTokenTTL > 0 issues access tokens that expire, with a refresh token; 0 issues
	// tokens that never expire, without a refresh token unless the provider always gives one
	// (Provider.AlwaysRefreshToken).
	AccessTokenTTL time.Duration
	// TokenDelay holds every token request this long before answering, so concurrent
	// refreshes overlap as they do against a real provider's latency.
	TokenDelay time.Duration
	// ClientAssertion, when set, is how the client authenticates at the token endpoint
	// (private_key_jwt): a client_assertion this check accepts instead of a client secret.
	ClientAssertion *AssertionCheck
}

// Request is what the server saw of one request.
type Request struct {
	Method, Path string
	Header       http.Header
	// ClientAuth is "basic", "post", "both" or "" (no client secret) for token and revocation
	// requests.
	ClientAuth string
	// ContentType is the media type of the body, without parameters.
	ContentType string
	// Params are the request's parameters, from a form or a JSON object.
	Params url.Values
}

// Paths of a provider, relative to the server's URL: those of the real provider's hosts, one
// server standing for all of them. Revoke may contain "{client_id}".
type Paths struct {
	Authorize, Token, UserInfo, Revoke string
}

// Issued is what the provider issues for one token answer.
type Issued struct {
	Access, Refresh, Scope string
	// ExpiresIn is the access token's lifetime in seconds, 0 when it does not expire.
	ExpiresIn int64
	// Refreshed: an answer to a refresh rather than to a code.
	Refreshed bool
	// Base is the server's own URL as the token request reached it, for an ID token's issuer.
	Base string
	// Sign signs an ID token's claims with the server's key, published by ServeJWKS.
	Sign func(claims map[string]any) string
	// Forged are claims a test wants the next ID token to say instead (ForgeIDToken).
	Forged map[string]any
	// ClientID is the client the answer is for, an ID token's audience.
	ClientID string
}

// Provider is one provider's wire format. Nil funcs mean RFC 6749 / RFC 7009 behaviour.
type Provider struct {
	Shape Shape
	// Paths are the documented paths of the provider's endpoints.
	Paths Paths
	// TokenPrefix starts every token the provider issues, as the real ones do.
	TokenPrefix string
	// Scopes are what test connectors ask for; nil: the preset's default scopes.
	Scopes []string
	// ClientAuth is how the token endpoint wants the client authenticated: "basic", "post", or
	// "" for either.
	ClientAuth string
	// JSONRequests: the token endpoint wants a JSON body rather than a form.
	JSONRequests bool
	// RotatesRefresh: a refresh answer carries a new refresh token and the one used dies. Else
	// the refresh token is kept.
	RotatesRefresh bool
	// AlwaysRefreshToken: a refresh token comes with every code answer, even when access
	// tokens do not say when they expire (Salesforce).
	AlwaysRefreshToken bool
	// RevokeRefusesUnknown: RFC 7009 revocation of a token the provider does not know is
	// answered 400 {"error": "invalid_token"} rather than 200 (Salesforce).
	RevokeRefusesUnknown bool
	// Extra serves further paths of the provider's API (Atlassian's accessible-resources).
	Extra map[string]func(*Server, http.ResponseWriter, *http.Request)
	// AccountIDOf is the id the provider's user info gives an account; nil: Account.ID.
	AccountIDOf func(Account) string
	// Authorize checks provider-specific authorization parameters and returns the granted
	// scope, or a refusal.
	Authorize func(q url.Values) (scope, refusal string)
	// TokenError writes a refused token request in the provider's shape; code is RFC 6749's,
	// refresh says whether a refresh was refused.
	TokenError func(w http.ResponseWriter, code string, refresh bool)
	// CheckToken refuses a token request the provider would refuse for its format; nil checks
	// JSONRequests and ClientAuth.
	CheckToken func(w http.ResponseWriter, req Request) bool
	// Answer is the token answer's body.
	Answer func(is Issued, a Account) map[string]any
	// UserInfo answers the user info request for a (ok false: no live token).
	UserInfo func(w http.ResponseWriter, r *http.Request, req Request, a Account, ok bool)
	// Revoke answers a revocation request after checking its form; it returns the token to
	// revoke, or "" when it refused (and answered).
	Revoke func(w http.ResponseWriter, req Request) string
	// Tenant fills {tenant} in the preset's endpoints ("common" for a multi-tenant app).
	Tenant string
	// RevokeLive, when set, answers revocation instead of Revoke, told which access tokens
	// still work (Dropbox's revocation is a call made with the token, refused once it expired).
	RevokeLive func(w http.ResponseWriter, req Request, live func(access string) bool) string
	// RefreshPath, when set, is where refreshes go instead of Paths.Token (Figma); Paths.Token
	// then refuses them, so a connector that ignores its refreshURL fails.
	RefreshPath string
}

var providers = map[Shape]*Provider{}

// register adds a provider; each provider's file calls it from init.
func register(p *Provider) { providers[p.Shape] = p }

// Shapes lists the registered providers, sorted.
func Shapes() []Shape {
	out := make([]Shape, 0, len(providers))
	for s := range providers {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// PathsOf returns the paths a shape serves, those of the real provider.
func PathsOf(s Shape) Paths { return providers[s].Paths }

// Server is the fake provider. It is an http.Handler and safe for concurrent use.
type Server struct {
	o Options
	p *Provider

	mu       sync.Mutex
	sessions map[string]string // cookie value → login
	codes    map[string]*grant
	access   map[string]*grant
	refresh  map[string]*grant
	requests []Request
	// refreshDown makes refreshes answer 503 (SetRefreshUnavailable).
	refreshDown bool

	// ID tokens (idtoken.go) and client assertions (assertion.go).
	idKey     *rsa.PrivateKey
	idKeyOnce sync.Once
	forged    map[string]any
	jtis      map[string]bool
}

type grant struct {
	login, scope, challenge string
	expires                 time.Time // zero: never
	pair                    string
}

// New returns a server for o; o.Shape must be a registered provider.
func New(o Options) *Server {
	if o.Now == nil {
		o.Now = time.Now
	}
	p := providers[o.Shape]
	if p == nil {
		panic("fakeoauth: no provider " + string(o.Shape))
	}
	return &Server{o: o, p: p, sessions: map[string]string{}, codes: map[string]*grant{},
		access: map[string]*grant{}, refresh: map[string]*grant{}}
}

// Connector is a compiled connector for this server at baseURL, built from the catalog's
// preset of the shape as the controller builds it for a Connector that names only the preset
// and its client (controllers.applyDialect), with every endpoint's origin replaced by baseURL
// ({baseURL} filled with it). So the preset's own paths, dialect and account fields are what a
// story exercises: a preset whose path differs from the provider's documented one fails.
func (s *Server) Connector(baseURL, key, callbackURL string) *config.Connector {
	p, ok := catalog.Get(string(s.o.Shape))
	if !ok {
		panic("fakeoauth: no preset " + string(s.o.Shape))
	}
	ns, name, _ := strings.Cut(key, "/")
	local := func(u string) string {
		if u == "" {
			return ""
		}
		u = strings.ReplaceAll(u, catalog.BaseURL, "https://base.invalid")
		rest := strings.TrimPrefix(u, "https://")
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			return baseURL + rest[i:]
		}
		return baseURL
	}
	if s.p.Tenant != "" {
		plain := local
		local = func(u string) string { return strings.ReplaceAll(plain(u), catalog.Tenant, s.p.Tenant) }
	}
	c := &config.Connector{
		Key: key, Namespace: ns, Name: name, DisplayName: p.DisplayName, Preset: p.Name, Audience: p.Name,
		CallbackURL: callbackURL, ClientID: s.o.ClientID, ClientSecret: s.o.ClientSecret, PKCE: true,
		AuthURL: local(p.AuthorizationURL), TokenURL: local(p.TokenURL), UserInfoURL: local(p.UserInfoURL),
		RevocationURL: local(p.RevocationURL), RefreshURL: local(p.RefreshURL), OIDCIssuer: local(p.OIDCIssuer),
		TenantClaim:      p.TenantClaim,
		TokenAuth:        orDefault(p.TokenEndpointAuthMethod, config.TokenAuthPost),
		TokenRequestJSON: p.TokenRequestFormat == "json", AccessTokenField: p.AccessTokenField,
		ScopeParam: p.ScopeParameter, Scopes: append([]string(nil), p.DefaultScopes...),
		RevocationStyle: orDefault(p.RevocationStyle, config.RevokeRFC7009),
		UserInfoMethod:  orDefault(p.UserInfo.Method, "GET"),
		AccountIDField:  orDefault(p.Account.IDField, "id"), AccountNameField: orDefault(p.Account.NameField, "email"),
		AllowedNetworks: netguard.Loopback,
	}
	if p.ScopeSeparator == "comma" {
		c.ScopeSeparator = ","
	}
	if s.p.Scopes != nil {
		c.Scopes = append([]string(nil), s.p.Scopes...)
	}
	switch {
	case p.UserInfo.GraphQLQuery != "":
		b, _ := json.Marshal(map[string]string{"query": p.UserInfo.GraphQLQuery})
		c.UserInfoBody, c.UserInfoMethod = string(b), "POST"
	case p.UserInfo.Body != "":
		c.UserInfoBody, c.UserInfoMethod = p.UserInfo.Body, "POST"
	}
	for k, v := range p.Headers {
		if c.Headers == nil {
			c.Headers = map[string]string{}
		}
		c.Headers[http.CanonicalHeaderKey(k)] = v
	}
	for k, v := range p.AuthParams {
		if c.AuthParams == nil {
			c.AuthParams = map[string]string{}
		}
		c.AuthParams[k] = v
	}
	return c
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// SessionCookie signs login in at the provider, for a browser's jar.
func (s *Server) SessionCookie(login string) *http.Cookie {
	v := random(24)
	s.mu.Lock()
	s.sessions[v] = login
	s.mu.Unlock()
	return &http.Cookie{Name: "fake_session", Value: v, Path: "/"}
}

// Requests returns what the server has seen so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// AccountID is the id the provider gives login's account, as Latchkey stores it.
func (s *Server) AccountID(login string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.accountLocked(login)
	if s.p.AccountIDOf != nil {
		return s.p.AccountIDOf(a)
	}
	return a.ID
}

// RefreshPath is where the provider takes refreshes: Provider.RefreshPath, else Paths.Token.
func (s *Server) RefreshPath() string { return orDefault(s.p.RefreshPath, s.p.Paths.Token) }

// RevokePath is the path of the provider's revocation endpoint for this server's client.
func (s *Server) RevokePath() string { return s.revokePath() }

// Live reports whether the access token works.
func (s *Server) Live(at string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.access[at]
	return g != nil && (g.expires.IsZero() || s.o.Now().Before(g.expires))
}

// LiveRefresh reports whether the refresh token works.
func (s *Server) LiveRefresh(rt string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refresh[rt] != nil
}

// RevokeAll ends every token the provider issued to login, as a person who removes the app in
// the provider's settings does: the next refresh is refused.
func (s *Server) RevokeAll(login string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range []map[string]*grant{s.access, s.refresh} {
		for k, g := range m {
			if g.login == login {
				delete(m, k)
			}
		}
	}
}

// SetRefreshUnavailable makes every refresh fail as an outage does: 503 with
// temporarily_unavailable, the refresh token untouched.
func (s *Server) SetRefreshUnavailable(down bool) {
	s.mu.Lock()
	s.refreshDown = down
	s.mu.Unlock()
}

func (s *Server) revokePath() string {
	return strings.ReplaceAll(s.p.Paths.Revoke, "{client_id}", url.PathEscape(s.o.ClientID))
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, ok := s.record(w, r)
	if !ok {
		return
	}
	switch {
	case r.URL.Path == s.p.Paths.Authorize && r.Method == http.MethodGet:
		s.authorize(w, r)
	case r.URL.Path == s.p.Paths.Token && r.Method == http.MethodPost:
		if s.p.RefreshPath != "" && req.Params.Get("grant_type") == "refresh_token" {
			s.tokenError(w, "unsupported_grant_type", true)
			return
		}
		s.token(w, req, "http://"+r.Host)
	case s.p.RefreshPath != "" && r.URL.Path == s.p.RefreshPath && r.Method == http.MethodPost:
		s.token(w, req, "http://"+r.Host)
	case r.URL.Path == s.p.Paths.UserInfo:
		a, ok := s.bearer(r)
		if s.p.UserInfo == nil {
			if !ok {
				writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "invalid_token"})
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"id": a.ID, "email": a.Email, "name": a.Name})
			return
		}
		s.p.UserInfo(w, r, req, a, ok)
	case s.p.Paths.Revoke != "" && r.URL.Path == s.revokePath():
		s.revoke(w, req)
	default:
		if h := s.p.Extra[r.URL.Path]; h != nil {
			h(s, w, r)
			return
		}
		http.NotFound(w, r)
	}
}

// record reads the request's parameters and client authentication and keeps them.
func (s *Server) record(w http.ResponseWriter, r *http.Request) (Request, bool) {
	req := Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Params: url.Values{}}
	req.ContentType, _, _ = mime.ParseMediaType(r.Header.Get("Content-Type"))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<16))
	if err != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return req, false
	}
	switch req.ContentType {
	case "application/x-www-form-urlencoded":
		req.Params, _ = url.ParseQuery(string(body))
	case "application/json":
		var obj map[string]any
		if json.Unmarshal(body, &obj) == nil {
			for k, v := range obj {
				if str, ok := v.(string); ok {
					req.Params.Set(k, str)
				}
			}
		}
	}
	inBody := req.Params.Get("client_secret") != ""
	if id, sec, ok := r.BasicAuth(); ok {
		req.ClientAuth, req.Params = "basic", withCredentials(req.Params, id, sec)
		if inBody {
			req.ClientAuth = "both"
		}
	} else if inBody {
		req.ClientAuth = "post"
	}
	s.mu.Lock()
	s.requests = append(s.requests, req)
	s.mu.Unlock()
	return req, true
}

func withCredentials(p url.Values, id, sec string) url.Values {
	// RFC 6749 §2.3.1: the Basic credentials are form-encoded first.
	if v, err := url.QueryUnescape(id); err == nil {
		id = v
	}
	if v, err := url.QueryUnescape(sec); err == nil {
		sec = v
	}
	out := url.Values{}
	for k, v := range p {
		out[k] = v
	}
	out.Set("client_id", id)
	out.Set("client_secret", sec)
	return out
}

func (s *Server) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("client_id") != s.o.ClientID || q.Get("redirect_uri") != s.o.RedirectURI {
		http.Error(w, "unknown client or redirect_uri", http.StatusBadRequest)
		return
	}
	if q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" {
		http.Error(w, "PKCE S256 required", http.StatusBadRequest)
		return
	}
	scope := q.Get("scope")
	if s.p.Authorize != nil {
		var refusal string
		if scope, refusal = s.p.Authorize(q); refusal != "" {
			http.Error(w, refusal, http.StatusBadRequest)
			return
		}
	}
	c, err := r.Cookie("fake_session")
	s.mu.Lock()
	login := ""
	if err == nil {
		login = s.sessions[c.Value]
	}
	code := random(20)
	if login != "" {
		s.codes[code] = &grant{login: login, scope: scope, challenge: q.Get("code_challenge"), expires: s.o.Now().Add(10 * time.Minute)}
	}
	s.mu.Unlock()
	if login == "" {
		http.Error(w, "sign in first", http.StatusUnauthorized)
		return
	}
	u, _ := url.Parse(s.o.RedirectURI)
	back := u.Query()
	back.Set("code", code)
	back.Set("state", q.Get("state"))
	u.RawQuery = back.Encode()
	http.Redirect(w, r, u.String(), http.StatusFound)
}

// tokenError answers a refused token request in the provider's format.
func (s *Server) tokenError(w http.ResponseWriter, code string, refresh ...bool) {
	if s.p.TokenError != nil {
		s.p.TokenError(w, code, len(refresh) > 0 && refresh[0])
		return
	}
	writeJSON(w, http.StatusBadRequest, map[string]any{"error": code})
}

// checkToken refuses a token request in a format the provider does not take.
func (s *Server) checkToken(w http.ResponseWriter, req Request) bool {
	if s.p.CheckToken != nil {
		return s.p.CheckToken(w, req)
	}
	want := "application/x-www-form-urlencoded"
	if s.p.JSONRequests {
		want = "application/json"
	}
	if req.ContentType != want || (s.p.ClientAuth != "" && req.ClientAuth != s.p.ClientAuth) || req.ClientAuth == "both" {
		s.tokenError(w, "invalid_request")
		return false
	}
	return true
}

func (s *Server) token(w http.ResponseWriter, req Request, base string) {
	if !s.checkToken(w, req) {
		return
	}
	time.Sleep(s.o.TokenDelay)
	p := req.Params
	if !s.clientAuthenticated(req, base) {
		s.tokenError(w, "invalid_client")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.o.Now()
	switch p.Get("grant_type") {
	case "authorization_code":
		g := s.codes[p.Get("code")]
		delete(s.codes, p.Get("code"))
		if g == nil || !now.Before(g.expires) || p.Get("redirect_uri") != s.o.RedirectURI {
			s.tokenError(w, "invalid_grant")
			return
		}
		sum := sha256.Sum256([]byte(p.Get("code_verifier")))
		if base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge {
			s.tokenError(w, "invalid_grant")
			return
		}
		is := s.issueLocked(g.login, g.scope, now, "")
		is.Base, is.Sign, is.Forged, is.ClientID = base, s.signIDToken, s.forged, s.o.ClientID
		s.forged = nil
		writeJSON(w, http.StatusOK, s.answer(is, s.accountLocked(g.login)))
	case "refresh_token":
		if s.refreshDown {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": "temporarily_unavailable"})
			return
		}
		rt := p.Get("refresh_token")
		g := s.refresh[rt]
		if g == nil {
			s.tokenError(w, "invalid_grant", true)
			return
		}
		delete(s.access, g.pair)
		keep := ""
		if s.p.RotatesRefresh {
			delete(s.refresh, rt)
		} else {
			keep = rt
		}
		is := s.issueLocked(g.login, g.scope, now, keep)
		is.Refreshed, is.Base, is.Sign, is.ClientID = true, base, s.signIDToken, s.o.ClientID
		writeJSON(w, http.StatusOK, s.answer(is, s.accountLocked(g.login)))
	default:
		s.tokenError(w, "unsupported_grant_type")
	}
}

func (s *Server) answer(is Issued, a Account) map[string]any {
	if s.p.Answer != nil {
		return s.p.Answer(is, a)
	}
	return RFC6749Answer(is)
}

// NumberID names an account by its number (GitHub, GitLab).
func NumberID(a Account) string { return strconv.FormatInt(a.Number, 10) }

// RFC6749Answer is the token answer of RFC 6749 §5.1.
func RFC6749Answer(is Issued) map[string]any {
	out := map[string]any{"access_token": is.Access, "token_type": "Bearer"}
	if is.Scope != "" {
		out["scope"] = is.Scope
	}
	if is.ExpiresIn > 0 {
		out["expires_in"] = is.ExpiresIn
	}
	if is.Refresh != "" {
		out["refresh_token"] = is.Refresh
	}
	return out
}

// issueLocked issues an access token and, when tokens expire (or the provider always gives
// one), a refresh token: keep when the provider keeps the one used, else a new one.
func (s *Server) issueLocked(login, scope string, now time.Time, keep string) Issued {
	is := Issued{Access: s.p.TokenPrefix + random(24), Scope: scope}
	g := &grant{login: login, scope: scope}
	s.access[is.Access] = g
	if s.o.AccessTokenTTL > 0 || s.p.AlwaysRefreshToken {
		is.Refresh = keep
		if is.Refresh == "" {
			is.Refresh = s.p.TokenPrefix + "refresh-" + random(24)
		}
		g.pair = is.Refresh
		s.refresh[is.Refresh] = &grant{login: login, scope: scope, pair: is.Access}
	}
	if s.o.AccessTokenTTL > 0 {
		g.expires = now.Add(s.o.AccessTokenTTL)
		is.ExpiresIn = int64(s.o.AccessTokenTTL / time.Second)
	}
	return is
}

func (s *Server) accountLocked(login string) Account {
	for _, a := range s.o.Accounts {
		if a.Login == login {
			return a
		}
	}
	return Account{}
}

// bearer is the account whose live access token the request carries.
func (s *Server) bearer(r *http.Request) (Account, bool) {
	scheme, tok, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "bearer") {
		return Account{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.access[tok]
	if g == nil || (!g.expires.IsZero() && !s.o.Now().Before(g.expires)) {
		return Account{}, false
	}
	return s.accountLocked(g.login), true
}

func (s *Server) revoke(w http.ResponseWriter, req Request) {
	var tok string
	switch {
	case s.p.RevokeLive != nil:
		if tok = s.p.RevokeLive(w, req, s.Live); tok == "" {
			return
		}
	case s.p.Revoke != nil:
		if tok = s.p.Revoke(w, req); tok == "" {
			return
		}
	default:
		// RFC 7009 §2.1: a form, the client authenticated as at the token endpoint; §2.2: 200
		// whether or not the token was known.
		if req.ContentType != "application/x-www-form-urlencoded" || req.Params.Get("client_id") != s.o.ClientID ||
			subtle.ConstantTimeCompare([]byte(req.Params.Get("client_secret")), []byte(s.o.ClientSecret)) != 1 {
			writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "invalid_client"})
			return
		}
		tok = req.Params.Get("token")
		if s.p.RevokeRefusesUnknown && !s.known(tok) {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_token", "error_description": "invalid token"})
			return
		}
		w.WriteHeader(http.StatusOK)
	}
	s.RevokeToken(tok)
}

func (s *Server) known(tok string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.access[tok] != nil || s.refresh[tok] != nil
}

// RevokeToken ends tok and the token paired with it.
func (s *Server) RevokeToken(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.access[tok]; g != nil {
		delete(s.access, tok)
		delete(s.refresh, g.pair)
	}
	if g := s.refresh[tok]; g != nil {
		delete(s.refresh, tok)
		delete(s.access, g.pair)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func random(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

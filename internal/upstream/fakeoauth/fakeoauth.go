// Package fakeoauth is an in-process OAuth 2.0 service that answers in the wire format of one
// of three services whose dialects differ from RFC 6749, so tests can run a connection through
// the real callback and vault code against each: Slack (user scopes in user_scope, the person's
// token nested in authed_user, errors as HTTP 200 {"ok": false}), Notion (JSON token requests
// with Basic credentials, a Notion-Version header on every call, the account in the bot user's
// owner) and Linear (comma-separated scopes, a GraphQL API). Each shape's fixtures name the
// documentation page they follow.
//
// Like fakegithub, it skips its approval page: a browser holding SessionCookie(login) is sent
// straight back to the callback with a code. It records every request (Requests) so a test can
// check what Latchkey sent: how the client authenticated, the content type, the headers.
package fakeoauth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/netguard"
)

// Shape is the service whose wire format the server speaks.
type Shape string

// The shapes.
const (
	Slack  Shape = "slack"
	Notion Shape = "notion"
	Linear Shape = "linear"
)

// NotionVersion is the Notion-Version the Notion shape requires on its API calls.
const NotionVersion = "2022-06-28"

// Account is a person at the service.
type Account struct {
	ID, Login, Name, Email string
}

// Options configure a Server.
type Options struct {
	Shape                  Shape
	ClientID, ClientSecret string
	// RedirectURI is the app's one registered callback, matched exactly.
	RedirectURI string
	Accounts    []Account
	Now         func() time.Time
	// AccessTokenTTL > 0 issues expiring access tokens with a rotating refresh token (Slack with
	// token rotation on, Linear); 0 issues tokens without expires_in and without refresh token.
	AccessTokenTTL time.Duration
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

// Paths of each shape, relative to the server's URL.
type Paths struct {
	Authorize, Token, UserInfo, Revoke string
}

// PathsOf returns the paths a shape serves, those of the real service.
func PathsOf(s Shape) Paths {
	switch s {
	case Slack:
		// https://docs.slack.dev/authentication/installing-with-oauth
		return Paths{"/oauth/v2/authorize", "/api/oauth.v2.access", "/api/auth.test", "/api/auth.revoke"}
	case Notion:
		// https://developers.notion.com/reference/authorization
		return Paths{"/v1/oauth/authorize", "/v1/oauth/token", "/v1/users/me", "/v1/oauth/revoke"}
	default:
		// https://linear.app/developers/oauth-2-0-authentication
		return Paths{"/oauth/authorize", "/oauth/token", "/graphql", "/oauth/revoke"}
	}
}

// Server is the fake service. It is an http.Handler and safe for concurrent use.
type Server struct {
	o     Options
	paths Paths

	mu       sync.Mutex
	sessions map[string]string // cookie value → login
	codes    map[string]*grant
	access   map[string]*grant
	refresh  map[string]*grant
	requests []Request
}

type grant struct {
	login, scope, challenge string
	expires                 time.Time // zero: never
	pair                    string
}

// New returns a server for o.
func New(o Options) *Server {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Server{o: o, paths: PathsOf(o.Shape), sessions: map[string]string{}, codes: map[string]*grant{},
		access: map[string]*grant{}, refresh: map[string]*grant{}}
}

// Connector is a compiled connector for this server at baseURL as the catalog's preset of the
// shape describes it (internal/upstream/catalog/presets), with the service's URLs replaced.
func (s *Server) Connector(baseURL, key, callbackURL string) *config.Connector {
	ns, name, _ := strings.Cut(key, "/")
	c := &config.Connector{
		Key: key, Namespace: ns, Name: name, DisplayName: map[Shape]string{Slack: "Slack", Notion: "Notion", Linear: "Linear"}[s.o.Shape],
		Preset: string(s.o.Shape), Audience: string(s.o.Shape),
		CallbackURL: callbackURL, ClientID: s.o.ClientID, ClientSecret: s.o.ClientSecret, PKCE: true,
		AuthURL: baseURL + s.paths.Authorize, TokenURL: baseURL + s.paths.Token, UserInfoURL: baseURL + s.paths.UserInfo,
		RevocationURL: baseURL + s.paths.Revoke, RevocationStyle: config.RevokeRFC7009, UserInfoMethod: "GET",
		TokenAuth:       config.TokenAuthPost,
		AllowedNetworks: netguard.Loopback,
	}
	switch s.o.Shape {
	case Slack:
		c.TokenAuth, c.AccessTokenField, c.ScopeSeparator, c.ScopeParam = config.TokenAuthBasic, "authed_user.access_token", ",", "user_scope"
		c.UserInfoMethod, c.AccountIDField, c.AccountNameField = "POST", "user_id", "user"
		c.Scopes = []string{"channels:history", "chat:write"}
	case Notion:
		c.TokenAuth, c.TokenRequestJSON = config.TokenAuthBasic, true
		c.Headers = map[string]string{"Notion-Version": NotionVersion}
		c.AuthParams = map[string]string{"owner": "user"}
		c.AccountIDField, c.AccountNameField = "bot.owner.user.id", "bot.owner.user.person.email"
	case Linear:
		c.ScopeSeparator, c.Scopes = ",", []string{"read", "write"}
		c.UserInfoMethod, c.UserInfoBody = "POST", `{"query":"{ viewer { id name email } }"}`
		c.AccountIDField, c.AccountNameField = "data.viewer.id", "data.viewer.email"
	}
	return c
}

// SessionCookie signs login in at the service, for a browser's jar.
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

// RevokeAll ends every token the service issued to login, as a person who removes the app in
// the service's settings does: the next refresh is refused.
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

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, ok := s.record(w, r)
	if !ok {
		return
	}
	switch {
	case r.URL.Path == s.paths.Authorize && r.Method == http.MethodGet:
		s.authorize(w, r)
	case r.URL.Path == s.paths.Token && r.Method == http.MethodPost:
		s.token(w, req)
	case r.URL.Path == s.paths.UserInfo:
		s.userInfo(w, r, req)
	case r.URL.Path == s.paths.Revoke && r.Method == http.MethodPost:
		s.revoke(w, req)
	default:
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
	c, err := r.Cookie("fake_session")
	s.mu.Lock()
	login := ""
	if err == nil {
		login = s.sessions[c.Value]
	}
	var scope string
	switch s.o.Shape {
	case Slack:
		// https://docs.slack.dev/authentication/installing-with-oauth: user_scope, comma-separated.
		scope = q.Get("user_scope")
	case Notion:
		if q.Get("owner") != "user" {
			s.mu.Unlock()
			http.Error(w, "owner=user required", http.StatusBadRequest)
			return
		}
	default:
		// https://linear.app/developers/oauth-2-0-authentication: "Comma separated list of scopes".
		scope = q.Get("scope")
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

// tokenError answers a refused token request in the shape's format.
func (s *Server) tokenError(w http.ResponseWriter, code string) {
	if s.o.Shape == Slack {
		// https://docs.slack.dev/reference/methods/oauth.v2.access: errors are HTTP 200 with
		// {"ok": false, "error": ...}.
		writeJSON(w, http.StatusOK, map[string]any{"ok": false, "error": code})
		return
	}
	writeJSON(w, http.StatusBadRequest, map[string]any{"error": code})
}

func (s *Server) token(w http.ResponseWriter, req Request) {
	p := req.Params
	switch s.o.Shape {
	case Notion:
		// https://developers.notion.com/reference/create-a-token: a JSON body and the client's
		// Basic credentials.
		if req.ContentType != "application/json" || req.ClientAuth != "basic" {
			writeJSON(w, http.StatusBadRequest, map[string]any{"object": "error", "status": 400, "code": "invalid_request", "message": "body must be JSON, client authenticated with Basic"})
			return
		}
	default:
		if req.ContentType != "application/x-www-form-urlencoded" {
			s.tokenError(w, "invalid_request")
			return
		}
	}
	if p.Get("client_id") != s.o.ClientID || subtle.ConstantTimeCompare([]byte(p.Get("client_secret")), []byte(s.o.ClientSecret)) != 1 {
		s.tokenError(w, "invalid_client")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.o.Now()
	switch p.Get("grant_type") {
	case "authorization_code", "":
		g := s.codes[p.Get("code")]
		delete(s.codes, p.Get("code"))
		if g == nil || !now.Before(g.expires) || p.Get("redirect_uri") != s.o.RedirectURI {
			s.tokenError(w, "invalid_code")
			return
		}
		sum := sha256.Sum256([]byte(p.Get("code_verifier")))
		if base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge {
			s.tokenError(w, "invalid_code_verifier")
			return
		}
		writeJSON(w, http.StatusOK, s.codeAnswerLocked(g, now))
	case "refresh_token":
		g := s.refresh[p.Get("refresh_token")]
		if g == nil {
			if s.o.Shape == Slack {
				s.tokenError(w, "invalid_refresh_token")
			} else {
				s.tokenError(w, "invalid_grant")
			}
			return
		}
		delete(s.refresh, p.Get("refresh_token")) // rotation
		delete(s.access, g.pair)
		at, rt, exp := s.issueLocked(g.login, g.scope, now)
		// https://docs.slack.dev/authentication/using-token-rotation: a refresh answers at the
		// top level, for the token refreshed; Linear answers as RFC 6749 does.
		out := map[string]any{"access_token": at, "token_type": "Bearer", "expires_in": exp, "refresh_token": rt, "scope": g.scope}
		if s.o.Shape == Slack {
			out["ok"], out["token_type"] = true, "user"
		}
		writeJSON(w, http.StatusOK, out)
	default:
		s.tokenError(w, "unsupported_grant_type")
	}
}

func (s *Server) codeAnswerLocked(g *grant, now time.Time) map[string]any {
	at, rt, exp := s.issueLocked(g.login, g.scope, now)
	a := s.accountLocked(g.login)
	switch s.o.Shape {
	case Slack:
		// https://docs.slack.dev/reference/methods/oauth.v2.access: the app's bot token at the
		// top level, the person's token in authed_user.
		user := map[string]any{"id": a.ID, "scope": g.scope, "access_token": at, "token_type": "user"}
		if rt != "" {
			user["refresh_token"], user["expires_in"] = rt, exp
		}
		bot := "xoxb-" + random(24)
		s.access[bot] = &grant{login: "bot"}
		return map[string]any{"ok": true, "app_id": "A0FAKE", "authed_user": user, "scope": "commands",
			"token_type": "bot", "access_token": bot, "bot_user_id": "B0FAKE",
			"team": map[string]any{"id": "T0FAKE", "name": "Fake Team"}, "enterprise": nil, "is_enterprise_install": false}
	case Notion:
		// https://developers.notion.com/reference/create-a-token
		out := map[string]any{"access_token": at, "token_type": "bearer", "bot_id": "b0t-" + a.ID,
			"workspace_name": "Fake Workspace", "workspace_id": "w0rkspace", "workspace_icon": nil,
			"owner": map[string]any{"type": "user", "user": notionUser(a)}, "duplicated_template_id": nil, "request_id": random(8)}
		if rt != "" {
			out["refresh_token"] = rt
		}
		return out
	default:
		// https://linear.app/developers/oauth-2-0-authentication
		out := map[string]any{"access_token": at, "token_type": "Bearer", "scope": strings.ReplaceAll(g.scope, ",", " ")}
		if rt != "" {
			out["refresh_token"], out["expires_in"] = rt, exp
		}
		return out
	}
}

func notionUser(a Account) map[string]any {
	return map[string]any{"object": "user", "id": a.ID, "name": a.Name, "avatar_url": nil, "type": "person", "person": map[string]any{"email": a.Email}}
}

// issueLocked issues an access token, and a refresh token when tokens expire.
func (s *Server) issueLocked(login, scope string, now time.Time) (at, rt string, expiresIn int64) {
	prefix := map[Shape]string{Slack: "xoxp-", Notion: "ntn_", Linear: "lin_oauth_"}[s.o.Shape]
	at = prefix + random(24)
	g := &grant{login: login, scope: scope}
	s.access[at] = g
	if s.o.AccessTokenTTL > 0 {
		rt = prefix + "refresh-" + random(24)
		g.expires, g.pair = now.Add(s.o.AccessTokenTTL), rt
		s.refresh[rt] = &grant{login: login, scope: scope, pair: at}
		expiresIn = int64(s.o.AccessTokenTTL / time.Second)
	}
	return at, rt, expiresIn
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
	if g == nil || (!g.expires.IsZero() && !s.o.Now().Before(g.expires)) || g.login == "bot" {
		return Account{}, false
	}
	return s.accountLocked(g.login), true
}

func (s *Server) userInfo(w http.ResponseWriter, r *http.Request, req Request) {
	switch s.o.Shape {
	case Slack:
		// https://docs.slack.dev/reference/methods/auth.test
		a, ok := s.bearer(r)
		if !ok {
			writeJSON(w, http.StatusOK, map[string]any{"ok": false, "error": "invalid_auth"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"ok": true, "url": "https://fake.slack.com/", "team": "Fake Team",
			"user": a.Login, "team_id": "T0FAKE", "user_id": a.ID, "is_enterprise_install": false})
	case Notion:
		// https://developers.notion.com/changelog/retrieve-information-about-your-token (the
		// bot user and its owner; the version header is required on every API call).
		if r.Method != http.MethodGet || r.Header.Get("Notion-Version") != NotionVersion {
			writeJSON(w, http.StatusBadRequest, map[string]any{"object": "error", "status": 400, "code": "missing_version", "message": "Notion-Version header failed validation"})
			return
		}
		a, ok := s.bearer(r)
		if !ok {
			writeJSON(w, http.StatusUnauthorized, map[string]any{"object": "error", "status": 401, "code": "unauthorized"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"object": "user", "id": "b0t-" + a.ID, "name": "Latchkey", "type": "bot",
			"bot": map[string]any{"owner": map[string]any{"type": "user", "user": notionUser(a)}, "workspace_name": "Fake Workspace"}})
	default:
		// https://linear.app/developers/graphql: POST, a JSON body with the query.
		if r.Method != http.MethodPost || req.ContentType != "application/json" || !strings.Contains(req.Params.Get("query"), "viewer") {
			writeJSON(w, http.StatusBadRequest, map[string]any{"errors": []any{map[string]any{"message": "POST a JSON body with a query"}}})
			return
		}
		a, ok := s.bearer(r)
		if !ok {
			writeJSON(w, http.StatusUnauthorized, map[string]any{"errors": []any{map[string]any{"message": "Authentication required"}}})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"data": map[string]any{"viewer": map[string]any{"id": a.ID, "name": a.Name, "email": a.Email}}})
	}
}

func (s *Server) revoke(w http.ResponseWriter, req Request) {
	tok := req.Params.Get("token")
	if s.o.Shape == Notion {
		// https://developers.notion.com/reference/revoke-token: Basic credentials, JSON {token},
		// Notion-Version.
		if req.ClientAuth != "basic" || req.ContentType != "application/json" || req.Header.Get("Notion-Version") != NotionVersion {
			writeJSON(w, http.StatusBadRequest, map[string]any{"object": "error", "status": 400, "code": "invalid_request"})
			return
		}
	}
	s.mu.Lock()
	if g := s.access[tok]; g != nil {
		delete(s.access, tok)
		delete(s.refresh, g.pair)
	}
	if g := s.refresh[tok]; g != nil {
		delete(s.refresh, tok)
		delete(s.access, g.pair)
	}
	s.mu.Unlock()
	if s.o.Shape == Slack {
		// https://docs.slack.dev/reference/methods/auth.revoke
		writeJSON(w, http.StatusOK, map[string]any{"ok": true, "revoked": true})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"request_id": random(8)})
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

// Package fakegithub is a real OAuth 2.0 authorization server, in process, with GitHub's shapes:
// the paths, parameters, token formats, error bodies (GitHub answers token errors with 200 and a
// JSON or form body) and its habit of skipping its own approval page for an app the account has
// approved before. That habit is what makes a forwarded authorization URL work, so tests of the
// browser-bound callback need a server that has it.
//
// It is the one thing Latchkey's tests and `make run` fake. Everything it stores is in memory.
//
// Two token styles, as at GitHub:
//   - AccessTokenTTL == 0: an OAuth app; "gho_" tokens that never expire and no refresh token;
//   - AccessTokenTTL > 0: a GitHub App's user tokens; "ghu_" access tokens with expires_in and a
//     "ghr_" refresh token that rotates: using it retires it.
package fakegithub

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/netguard"
)

// Account is a person at the fake GitHub.
type Account struct {
	ID       int64
	Login    string
	Name     string
	Password string
	Repos    []Repo
}

// Repo is one of an account's repositories. Private ones are listed only to tokens with the
// "repo" scope, as at GitHub.
type Repo struct {
	Name    string
	Private bool
}

// Options configure a Server.
type Options struct {
	ClientID, ClientSecret string
	// AppName is shown on the approval page; default "Latchkey".
	AppName  string
	Accounts []Account
	// RedirectURIs are the app's registered callbacks, matched exactly; empty accepts any
	// absolute http(s) URL (handy when the callback's port is not known in advance).
	RedirectURIs []string
	Now          func() time.Time
	// AccessTokenTTL 0 gives classic OAuth app tokens (no expiry, no refresh token); > 0 gives
	// GitHub App style tokens that expire and come with a rotating refresh token.
	AccessTokenTTL time.Duration
	// RefreshTokenTTL is the refresh token lifetime in App mode; default 6 months, as at GitHub.
	RefreshTokenTTL time.Duration
}

// Paths, relative to the server's base URL.
const (
	AuthorizePath   = "/login/oauth/authorize"
	TokenPath       = "/login/oauth/access_token"
	UserPath        = "/user"
	ReposPath       = "/user/repos"
	LoginPath       = "/login"
	SessionPath     = "/session"
	LogoutPath      = "/logout"
	GrantPathFormat = "/applications/%s/grant"
)

const (
	sessionCookie = "user_session"
	codeLifetime  = 10 * time.Minute
	errorURIBase  = "https://docs.github.com/apps/managing-oauth-apps/troubleshooting-oauth-app-access-token-request-errors/"
)

// Server is the fake GitHub. It is an http.Handler and safe for concurrent use.
type Server struct {
	o   Options
	mux *http.ServeMux

	mu        sync.Mutex
	accounts  map[string]*Account        // by login
	sessions  map[string]*session        // by cookie value
	approvals map[string]map[string]bool // login → client id → approved
	codes     map[string]*code           // by code
	access    map[string]*token          // by access token
	refresh   map[string]*token          // by refresh token
	delay     time.Duration
	failRef   bool
	downRef   bool
	// traceparents holds the last W3C traceparent header received at each path.
	traceparents map[string]string

	refreshCalls  atomic.Int64
	exchangeCalls atomic.Int64
	userCalls     atomic.Int64
}

type session struct {
	login string
	csrf  string
}

type code struct {
	login, clientID, redirectURI, scope, challenge string
	expires                                        time.Time
}

type token struct {
	login, clientID, scope string
	expires                time.Time // zero: never
	pair                   string    // the access token issued with a refresh token, and vice versa
}

// New returns a server for o.
func New(o Options) *Server {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.AppName == "" {
		o.AppName = "Latchkey"
	}
	if o.RefreshTokenTTL == 0 {
		o.RefreshTokenTTL = 184 * 24 * time.Hour
	}
	s := &Server{
		o:         o,
		mux:       http.NewServeMux(),
		accounts:  map[string]*Account{},
		sessions:  map[string]*session{},
		approvals: map[string]map[string]bool{},
		codes:     map[string]*code{},
		access:    map[string]*token{},
		refresh:   map[string]*token{},

		traceparents: map[string]string{},
	}
	for i := range o.Accounts {
		a := o.Accounts[i]
		s.accounts[a.Login] = &a
	}
	s.mux.HandleFunc("GET "+AuthorizePath, s.authorize)
	s.mux.HandleFunc("POST "+AuthorizePath, s.decide)
	s.mux.HandleFunc("GET "+LoginPath, s.loginPage)
	s.mux.HandleFunc("POST "+SessionPath, s.signIn)
	s.mux.HandleFunc("POST "+LogoutPath, s.signOut)
	s.mux.HandleFunc("POST "+TokenPath, s.api(s.token))
	s.mux.HandleFunc("GET "+UserPath, s.api(s.user))
	s.mux.HandleFunc("GET "+ReposPath, s.api(s.repos))
	s.mux.HandleFunc("DELETE /applications/{client_id}/grant", s.api(s.appDelete(s.deleteGrantLocked)))
	s.mux.HandleFunc("DELETE /applications/{client_id}/token", s.api(s.appDelete(s.deleteTokenLocked)))
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if tp := r.Header.Get("Traceparent"); tp != "" {
		s.mu.Lock()
		s.traceparents[r.URL.Path] = tp
		s.mu.Unlock()
	}
	s.mux.ServeHTTP(w, r)
}

// Traceparent returns the last W3C traceparent header a request to path carried ("" when
// none did), so tests can check that Latchkey propagates its trace context.
func (s *Server) Traceparent(path string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.traceparents[path]
}

// Connector returns a compiled connector that talks to this server at baseURL, as the GitHub
// preset would, with the given fixed callback.
func (s *Server) Connector(baseURL, callbackURL string) *config.Connector {
	baseURL = strings.TrimSuffix(baseURL, "/")
	return &config.Connector{
		Key:              "default/github",
		Namespace:        "default",
		Name:             "github",
		DisplayName:      "GitHub",
		Preset:           "github",
		Audience:         "github",
		CallbackURL:      callbackURL,
		AuthURL:          baseURL + AuthorizePath,
		TokenURL:         baseURL + TokenPath,
		UserInfoURL:      baseURL + UserPath,
		RevocationURL:    baseURL + fmt.Sprintf(GrantPathFormat, "{client_id}"),
		RevocationStyle:  config.RevokeGitHubGrant,
		ClientID:         s.o.ClientID,
		ClientSecret:     s.o.ClientSecret,
		Scopes:           []string{"repo", "read:user"},
		PKCE:             true,
		AccountIDField:   "id",
		AccountNameField: "login",
		// The fake listens on a loopback address, which a real connector may only reach when its
		// Project allows it (spec.upstreamNetwork.allowedCIDRs): say so, as such a Project would.
		AllowedNetworks: netguard.Loopback,
	}
}

// ---------------------------------------------------------------------------------------------
// Test controls

// RefreshCalls counts refresh_token grants received (whatever their outcome).
func (s *Server) RefreshCalls() int64 { return s.refreshCalls.Load() }

// ExchangeCalls counts authorization_code grants received.
func (s *Server) ExchangeCalls() int64 { return s.exchangeCalls.Load() }

// UserCalls counts requests to /user.
func (s *Server) UserCalls() int64 { return s.userCalls.Load() }

// SetDelay makes every API request (token, user, repos, revocation) wait d before it is
// answered, or until the client gives up.
func (s *Server) SetDelay(d time.Duration) {
	s.mu.Lock()
	s.delay = d
	s.mu.Unlock()
}

// SetFailRefresh makes every refresh answer as GitHub does for a refresh token it no longer
// accepts (bad_refresh_token).
func (s *Server) SetFailRefresh(fail bool) {
	s.mu.Lock()
	s.failRef = fail
	s.mu.Unlock()
}

// SetRefreshUnavailable makes every refresh fail as a service outage does: 503 Service
// Unavailable, the refresh token untouched (it still works once the outage ends).
func (s *Server) SetRefreshUnavailable(down bool) {
	s.mu.Lock()
	s.downRef = down
	s.mu.Unlock()
}

// Approve records that login has approved clientID, so the next authorization skips the page.
func (s *Server) Approve(login, clientID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.approvals[login] == nil {
		s.approvals[login] = map[string]bool{}
	}
	s.approvals[login][clientID] = true
}

// Approved reports whether login has approved clientID.
func (s *Server) Approved(login, clientID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.approvals[login][clientID]
}

// RevokeAll ends every token and approval of login, as revoking the app in GitHub's settings
// does.
func (s *Server) RevokeAll(login string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.approvals, login)
	s.revokeLocked(func(t *token) bool { return t.login == login })
}

// ActiveTokens counts the unexpired access tokens login holds.
func (s *Server) ActiveTokens(login string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.o.Now()
	n := 0
	for _, t := range s.access {
		if t.login == login && t.live(now) {
			n++
		}
	}
	return n
}

// SessionCookie signs login in at the fake GitHub without the form and returns the cookie, for
// a test that puts it into a browser's jar.
func (s *Server) SessionCookie(login string) *http.Cookie {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := random(32)
	s.sessions[v] = &session{login: login, csrf: random(32)}
	return &http.Cookie{Name: sessionCookie, Value: v, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode}
}

func (t *token) live(now time.Time) bool { return t.expires.IsZero() || now.Before(t.expires) }

// revokeLocked removes every access and refresh token that match.
func (s *Server) revokeLocked(match func(*token) bool) {
	for k, t := range s.access {
		if match(t) {
			delete(s.access, k)
		}
	}
	for k, t := range s.refresh {
		if match(t) {
			delete(s.refresh, k)
		}
	}
}

// render writes a page after its status line: an error means the client went away or a
// template is broken, and the test loading the page sees either.
func render(w io.Writer, name string, data any) {
	_ = pages.ExecuteTemplate(w, name, data)
}

// ---------------------------------------------------------------------------------------------
// Browser side: sign-in, authorize, approve

var pages = template.Must(template.New("").Parse(`
{{define "head"}}<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{{.}}</title></head><body>{{end}}
{{define "login"}}{{template "head" "Sign in to GitHub"}}
<h1>Sign in to GitHub</h1>
{{if .Error}}<p role="alert">{{.Error}}</p>{{end}}
<form method="post" action="/session">
<input type="hidden" name="return_to" value="{{.ReturnTo}}">
<label for="login">Username or email address</label> <input id="login" name="login" autocomplete="username" value="{{.Login}}">
<label for="password">Password</label> <input id="password" type="password" name="password" autocomplete="current-password">
<button type="submit">Sign in</button>
</form></body></html>{{end}}
{{define "approve"}}{{template "head" "Authorize application"}}
<h1>Authorize {{.App}}</h1>
<p>{{.App}} wants to access your <strong>{{.Login}}</strong> account.</p>
{{if .Scopes}}<ul>{{range .Scopes}}<li>{{.}}</li>{{end}}</ul>{{end}}
<p>Authorizing will redirect to <strong>{{.RedirectURI}}</strong></p>
<form method="post" action="/login/oauth/authorize">
<input type="hidden" name="authenticity_token" value="{{.CSRF}}">
<input type="hidden" name="client_id" value="{{.ClientID}}">
<input type="hidden" name="redirect_uri" value="{{.RedirectURI}}">
<input type="hidden" name="state" value="{{.State}}">
<input type="hidden" name="scope" value="{{.Scope}}">
<input type="hidden" name="code_challenge" value="{{.Challenge}}">
<input type="hidden" name="code_challenge_method" value="{{.ChallengeMethod}}">
<button type="submit" name="authorize" value="0">Cancel</button>
<button type="submit" name="authorize" value="1">Authorize</button>
</form></body></html>{{end}}
{{define "error"}}{{template "head" "Error"}}<h1>{{.}}</h1></body></html>{{end}}
`))

func pageHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Frame-Options", "deny")
	// No form-action: the sign-in and Authorize forms answer with a redirect to the app's
	// callback on another origin, and browsers apply form-action to that redirect too.
	h.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
	h.Set("Referrer-Policy", "no-referrer")
}

func errorPage(w http.ResponseWriter, status int, msg string) {
	pageHeaders(w)
	w.WriteHeader(status)
	render(w, "error", msg)
}

// authRequest is a validated authorization request.
type authRequest struct {
	clientID, redirectURI, state, scope, challenge, method string
}

// parseAuthRequest checks client_id and redirect_uri before anything could be sent anywhere;
// a bad one gets an error page, never a redirect.
func (s *Server) parseAuthRequest(v url.Values) (authRequest, string) {
	ar := authRequest{
		clientID:    v.Get("client_id"),
		redirectURI: v.Get("redirect_uri"),
		state:       v.Get("state"),
		scope:       normaliseScope(v.Get("scope")),
		challenge:   v.Get("code_challenge"),
		method:      v.Get("code_challenge_method"),
	}
	if ar.clientID == "" || ar.clientID != s.o.ClientID {
		return ar, "Not Found: no application with this client_id"
	}
	if ar.redirectURI == "" {
		if len(s.o.RedirectURIs) == 0 {
			return ar, "The redirect_uri is missing and the application has no registered callback."
		}
		ar.redirectURI = s.o.RedirectURIs[0]
	}
	if len(s.o.RedirectURIs) > 0 {
		if !slices.Contains(s.o.RedirectURIs, ar.redirectURI) {
			return ar, "The redirect_uri is not associated with this application."
		}
	} else if u, err := url.Parse(ar.redirectURI); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Fragment != "" {
		return ar, "The redirect_uri is not a valid URL."
	}
	if ar.challenge != "" && ar.method != "S256" {
		return ar, "code_challenge_method must be S256."
	}
	if ar.challenge == "" && ar.method != "" {
		return ar, "code_challenge_method without code_challenge."
	}
	return ar, ""
}

// normaliseScope turns GitHub's space- or comma-separated scopes into one space-separated list.
func normaliseScope(s string) string {
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' }), " ")
}

func (s *Server) currentSession(r *http.Request) *session {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.sessions[c.Value]
	if sess == nil || s.accounts[sess.login] == nil {
		return nil
	}
	cp := *sess
	return &cp
}

func (s *Server) authorize(w http.ResponseWriter, r *http.Request) {
	ar, problem := s.parseAuthRequest(r.URL.Query())
	if problem != "" {
		errorPage(w, http.StatusBadRequest, problem)
		return
	}
	prompt := r.URL.Query().Get("prompt")
	sess := s.currentSession(r)
	if sess == nil || prompt == "select_account" {
		q := r.URL.Query()
		q.Del("prompt") // once signed in, carry on
		http.Redirect(w, r, LoginPath+"?"+url.Values{"return_to": {AuthorizePath + "?" + q.Encode()}}.Encode(), http.StatusFound)
		return
	}
	if s.Approved(sess.login, ar.clientID) && prompt != "consent" {
		s.issueCode(w, r, sess.login, ar)
		return
	}
	pageHeaders(w)
	render(w, "approve", map[string]any{
		"App": s.o.AppName, "Login": sess.login, "Scopes": strings.Fields(ar.scope), "Scope": ar.scope,
		"CSRF": sess.csrf, "ClientID": ar.clientID, "RedirectURI": ar.redirectURI, "State": ar.state,
		"Challenge": ar.challenge, "ChallengeMethod": ar.method,
	})
}

func (s *Server) decide(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		errorPage(w, http.StatusBadRequest, "Bad request.")
		return
	}
	sess := s.currentSession(r)
	if sess == nil {
		errorPage(w, http.StatusForbidden, "Sign in first.")
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("authenticity_token")), []byte(sess.csrf)) != 1 {
		errorPage(w, http.StatusUnprocessableEntity, "Invalid authenticity token.")
		return
	}
	ar, problem := s.parseAuthRequest(r.PostForm)
	if problem != "" {
		errorPage(w, http.StatusBadRequest, problem)
		return
	}
	if r.PostForm.Get("authorize") != "1" {
		redirectBack(w, r, ar.redirectURI, url.Values{
			"error":             {"access_denied"},
			"error_description": {"The user has denied your application access."},
			"error_uri":         {"https://docs.github.com/apps/managing-oauth-apps/troubleshooting-authorization-request-errors/#access-denied"},
			"state":             {ar.state},
		})
		return
	}
	s.Approve(sess.login, ar.clientID)
	s.issueCode(w, r, sess.login, ar)
}

func (s *Server) issueCode(w http.ResponseWriter, r *http.Request, login string, ar authRequest) {
	c := random(20)
	s.mu.Lock()
	s.codes[c] = &code{
		login: login, clientID: ar.clientID, redirectURI: ar.redirectURI, scope: ar.scope,
		challenge: ar.challenge, expires: s.o.Now().Add(codeLifetime),
	}
	s.mu.Unlock()
	q := url.Values{"code": {c}}
	if ar.state != "" {
		q.Set("state", ar.state)
	}
	redirectBack(w, r, ar.redirectURI, q)
}

// redirectBack appends params to a validated redirect URI, keeping any query it has.
func redirectBack(w http.ResponseWriter, r *http.Request, redirectURI string, params url.Values) {
	u, _ := url.Parse(redirectURI)
	q := u.Query()
	for k, vs := range params {
		if vs[0] != "" {
			q[k] = vs
		}
	}
	u.RawQuery = q.Encode()
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, u.String(), http.StatusFound)
}

// safeReturn keeps return_to on this server.
func safeReturn(p string) string {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.HasPrefix(p, "/\\") || strings.ContainsAny(p, "\r\n") {
		return "/"
	}
	return p
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	pageHeaders(w)
	render(w, "login", map[string]any{"ReturnTo": safeReturn(r.URL.Query().Get("return_to"))})
}

func (s *Server) signIn(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		errorPage(w, http.StatusBadRequest, "Bad request.")
		return
	}
	login, pw := r.PostForm.Get("login"), r.PostForm.Get("password")
	ret := safeReturn(r.PostForm.Get("return_to"))
	s.mu.Lock()
	a := s.accounts[login]
	ok := a != nil && subtle.ConstantTimeCompare([]byte(a.Password), []byte(pw)) == 1
	s.mu.Unlock()
	if !ok {
		pageHeaders(w)
		w.WriteHeader(http.StatusUnauthorized)
		render(w, "login", map[string]any{"ReturnTo": ret, "Login": login, "Error": "Incorrect username or password."})
		return
	}
	http.SetCookie(w, s.SessionCookie(login))
	http.Redirect(w, r, ret, http.StatusFound)
}

func (s *Server) signOut(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		s.mu.Lock()
		delete(s.sessions, c.Value)
		s.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Path: "/", MaxAge: -1})
	http.Redirect(w, r, "/", http.StatusFound)
}

// ---------------------------------------------------------------------------------------------
// API side: token, user, repos, revocation

// api wraps an API handler with the configured delay, abandoned when the client gives up.
func (s *Server) api(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		d := s.delay
		s.mu.Unlock()
		if d > 0 {
			// The server notices a client that gave up only once the request body has been
			// read, so read it before waiting.
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
			if err != nil {
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		h(w, r)
	}
}

// tokenReply writes a token endpoint answer in the format the client asked for: JSON when it
// accepts JSON, otherwise a form-encoded body, as GitHub does. GitHub answers errors with 200.
func tokenReply(w http.ResponseWriter, r *http.Request, fields map[string]any) {
	w.Header().Set("Cache-Control", "no-store")
	if strings.Contains(r.Header.Get("Accept"), "json") {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_ = json.NewEncoder(w).Encode(fields)
		return
	}
	v := url.Values{}
	for k, x := range fields {
		v.Set(k, fmt.Sprint(x))
	}
	w.Header().Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	w.Write([]byte(v.Encode()))
}

func tokenError(w http.ResponseWriter, r *http.Request, code, desc, anchor string) {
	tokenReply(w, r, map[string]any{"error": code, "error_description": desc, "error_uri": errorURIBase + "#" + anchor})
}

func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		tokenError(w, r, "invalid_request", "The request body could not be parsed.", "invalid-request")
		return
	}
	id, sec, basic := r.BasicAuth()
	if !basic {
		id, sec = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	if id != s.o.ClientID || subtle.ConstantTimeCompare([]byte(sec), []byte(s.o.ClientSecret)) != 1 {
		tokenError(w, r, "incorrect_client_credentials", "The client_id and/or client_secret passed are incorrect.", "incorrect-client-credentials")
		return
	}
	switch r.PostForm.Get("grant_type") {
	case "", "authorization_code":
		s.exchangeCalls.Add(1)
		s.exchange(w, r, id)
	case "refresh_token":
		s.refreshCalls.Add(1)
		s.refreshGrant(w, r, id)
	default:
		tokenError(w, r, "unsupported_grant_type", "The grant type is not supported.", "unsupported-grant-type")
	}
}

func (s *Server) exchange(w http.ResponseWriter, r *http.Request, clientID string) {
	f := r.PostForm
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.codes[f.Get("code")]
	now := s.o.Now()
	if c == nil || c.clientID != clientID || !now.Before(c.expires) {
		tokenError(w, r, "bad_verification_code", "The code passed is incorrect or expired.", "bad-verification-code")
		return
	}
	if ru := f.Get("redirect_uri"); ru != "" && ru != c.redirectURI {
		tokenError(w, r, "redirect_uri_mismatch", "The redirect_uri MUST match the registered callback URL for this application.", "redirect-uri-mismatch")
		return
	}
	if c.challenge != "" {
		sum := sha256.Sum256([]byte(f.Get("code_verifier")))
		if subtle.ConstantTimeCompare([]byte(base64.RawURLEncoding.EncodeToString(sum[:])), []byte(c.challenge)) != 1 {
			tokenError(w, r, "bad_verification_code", "The code_verifier does not match the code_challenge.", "bad-verification-code")
			return
		}
	}
	delete(s.codes, f.Get("code")) // codes work once
	tokenReply(w, r, s.issueLocked(c.login, clientID, c.scope, now))
}

func (s *Server) refreshGrant(w http.ResponseWriter, r *http.Request, clientID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.o.Now()
	rt := r.PostForm.Get("refresh_token")
	if s.downRef {
		http.Error(w, "Service Unavailable", http.StatusServiceUnavailable)
		return
	}
	t := s.refresh[rt]
	if s.failRef || t == nil || t.clientID != clientID || !t.live(now) {
		tokenError(w, r, "bad_refresh_token", "The refresh token passed is incorrect or expired.", "bad-refresh-token")
		return
	}
	delete(s.refresh, rt) // rotation: a refresh token works once
	tokenReply(w, r, s.issueLocked(t.login, clientID, t.scope, now))
}

func (s *Server) issueLocked(login, clientID, scope string, now time.Time) map[string]any {
	out := map[string]any{"token_type": "bearer", "scope": strings.ReplaceAll(scope, " ", ",")}
	if s.o.AccessTokenTTL <= 0 {
		at := "gho_" + random(27)
		s.access[at] = &token{login: login, clientID: clientID, scope: scope}
		out["access_token"] = at
		return out
	}
	at, rt := "ghu_"+random(27), "ghr_"+random(54)
	s.access[at] = &token{login: login, clientID: clientID, scope: scope, expires: now.Add(s.o.AccessTokenTTL), pair: rt}
	s.refresh[rt] = &token{login: login, clientID: clientID, scope: scope, expires: now.Add(s.o.RefreshTokenTTL), pair: at}
	out["access_token"] = at
	out["expires_in"] = int64(s.o.AccessTokenTTL / time.Second)
	out["refresh_token"] = rt
	out["refresh_token_expires_in"] = int64(s.o.RefreshTokenTTL / time.Second)
	return out
}

func apiJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "private, no-store")
	w.WriteHeader(status)
	if v != nil {
		_ = json.NewEncoder(w).Encode(v)
	}
}

func badCredentials(w http.ResponseWriter) {
	apiJSON(w, http.StatusUnauthorized, map[string]string{"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest", "status": "401"})
}

// bearer finds the live token in an "Authorization: Bearer X" or "Authorization: token X"
// header.
func (s *Server) bearer(r *http.Request) (*token, *Account) {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || (!strings.EqualFold(scheme, "bearer") && !strings.EqualFold(scheme, "token")) {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.access[strings.TrimSpace(tok)]
	if t == nil || !t.live(s.o.Now()) {
		return nil, nil
	}
	a := s.accounts[t.login]
	if a == nil {
		return nil, nil
	}
	cp, ac := *t, *a
	return &cp, &ac
}

func (s *Server) user(w http.ResponseWriter, r *http.Request) {
	s.userCalls.Add(1)
	t, a := s.bearer(r)
	if t == nil {
		badCredentials(w)
		return
	}
	w.Header().Set("X-OAuth-Scopes", strings.ReplaceAll(t.scope, " ", ", "))
	var name any
	if a.Name != "" {
		name = a.Name
	}
	apiJSON(w, http.StatusOK, map[string]any{
		"login": a.Login, "id": a.ID, "node_id": "U_" + strconv.FormatInt(a.ID, 36),
		"avatar_url": "https://avatars.githubusercontent.com/u/" + strconv.FormatInt(a.ID, 10),
		"html_url":   "https://github.com/" + a.Login, "type": "User", "site_admin": false,
		"name": name, "company": nil, "email": nil,
	})
}

func (s *Server) repos(w http.ResponseWriter, r *http.Request) {
	t, a := s.bearer(r)
	if t == nil {
		badCredentials(w)
		return
	}
	private := slices.Contains(strings.Fields(t.scope), "repo")
	out := []map[string]any{}
	for i, repo := range a.Repos {
		if repo.Private && !private {
			continue
		}
		vis := "public"
		if repo.Private {
			vis = "private"
		}
		out = append(out, map[string]any{
			"id": a.ID*1000 + int64(i), "name": repo.Name, "full_name": a.Login + "/" + repo.Name,
			"private": repo.Private, "visibility": vis, "html_url": "https://github.com/" + a.Login + "/" + repo.Name,
			"owner": map[string]any{"login": a.Login, "id": a.ID},
		})
	}
	apiJSON(w, http.StatusOK, out)
}

// appAuth checks the app's basic credentials on the /applications endpoints and reads the
// token named in the JSON body.
func (s *Server) appAuth(w http.ResponseWriter, r *http.Request) (string, bool) {
	id, sec, ok := r.BasicAuth()
	if !ok || id != s.o.ClientID || r.PathValue("client_id") != id || subtle.ConstantTimeCompare([]byte(sec), []byte(s.o.ClientSecret)) != 1 {
		apiJSON(w, http.StatusNotFound, map[string]string{"message": "Not Found", "documentation_url": "https://docs.github.com/rest/apps/oauth-applications"})
		return "", false
	}
	var body struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&body); err != nil || body.AccessToken == "" {
		apiJSON(w, http.StatusUnprocessableEntity, map[string]string{"message": "Invalid request.", "documentation_url": "https://docs.github.com/rest/apps/oauth-applications"})
		return "", false
	}
	return body.AccessToken, true
}

// appDelete serves GitHub's DELETE /applications/{client_id}/grant and /token: the app
// authenticates and names one of its own access tokens in the body, and remove runs on that
// token with the lock held. A token the app does not hold is 404.
func (s *Server) appDelete(remove func(at string, t *token)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		at, ok := s.appAuth(w, r)
		if !ok {
			return
		}
		s.mu.Lock()
		t := s.access[at]
		if t == nil || t.clientID != s.o.ClientID {
			s.mu.Unlock()
			apiJSON(w, http.StatusNotFound, map[string]string{"message": "Not Found"})
			return
		}
		remove(at, t)
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}
}

// deleteGrantLocked revokes the app's whole authorization for the token's account: every
// token and the approval, so the next authorization shows the approval page again.
func (s *Server) deleteGrantLocked(_ string, t *token) {
	login := t.login
	delete(s.approvals[login], t.clientID)
	s.revokeLocked(func(x *token) bool { return x.login == login && x.clientID == s.o.ClientID })
}

// deleteTokenLocked revokes one access token and the refresh token issued with it.
func (s *Server) deleteTokenLocked(at string, t *token) {
	delete(s.access, at)
	if t.pair != "" {
		delete(s.refresh, t.pair)
	}
}

// random returns n random bytes as unpadded base64url.
func random(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

package stack

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events/audittest"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
)

// What the flow tests moved out of package webhook share: the session cookie, the audit trail,
// a company's OpenID provider (IDP) and a person signed in with it whose agent holds tokens,
// registration requests, and an app's web site serving client ID metadata documents.

// ---------------------------------------------------------------------------------------------
// Sessions and the audit trail

// SessionCookie is the Latchkey session cookie a response set (with a value), or nil.
func SessionCookie(h http.Header) *http.Cookie {
	for _, c := range (&http.Response{Header: h}).Cookies() {
		if strings.Contains(c.Name, "latchkey_session_") && c.Value != "" {
			return c
		}
	}
	return nil
}

// MustSessionCookie is SessionCookie failing the test when the response set none.
func MustSessionCookie(t testing.TB, h http.Header) *http.Cookie {
	t.Helper()
	c := SessionCookie(h)
	if c == nil {
		t.Fatalf("no session cookie in %v", h["Set-Cookie"])
	}
	return c
}

// SignedIn says whether p is the answer to a sign-in that worked: the page that sends the
// browser on, with a session cookie.
func SignedIn(p Page) bool {
	return p.Status == http.StatusOK && p.Continue() != "" && SessionCookie(p.Header) != nil
}

// AuditOf is the project's audit records of action, newest first (Audit, filtered).
func (s *Stack) AuditOf(action string) []store.AuditRecord {
	s.T.Helper()
	var out []store.AuditRecord
	for _, r := range s.Audit() {
		if r.Action == action {
			out = append(out, r)
		}
	}
	return out
}

// NewAuditSink adds an event sink to the running project and returns it, for TrailTo; a
// stack started with Options.Audit has one already (AuditSink, Trail).
func (s *Stack) NewAuditSink() *audittest.Sink {
	s.T.Helper()
	sink := audittest.NewSink(s.T, s.Clock.Now)
	s.Update(func(p *config.Project) { p.EventSinks = append(p.EventSinks, sink.Config()) })
	return sink
}

// TrailTo is Trail for a sink added with NewAuditSink.
func (s *Stack) TrailTo(sink *audittest.Sink, actions ...string) map[string]store.AuditRecord {
	s.T.Helper()
	s.flushAudit()
	return audittest.Trail(s.T, s.Store(), s.Holder(), s.Clock.Now, sink, ProjectKey, actions...)
}

// ExpectAudit checks who did what to whom in r: its actor, subject (target), client, outcome
// and reason.
func ExpectAudit(t testing.TB, r store.AuditRecord, actor, subject, client, outcome, reason string) {
	t.Helper()
	if r.Actor != actor || r.Target != subject || r.ClientID != client || r.Outcome != outcome || r.Reason != reason {
		t.Errorf("%s: actor %q subject %q client %q outcome %q reason %q; want %q %q %q %q %q", r.Action,
			r.Actor, r.Target, r.ClientID, r.Outcome, r.Reason, actor, subject, client, outcome, reason)
	}
}

// ---------------------------------------------------------------------------------------------
// A company's OpenID provider

// The client Latchkey is at the IDP.
const (
	IDPClientID     = "latchkey"
	IDPClientSecret = "idp-secret"
	IDPLabel        = "Sign in with Corp SSO"
)

// IDP is a company's OpenID provider, in process: it approves whoever Login names
// ("carol-123" unless changed; "alice-1" and "bob-2" are its other people) and checks PKCE.
// Like a company's provider, it issues refresh tokens for offline_access, refuses them once
// the person is disabled, names its sessions (sid), and signs back-channel logout tokens with
// its own key. Its fields are read and changed under Lock.
type IDP struct {
	URL string
	Key *ecdsa.PrivateKey

	t   testing.TB
	now func() time.Time
	mu  sync.Mutex

	codes map[string]idpCode
	// Prompts, MaxAges and Scopes record the prompt, max_age and scope parameters of every
	// authorization request.
	Prompts, MaxAges, Scopes []string
	// AuthTime, when set, is the auth_time of the ID tokens it issues (ok false: no
	// auth_time). Unset, ID tokens carry none.
	AuthTime func() (at time.Time, ok bool)
	// Login is the sub of the person the provider signs in next.
	Login string
	Users map[string]*IDPUser
	// refresh maps live refresh tokens to the person and session they belong to; a refresh
	// rotates them.
	refresh map[string]idpGrant
	// Refreshes counts refresh_token grants received; Down makes them answer 503.
	Refreshes int
	Down      bool
	sessions  int
	sids      map[string]string // sub -> sid of their latest sign-in
	// RefreshIDToken: refresh_token grants answer with an ID token too, carrying the person's
	// current claims.
	RefreshIDToken bool
	// KeyFetches counts requests for its key set; NextKey, when set, is published beside Key
	// as "idp-next" (a rotation under way).
	KeyFetches int
	NextKey    *ecdsa.PrivateKey
}

// IDPUser is a person at the IDP.
type IDPUser struct {
	Email, Name string
	Disabled    bool
	// Claims, when set, are added to (or replace) the claims of the person's ID tokens; a nil
	// value leaves the claim out of a refreshed ID token.
	Claims map[string]any
}

type idpGrant struct{ sub, sid string }

type idpCode struct{ nonce, challenge, redirect, scope, sub string }

// Lock and Unlock guard the IDP's exported fields while it serves.
func (f *IDP) Lock()   { f.mu.Lock() }
func (f *IDP) Unlock() { f.mu.Unlock() }

// NewIDP starts a provider on its own listener, stopped when the test ends.
func NewIDP(t testing.TB, now func() time.Time) *IDP {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	f := &IDP{t: t, Key: key, now: now, codes: map[string]idpCode{}, Login: "carol-123", refresh: map[string]idpGrant{},
		sids: map[string]string{},
		Users: map[string]*IDPUser{
			"carol-123": {Email: "carol@corp.example", Name: "Carol"},
			"alice-1":   {Email: "alice@corp.example", Name: "Alice"},
			"bob-2":     {Email: "bob@corp.example", Name: "Bob"},
		}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer": f.URL, "authorization_endpoint": f.URL + "/authorize", "token_endpoint": f.URL + "/token",
			"jwks_uri": f.URL + "/jwks", "id_token_signing_alg_values_supported": []string{"ES256"},
			"response_types_supported": []string{"code"}, "subject_types_supported": []string{"public"},
			"backchannel_logout_supported": true, "backchannel_logout_session_supported": true,
		})
	})
	mux.HandleFunc("GET /jwks", f.jwks)
	mux.HandleFunc("GET /authorize", f.authorize)
	mux.HandleFunc("POST /token", f.token)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

// UseIDP starts an IDP and makes it the project's OpenID provider, with re-checks every
// recheck (0: none).
func (s *Stack) UseIDP(recheck time.Duration) *IDP {
	s.T.Helper()
	idp := NewIDP(s.T, s.Clock.Now)
	s.Update(func(p *config.Project) {
		p.SignIn.OIDC = &config.OIDCProvider{Issuer: idp.URL, ClientID: IDPClientID, ClientSecret: IDPClientSecret,
			Label: IDPLabel, RecheckInterval: recheck}
	})
	return idp
}

// SignInWith signs a new browser in as sub through the project's provider idp and checks the
// account page shows email.
func (s *Stack) SignInWith(idp *IDP, sub, email string) *Browser {
	s.T.Helper()
	idp.Lock()
	idp.Login = sub
	idp.Unlock()
	b := s.Browser()
	p := b.MustGet(s.Issuer + "/sign-in/oidc?return_to=" + url.QueryEscape("/team/demo/account"))
	for range 5 {
		if p.Status != http.StatusFound && p.Status != http.StatusSeeOther || strings.HasPrefix(p.Header.Get("Location"), "/team/demo/account") {
			break
		}
		p = b.MustGet(p.Location())
	}
	if acct := b.MustGet(s.Issuer + "/account"); acct.Status != http.StatusOK || !strings.Contains(acct.Body, email) {
		s.T.Fatalf("%s is not signed in: %d %s", sub, acct.Status, acct.Text())
	}
	return b
}

func (f *IDP) jwks(w http.ResponseWriter, _ *http.Request) {
	f.mu.Lock()
	f.KeyFetches++
	keys := []jose.JSONWebKey{{Key: f.Key.Public(), KeyID: "idp", Algorithm: "ES256", Use: "sig"}}
	if f.NextKey != nil {
		keys = append(keys, jose.JSONWebKey{Key: f.NextKey.Public(), KeyID: "idp-next", Algorithm: "ES256", Use: "sig"})
	}
	f.mu.Unlock()
	_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: keys})
}

func (f *IDP) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("code_challenge_method") != "S256" || q.Get("nonce") == "" || q.Get("client_id") != IDPClientID || len(q.Get("state")) < 8 {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	code := "idp-code-" + q.Get("state")[:8]
	f.mu.Lock()
	u := f.Users[f.Login]
	if u == nil || u.Disabled {
		f.mu.Unlock()
		http.Redirect(w, r, q.Get("redirect_uri")+"?"+url.Values{"error": {"access_denied"}, "state": {q.Get("state")}}.Encode(), http.StatusFound)
		return
	}
	f.codes[code] = idpCode{nonce: q.Get("nonce"), challenge: q.Get("code_challenge"), redirect: q.Get("redirect_uri"),
		scope: q.Get("scope"), sub: f.Login}
	f.Prompts = append(f.Prompts, q.Get("prompt"))
	f.MaxAges = append(f.MaxAges, q.Get("max_age"))
	f.Scopes = append(f.Scopes, q.Get("scope"))
	f.mu.Unlock()
	http.Redirect(w, r, q.Get("redirect_uri")+"?"+url.Values{"code": {code}, "state": {q.Get("state")}}.Encode(), http.StatusFound)
}

func idpFail(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"error":"` + code + `"}`))
}

func (f *IDP) token(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	user, pass, _ := r.BasicAuth()
	if user != IDPClientID || pass != IDPClientSecret {
		idpFail(w, http.StatusUnauthorized, "invalid_client")
		return
	}
	if r.PostForm.Get("grant_type") == "refresh_token" {
		f.refreshGrant(w, r)
		return
	}
	f.mu.Lock()
	c, ok := f.codes[r.PostForm.Get("code")]
	delete(f.codes, r.PostForm.Get("code"))
	f.mu.Unlock()
	sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
	if !ok || base64.RawURLEncoding.EncodeToString(sum[:]) != c.challenge || c.redirect != r.PostForm.Get("redirect_uri") {
		idpFail(w, http.StatusBadRequest, "invalid_grant")
		return
	}
	now := f.now()
	f.mu.Lock()
	f.sessions++
	sid := "idp-session-" + strconv.Itoa(f.sessions)
	f.sids[c.sub] = sid
	u := f.Users[c.sub]
	claims := map[string]any{
		"iss": f.URL, "sub": c.sub, "aud": IDPClientID, "exp": now.Add(time.Hour).Unix(), "iat": now.Unix(),
		"nonce": c.nonce, "email": u.Email, "name": u.Name, "sid": sid,
	}
	maps.Copy(claims, u.Claims)
	authTime := f.AuthTime
	resp := map[string]any{"access_token": "idp-at", "token_type": "Bearer", "expires_in": 3600}
	if slices.Contains(strings.Fields(c.scope), "offline_access") {
		rt := "idp-rt-" + secret.New("")
		f.refresh[rt] = idpGrant{sub: c.sub, sid: sid}
		resp["refresh_token"] = rt
	}
	f.mu.Unlock()
	if authTime != nil {
		if at, ok := authTime(); ok {
			claims["auth_time"] = at.Unix()
		}
	}
	resp["id_token"] = f.Sign(f.Key, "idp", "JWT", claims)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

func (f *IDP) refreshGrant(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Refreshes++
	if f.Down {
		idpFail(w, http.StatusServiceUnavailable, "temporarily_unavailable")
		return
	}
	g, ok := f.refresh[r.PostForm.Get("refresh_token")]
	delete(f.refresh, r.PostForm.Get("refresh_token"))
	if !ok || f.Users[g.sub] == nil || f.Users[g.sub].Disabled {
		idpFail(w, http.StatusBadRequest, "invalid_grant")
		return
	}
	rt := "idp-rt-" + secret.New("")
	f.refresh[rt] = g
	resp := map[string]any{"access_token": "idp-at", "token_type": "Bearer", "expires_in": 3600, "refresh_token": rt}
	if f.RefreshIDToken {
		now := f.now()
		claims := map[string]any{"iss": f.URL, "sub": g.sub, "aud": IDPClientID, "exp": now.Add(time.Hour).Unix(), "iat": now.Unix(),
			"email": f.Users[g.sub].Email}
		maps.Copy(claims, f.Users[g.sub].Claims)
		maps.DeleteFunc(claims, func(_ string, v any) bool { return v == nil }) // nil: left out
		resp["id_token"] = f.Sign(f.Key, "idp", "JWT", claims)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// Sign makes a JWT of type typ with claims, signed with key under kid.
func (f *IDP) Sign(key *ecdsa.PrivateKey, kid, typ string, claims map[string]any) string {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key},
		(&jose.SignerOptions{}).WithHeader("kid", kid).WithType(jose.ContentType(typ)))
	if err != nil {
		f.t.Fatal(err)
	}
	tok, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		f.t.Fatal(err)
	}
	return tok
}

// LogoutClaims are the claims of a valid back-channel logout token for sub (OpenID Connect
// Back-Channel Logout 1.0 §2.4), issued now with a fresh jti.
func (f *IDP) LogoutClaims(sub string) map[string]any {
	now := f.now()
	return map[string]any{
		"iss": f.URL, "aud": IDPClientID, "sub": sub, "iat": now.Unix(), "exp": now.Add(2 * time.Minute).Unix(),
		"jti": "jti-" + secret.New(""), "events": map[string]any{"http://schemas.openid.net/event/backchannel-logout": map[string]any{}},
	}
}

// LogoutToken is a valid back-channel logout token for sub, signed with the provider's key.
func (f *IDP) LogoutToken(sub string) string {
	return f.Sign(f.Key, "idp", "logout+jwt", f.LogoutClaims(sub))
}

// LastSID is the provider's session (sid) of sub's latest sign-in.
func (f *IDP) LastSID(sub string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sids[sub]
}

// LastScope is the scope parameter of the latest authorization request.
func (f *IDP) LastScope() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Scopes[len(f.Scopes)-1]
}

// Disable disables sub at the provider, as an administrator does when someone leaves: no
// more sign-ins, and their refresh tokens are refused.
func (f *IDP) Disable(sub string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Users[sub].Disabled = true
}

// RefreshCount is the number of refresh_token grants the provider received.
func (f *IDP) RefreshCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Refreshes
}

// SetClaims sets the claims sub's ID tokens carry beyond the usual (IDPUser.Claims).
func (f *IDP) SetClaims(sub string, claims map[string]any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Users[sub].Claims = claims
}

// Config is the Project's sign-in with this provider, its button labelled label.
func (f *IDP) Config(label string) *config.OIDCProvider {
	return &config.OIDCProvider{Issuer: f.URL, ClientID: IDPClientID, ClientSecret: IDPClientSecret, Label: label}
}

// SetAuthTime makes fn the auth_time of the ID tokens it issues (ok false: none); nil, none.
func (f *IDP) SetAuthTime(fn func() (at time.Time, ok bool)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.AuthTime = fn
}

// LastPrompt is the prompt parameter of the latest authorization request.
func (f *IDP) LastPrompt() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Prompts[len(f.Prompts)-1]
}

// LastMaxAge is the max_age parameter of the latest authorization request.
func (f *IDP) LastMaxAge() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.MaxAges[len(f.MaxAges)-1]
}

// ---------------------------------------------------------------------------------------------
// Dynamic client registration

// Register posts a client registration request (RFC 7591) of JSON body, without an initial
// access token.
func (s *Stack) Register(body string) Answer {
	s.T.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.Issuer+"/register", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	return s.Send(req)
}

// MustRegister is Register failing the test unless the client is created; it returns the
// client's id.
func (s *Stack) MustRegister(body string) string {
	s.T.Helper()
	r := s.Register(body)
	if r.Status != http.StatusCreated {
		s.T.Fatalf("registration: %d %s", r.Status, r.Raw)
	}
	return r.Str("client_id")
}

// ---------------------------------------------------------------------------------------------
// A person and their agent (Web holding their tokens)

// AgentFor gives Web ("an agent") tokens for the person signed in to b.
func (s *Stack) AgentFor(b *Browser) Answer {
	s.T.Helper()
	return s.CodeFlowAs(b, Web, WebSecret, "openid read", "", "")
}

// BackchannelLogout is the provider posting a logout token to the back-channel logout
// endpoint.
func (s *Stack) BackchannelLogout(token string) Answer {
	s.T.Helper()
	return s.MustPost("/sign-in/backchannel-logout", url.Values{"logout_token": {token}}, "", "")
}

// ExpectSignedOut checks what a person who lost access sees: the account page asks for a
// sign-in, the agent's refresh token is refused, and its access token is no longer active.
func (s *Stack) ExpectSignedOut(who string, b *Browser, agent Answer) {
	s.T.Helper()
	if pg := b.MustGet(s.Issuer + "/account"); pg.Status != http.StatusSeeOther || !strings.Contains(pg.Header.Get("Location"), "/sign-in") {
		s.T.Errorf("%s's account page: %d %q, want a redirect to sign in", who, pg.Status, pg.Header.Get("Location"))
	}
	if r := s.RefreshAs(Web, WebSecret, agent.Str("refresh_token")); r.Status != http.StatusBadRequest || r.Str("error") != "invalid_grant" {
		s.T.Errorf("%s's agent refreshed: %d %s", who, r.Status, r.Raw)
	}
	if s.Active(agent.Str("access_token")) {
		s.T.Errorf("%s's agent's access token is still active", who)
	}
}

// ExpectStillIn checks that a person kept their access; it rotates the agent's refresh token
// and returns the new pair.
func (s *Stack) ExpectStillIn(who string, b *Browser, agent Answer) Answer {
	s.T.Helper()
	if pg := b.MustGet(s.Issuer + "/account"); pg.Status != http.StatusOK {
		s.T.Errorf("%s's account page: %d %q", who, pg.Status, pg.Header.Get("Location"))
	}
	if !s.Active(agent.Str("access_token")) {
		s.T.Errorf("%s's agent's access token was ended", who)
	}
	r := s.RefreshAs(Web, WebSecret, agent.Str("refresh_token"))
	if r.Status != http.StatusOK {
		s.T.Fatalf("%s's agent cannot refresh: %d %s", who, r.Status, r.Raw)
	}
	return r
}

// ---------------------------------------------------------------------------------------------
// An app's web site

// DocSite is an app's web site on 127.0.0.1 (https, its certificate in Pool), serving client
// ID metadata documents (and, in Extra, any other handler by path).
type DocSite struct {
	URL  string
	Pool *x509.CertPool

	mu    sync.Mutex
	docs  map[string][]byte
	extra map[string]http.HandlerFunc
}

// NewDocSite starts a site, stopped when the test ends.
func NewDocSite(t testing.TB) *DocSite {
	s := &DocSite{docs: map[string][]byte{}, extra: map[string]http.HandlerFunc{}}
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		doc, h := s.docs[r.URL.Path], s.extra[r.URL.Path]
		s.mu.Unlock()
		switch {
		case h != nil:
			h(w, r)
		case doc != nil:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(doc)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(ts.Close)
	s.URL = ts.URL
	s.Pool = x509.NewCertPool()
	s.Pool.AddCert(ts.Certificate())
	return s
}

// Handle serves path with h.
func (s *DocSite) Handle(path string, h http.HandlerFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.extra[path] = h
}

// Serve publishes a document at path and returns its URL, the client's id; fields override
// the defaults (a public Claude Code on loopback; "client_id" defaults to the document's own
// URL) and a nil field is left out.
func (s *DocSite) Serve(path string, fields map[string]any) string {
	id := s.URL + path
	doc := map[string]any{
		"client_id": id, "client_name": "Claude Code", "redirect_uris": []string{"http://127.0.0.1/callback"},
		"token_endpoint_auth_method": "none", "grant_types": []string{"authorization_code", "refresh_token"},
		"client_uri": "https://claude.ai/",
	}
	for k, v := range fields {
		if v == nil {
			delete(doc, k)
		} else {
			doc[k] = v
		}
	}
	b, _ := json.Marshal(doc)
	s.mu.Lock()
	s.docs[path] = b
	s.mu.Unlock()
	return id
}

// OnlyRecognisedApps turns the project's spec.redirects.onlyRecognisedApps on or off.
func (s *Stack) OnlyRecognisedApps(on bool) {
	s.Update(func(p *config.Project) { p.Redirects.OnlyRecognisedApps = on })
}

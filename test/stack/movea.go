package stack

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
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
	"latchkey.dev/latchkey/internal/netguard"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/webhook/idjag"
)

// SendJSON sends body (JSON, or nothing when empty) to u with method, as the bearer of
// bearer when set (a registration access token, an initial access token), and reads the
// answer: what a client of the registration endpoints sends.
func (s *Stack) SendJSON(method, u, bearer, body string) Answer {
	s.T.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		s.T.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	return s.Send(req)
}

// ---------------------------------------------------------------------------------------------
// The ID-JAG story

// The ID-JAG story (docs/enterprise-idjag.md) with two Projects on one server: team/demo is
// the company's identity provider, where Alice signs in; team/tools is the authorization
// server of an MCP server, which trusts team/demo's ID-JAGs. A third, test-owned identity
// provider (TestIDP) signs the forged and malformed assertions of the attack tests.
const (
	ToolsKey = "team/tools"
	// ToolsSecret is the secret of team/tools' clients "agent" (Web, known there by that
	// name), "outsider" (trusted by no issuer) and "sneaky" (another redirect URI).
	ToolsSecret = "lk_cs_agent-secret-for-tests-only-0123456789abcd"
	MCPResource = "https://mcp.example/mcp"
	TestIDP     = "https://idp.test"
	OtherIDP    = "https://other-idp.test"
)

// IDJAG is a stack running the ID-JAG story.
type IDJAG struct {
	*Stack
	Tools *config.Project
	// ToolsIssuer is team/tools' issuer.
	ToolsIssuer string
	// IDPKey signs TestIDP's assertions, OtherKey OtherIDP's.
	IDPKey, OtherKey *ecdsa.PrivateKey
}

// NewECKey is a new P-256 key.
func NewECKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func publicSet(kid string, k *ecdsa.PrivateKey) *jose.JSONWebKeySet {
	return &jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &k.PublicKey, KeyID: kid, Algorithm: "ES256", Use: "sig"}}}
}

// NewIDJAG adds team/tools to s and lets team/demo's Web client ask for ID-JAGs for it.
func NewIDJAG(t testing.TB, s *Stack) *IDJAG {
	x := &IDJAG{Stack: s, ToolsIssuer: s.Front.URL + "/team/tools", IDPKey: NewECKey(t), OtherKey: NewECKey(t)}

	// team/demo issues ID-JAGs for team/tools to Web, known there as "agent".
	demo := *s.Project
	demo.Clients = maps.Clone(demo.Clients)
	web := *demo.Clients[Web]
	web.GrantTypes = append([]string{"urn:ietf:params:oauth:grant-type:token-exchange"}, web.GrantTypes...)
	demo.Clients[Web] = &web
	demo.IdentityAssertions = config.IdentityAssertions{
		Audiences: map[string]*config.AssertionAudience{x.ToolsIssuer: {
			Issuer:    x.ToolsIssuer,
			Clients:   map[string]config.AssertionClient{Web: {ResourceClientID: "agent"}},
			Resources: []string{MCPResource},
			Scopes:    []string{"repos:read", "repos:write"},
		}},
	}
	s.Project = &demo

	tools := NewProject(x.ToolsIssuer)
	tools.Key, tools.Name = ToolsKey, "tools"
	declared := func(id string, redirects ...string) *config.Client {
		return &config.Client{ID: id, SecretHash: secret.Hash(ToolsSecret), Name: id, RedirectURIs: redirects,
			GrantTypes: []string{idjag.GrantJWTBearer}, TokenEndpointAuthMethod: "client_secret_basic"}
	}
	tools.Clients["agent"] = declared("agent", "http://127.0.0.1/callback")
	tools.Clients["outsider"] = declared("outsider", "http://127.0.0.1/callback")
	tools.Clients["sneaky"] = declared("sneaky", "https://collector.evil.example/cb")
	tools.IdentityAssertions = config.IdentityAssertions{Issuers: map[string]*config.AssertionIssuer{
		s.Issuer: {Issuer: s.Issuer, JWKSURI: s.Issuer + "/jwks.json", Clients: []string{"agent", "sneaky"},
			Subject: config.AssertionSubjectSub, CreatePeople: true, AllowedNetworks: netguard.Loopback},
		TestIDP: {Issuer: TestIDP, JWKS: publicSet("idp-1", x.IDPKey), Clients: []string{"agent", "sneaky"},
			Subject: config.AssertionSubjectSub, CreatePeople: true},
		OtherIDP: {Issuer: OtherIDP, JWKS: publicSet("other-1", x.OtherKey), Clients: []string{"agent"},
			Subject: config.AssertionSubjectSub, CreatePeople: true},
	}}
	x.Tools = tools
	x.Publish()
	return x
}

// Publish publishes Project and Tools to every replica (Update publishes team/demo alone).
func (x *IDJAG) Publish() {
	v := versions.Add(1) + 1
	for _, r := range x.Replicas {
		r.Holder.Store(&config.Snapshot{Projects: map[string]*config.Project{ProjectKey: x.Project, ToolsKey: x.Tools}, Version: v})
	}
}

// ToolsToken posts form to team/tools' token endpoint as client.
func (x *IDJAG) ToolsToken(form url.Values, client, clientSecret string) Answer {
	x.T.Helper()
	req, _ := http.NewRequest(http.MethodPost, x.ToolsIssuer+"/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(client, clientSecret)
	return x.Send(req)
}

// Redeem is team/tools' client redeeming assertion (jwt-bearer grant), extra parameters added.
func (x *IDJAG) Redeem(assertion, client string, extra url.Values) Answer {
	x.T.Helper()
	f := url.Values{"grant_type": {idjag.GrantJWTBearer}, "assertion": {assertion}}
	maps.Copy(f, extra)
	return x.ToolsToken(f, client, ToolsSecret)
}

// ToolsIntrospect is the service introspecting tok at team/tools.
func (x *IDJAG) ToolsIntrospect(tok string) Answer {
	x.T.Helper()
	req, _ := http.NewRequest(http.MethodPost, x.ToolsIssuer+"/introspect", strings.NewReader(url.Values{"token": {tok}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(Service, ServiceSecret)
	return x.Send(req)
}

// Assertion signs an ID-JAG from TestIDP for "agent" at team/tools; edit changes the header
// and claims first. A kid "other-1" signs with OtherKey, "forged" with an attacker's own key
// under TestIDP's kid.
func (x *IDJAG) Assertion(edit func(h map[string]any, c map[string]any)) string {
	x.T.Helper()
	now := x.Clock.Now()
	h := map[string]any{"alg": "ES256", "typ": idjag.Typ, "kid": "idp-1"}
	c := map[string]any{
		"iss": TestIDP, "sub": "u-alice", "aud": x.ToolsIssuer, "client_id": "agent",
		"jti": secret.NewID(), "iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(),
		"resource": MCPResource, "scope": "repos:read", "email": "alice@idp.test",
	}
	key := x.IDPKey
	if edit != nil {
		edit(h, c)
	}
	switch h["kid"] {
	case "other-1":
		key = x.OtherKey
	case "forged": // an attacker's own key, claiming to be TestIDP's
		key, h["kid"] = NewECKey(x.T), "idp-1"
	}
	return SignJWS(x.T, h, c, key)
}

// SignJWS signs header h and claims c by hand (ES256; alg "none" leaves the signature out), so
// a test controls every header, typ and alg included.
func SignJWS(t testing.TB, h, c map[string]any, key *ecdsa.PrivateKey) string {
	hb, _ := json.Marshal(h)
	cb, _ := json.Marshal(c)
	input := base64.RawURLEncoding.EncodeToString(hb) + "." + base64.RawURLEncoding.EncodeToString(cb)
	if h["alg"] == "none" {
		return input + "."
	}
	digest := sha256.Sum256([]byte(input))
	r, sv, err := ecdsa.Sign(rand.Reader, key, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	sv.FillBytes(sig[32:])
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// ---------------------------------------------------------------------------------------------
// The company's identity provider

// UpstreamIDPClient and UpstreamIDPSecret are Latchkey's client at an UpstreamIDP.
const (
	UpstreamIDPClient = "latchkey"
	UpstreamIDPSecret = "idp-secret"
)

// UpstreamIDP is a company's OpenID provider people sign in with (Project spec.signIn.oidc), as
// a minimal real one: it answers at URL, client "latchkey" with secret UpstreamIDPSecret; it: it approves whoever login names ("carol" unless
// changed) and checks PKCE. Like a company's provider, it issues refresh tokens for
// offline_access, refuses them once the person is disabled, names its sessions (sid), and
// signs back-channel logout tokens with its own key.
type UpstreamIDP struct {
	// URL is its issuer.
	URL string
	// Key signs its ID tokens and logout tokens (kid "idp").
	Key   *ecdsa.PrivateKey
	t     testing.TB
	srv   *httptest.Server
	now   func() time.Time
	mu    sync.Mutex
	codes map[string]idpCode
	// prompts and maxAges record the prompt and max_age parameters of every authorization
	// request.
	prompts, maxAges []string
	// authTime, when set, is the auth_time of the ID tokens it issues (ok false: no auth_time).
	// Unset, ID tokens carry none.
	authTime func() (at time.Time, ok bool)

	// login is the sub of the person the provider signs in next.
	login string
	users map[string]*idpUser
	// refresh maps live refresh tokens to the person and session they belong to; a refresh
	// rotates them.
	refresh map[string]idpGrant
	// scopes records the scope parameter of every authorization request.
	scopes []string
	// refreshes counts refresh_token grants received; down makes them answer 503.
	refreshes int
	down      bool
	sessions  int
	sids      map[string]string // sub -> sid of their latest sign-in
	// refreshIDToken: refresh_token grants answer with an ID token too, carrying the person's
	// current claims.
	refreshIDToken bool
	// keyFetches counts requests for its key set; nextKey, when set, is published beside key
	// as "idp-next" (a rotation under way).
	keyFetches int
	nextKey    *ecdsa.PrivateKey
}

type idpUser struct {
	email, name string
	disabled    bool
	// claims, when set, are added to (or replace) the claims of the person's ID tokens.
	claims map[string]any
}

type idpGrant struct{ sub, sid string }

type idpCode struct{ nonce, challenge, redirect, scope, sub string }

func NewUpstreamIDP(t testing.TB, now func() time.Time) *UpstreamIDP {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	f := &UpstreamIDP{t: t, Key: key, now: now, codes: map[string]idpCode{}, login: "carol-123", refresh: map[string]idpGrant{}, sids: map[string]string{},
		users: map[string]*idpUser{
			"carol-123": {email: "carol@corp.example", name: "Carol"},
			"alice-1":   {email: "alice@corp.example", name: "Alice"},
			"bob-2":     {email: "bob@corp.example", name: "Bob"},
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
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.keyFetches++
		keys := []jose.JSONWebKey{{Key: key.Public(), KeyID: "idp", Algorithm: "ES256", Use: "sig"}}
		if f.nextKey != nil {
			keys = append(keys, jose.JSONWebKey{Key: f.nextKey.Public(), KeyID: "idp-next", Algorithm: "ES256", Use: "sig"})
		}
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: keys})
	})
	mux.HandleFunc("GET /authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("code_challenge_method") != "S256" || q.Get("nonce") == "" || q.Get("client_id") != UpstreamIDPClient {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		code := "idp-code-" + q.Get("state")[:8]
		f.mu.Lock()
		u := f.users[f.login]
		if u == nil || u.disabled {
			f.mu.Unlock()
			http.Redirect(w, r, q.Get("redirect_uri")+"?"+url.Values{"error": {"access_denied"}, "state": {q.Get("state")}}.Encode(), http.StatusFound)
			return
		}
		f.codes[code] = idpCode{nonce: q.Get("nonce"), challenge: q.Get("code_challenge"), redirect: q.Get("redirect_uri"),
			scope: q.Get("scope"), sub: f.login}
		f.prompts = append(f.prompts, q.Get("prompt"))
		f.maxAges = append(f.maxAges, q.Get("max_age"))
		f.scopes = append(f.scopes, q.Get("scope"))
		f.mu.Unlock()
		http.Redirect(w, r, q.Get("redirect_uri")+"?"+url.Values{"code": {code}, "state": {q.Get("state")}}.Encode(), http.StatusFound)
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		fail := func(status int, code string) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write([]byte(`{"error":"` + code + `"}`))
		}
		user, pass, _ := r.BasicAuth()
		if user != UpstreamIDPClient || pass != UpstreamIDPSecret {
			fail(http.StatusUnauthorized, "invalid_client")
			return
		}
		if r.PostForm.Get("grant_type") == "refresh_token" {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.refreshes++
			if f.down {
				fail(http.StatusServiceUnavailable, "temporarily_unavailable")
				return
			}
			g, ok := f.refresh[r.PostForm.Get("refresh_token")]
			delete(f.refresh, r.PostForm.Get("refresh_token"))
			if !ok || f.users[g.sub] == nil || f.users[g.sub].disabled {
				fail(http.StatusBadRequest, "invalid_grant")
				return
			}
			rt := "idp-rt-" + secret.New("")
			f.refresh[rt] = g
			resp := map[string]any{"access_token": "idp-at", "token_type": "Bearer", "expires_in": 3600, "refresh_token": rt}
			if f.refreshIDToken {
				now := f.now()
				claims := map[string]any{"iss": f.URL, "sub": g.sub, "aud": UpstreamIDPClient, "exp": now.Add(time.Hour).Unix(), "iat": now.Unix(),
					"email": f.users[g.sub].email}
				maps.Copy(claims, f.users[g.sub].claims)
				maps.DeleteFunc(claims, func(_ string, v any) bool { return v == nil }) // nil: left out
				resp["id_token"] = f.Sign(key, "idp", "JWT", claims)
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(resp)
			return
		}
		f.mu.Lock()
		c, ok := f.codes[r.PostForm.Get("code")]
		delete(f.codes, r.PostForm.Get("code"))
		f.mu.Unlock()
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		if !ok || base64.RawURLEncoding.EncodeToString(sum[:]) != c.challenge || c.redirect != r.PostForm.Get("redirect_uri") {
			fail(http.StatusBadRequest, "invalid_grant")
			return
		}
		now := f.now()
		f.mu.Lock()
		f.sessions++
		sid := "idp-session-" + strconv.Itoa(f.sessions)
		f.sids[c.sub] = sid
		u := f.users[c.sub]
		claims := map[string]any{
			"iss": f.URL, "sub": c.sub, "aud": UpstreamIDPClient, "exp": now.Add(time.Hour).Unix(), "iat": now.Unix(),
			"nonce": c.nonce, "email": u.email, "name": u.name, "sid": sid,
		}
		maps.Copy(claims, u.claims)
		authTime := f.authTime
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
		resp["id_token"] = f.Sign(key, "idp", "JWT", claims)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
	})
	f.srv = httptest.NewServer(mux)
	f.URL = f.srv.URL
	t.Cleanup(f.srv.Close)
	return f
}

// Sign makes a JWT of type typ with claims, signed with key under kid.
func (f *UpstreamIDP) Sign(key *ecdsa.PrivateKey, kid, typ string, claims map[string]any) string {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", kid).WithType(jose.ContentType(typ)))
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
func (f *UpstreamIDP) LogoutClaims(sub string) map[string]any {
	now := f.now()
	return map[string]any{
		"iss": f.URL, "aud": UpstreamIDPClient, "sub": sub, "iat": now.Unix(), "exp": now.Add(2 * time.Minute).Unix(),
		"jti": "jti-" + secret.New(""), "events": map[string]any{"http://schemas.openid.net/event/backchannel-logout": map[string]any{}},
	}
}

// LastSID is the provider's session (sid) of sub's latest sign-in.
func (f *UpstreamIDP) LastSID(sub string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sids[sub]
}

// LastScope is the scope parameter of the latest authorization request.
func (f *UpstreamIDP) LastScope() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.scopes[len(f.scopes)-1]
}

// Disable disables sub at the provider, as an administrator does when someone leaves: no
// more sign-ins, and their refresh tokens are refused.
func (f *UpstreamIDP) Disable(sub string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.users[sub].disabled = true
}

// RefreshCount is the number of refresh_token grants it received.
func (f *UpstreamIDP) RefreshCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refreshes
}

// Config is the Project's sign-in with this provider, its button labelled label.
func (f *UpstreamIDP) Config(label string) *config.OIDCProvider {
	return &config.OIDCProvider{Issuer: f.URL, ClientID: UpstreamIDPClient, ClientSecret: UpstreamIDPSecret, Label: label}
}

// SetAuthTime makes fn the auth_time of the ID tokens it issues (ok false: none); nil, none.
func (f *UpstreamIDP) SetAuthTime(fn func() (at time.Time, ok bool)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.authTime = fn
}

// SetLogin makes sub the person it signs in next.
func (f *UpstreamIDP) SetLogin(sub string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.login = sub
}

// SetDown makes refresh_token grants answer 503 (down) or work again.
func (f *UpstreamIDP) SetDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// SetClaims adds claims to (or replaces claims of; nil leaves one out) sub's ID tokens, and
// makes refresh_token grants answer an ID token too, as providers that re-assert claims do.
func (f *UpstreamIDP) SetClaims(sub string, claims map[string]any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.users[sub].claims = claims
	f.refreshIDToken = true
}

// LastPrompt is the prompt parameter of the latest authorization request.
func (f *UpstreamIDP) LastPrompt() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.prompts[len(f.prompts)-1]
}

// LastMaxAge is the max_age parameter of the latest authorization request.
func (f *UpstreamIDP) LastMaxAge() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maxAges[len(f.maxAges)-1]
}

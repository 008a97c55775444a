package webhook_test

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
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
)

// fakeIDP is a minimal OpenID provider: it approves whoever login names ("carol" unless
// changed) and checks PKCE. Like a company's provider, it issues refresh tokens for
// offline_access, refuses them once the person is disabled, names its sessions (sid), and
// signs back-channel logout tokens with its own key.
type fakeIDP struct {
	t     *testing.T
	srv   *httptest.Server
	key   *ecdsa.PrivateKey
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

func newFakeIDP(t *testing.T, now func() time.Time) *fakeIDP {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	f := &fakeIDP{t: t, key: key, now: now, codes: map[string]idpCode{}, login: "carol-123", refresh: map[string]idpGrant{}, sids: map[string]string{},
		users: map[string]*idpUser{
			"carol-123": {email: "carol@corp.example", name: "Carol"},
			"alice-1":   {email: "alice@corp.example", name: "Alice"},
			"bob-2":     {email: "bob@corp.example", name: "Bob"},
		}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{
			"issuer": f.srv.URL, "authorization_endpoint": f.srv.URL + "/authorize", "token_endpoint": f.srv.URL + "/token",
			"jwks_uri": f.srv.URL + "/jwks", "id_token_signing_alg_values_supported": []string{"ES256"},
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
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: keys})
	})
	mux.HandleFunc("GET /authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("code_challenge_method") != "S256" || q.Get("nonce") == "" || q.Get("client_id") != "latchkey" {
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
		r.ParseForm()
		fail := func(status int, code string) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			w.Write([]byte(`{"error":"` + code + `"}`))
		}
		user, pass, _ := r.BasicAuth()
		if user != "latchkey" || pass != "idp-secret" {
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
				claims := map[string]any{"iss": f.srv.URL, "sub": g.sub, "aud": "latchkey", "exp": now.Add(time.Hour).Unix(), "iat": now.Unix(),
					"email": f.users[g.sub].email}
				maps.Copy(claims, f.users[g.sub].claims)
				maps.DeleteFunc(claims, func(_ string, v any) bool { return v == nil }) // nil: left out
				resp["id_token"] = f.sign(key, "idp", "JWT", claims)
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(resp)
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
			"iss": f.srv.URL, "sub": c.sub, "aud": "latchkey", "exp": now.Add(time.Hour).Unix(), "iat": now.Unix(),
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
		resp["id_token"] = f.sign(key, "idp", "JWT", claims)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(resp)
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// sign makes a JWT of type typ with claims, signed with key under kid.
func (f *fakeIDP) sign(key *ecdsa.PrivateKey, kid, typ string, claims map[string]any) string {
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

// logoutClaims are the claims of a valid back-channel logout token for sub (OpenID Connect
// Back-Channel Logout 1.0 §2.4), issued now with a fresh jti.
func (f *fakeIDP) logoutClaims(sub string) map[string]any {
	now := f.now()
	return map[string]any{
		"iss": f.srv.URL, "aud": "latchkey", "sub": sub, "iat": now.Unix(), "exp": now.Add(2 * time.Minute).Unix(),
		"jti": "jti-" + secret.New(""), "events": map[string]any{"http://schemas.openid.net/event/backchannel-logout": map[string]any{}},
	}
}

// lastSID is the provider's session (sid) of sub's latest sign-in.
func (f *fakeIDP) lastSID(sub string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sids[sub]
}

// lastScope is the scope parameter of the latest authorization request.
func (f *fakeIDP) lastScope() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.scopes[len(f.scopes)-1]
}

// disable disables sub at the provider, as an administrator does when someone leaves: no
// more sign-ins, and their refresh tokens are refused.
func (f *fakeIDP) disable(sub string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.users[sub].disabled = true
}

func (f *fakeIDP) refreshCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refreshes
}

func TestUpstreamSignIn(t *testing.T) {
	var idp *fakeIDP
	h := newHarness(t)
	idp = newFakeIDP(t, h.clock.Now)
	h.update(func(p *config.Project) {
		p.SignIn.OIDC = &config.OIDCProvider{Issuer: idp.srv.URL, ClientID: "latchkey", ClientSecret: "idp-secret", Label: "Sign in with Corp SSO"}
	})

	// signInUpstream follows the browser through the provider and back.
	signInUpstream := func(b *browser, start string) page {
		p := b.get(start)
		for range 5 {
			if p.status != http.StatusFound && p.status != http.StatusSeeOther {
				return p
			}
			loc := p.location()
			if strings.HasPrefix(loc, "/team/demo/account") {
				return p
			}
			p = b.get(loc)
		}
		return p
	}

	t.Run("sign-in page offers both", func(t *testing.T) {
		p := h.browser().get(h.base + "/sign-in")
		if !strings.Contains(p.body, "Sign in with Corp SSO") || !strings.Contains(p.body, `name="password"`) {
			t.Errorf("%s", p.body)
		}
	})

	t.Run("signs in and comes back", func(t *testing.T) {
		b := h.browser()
		p := signInUpstream(b, h.base+"/sign-in/oidc?return_to="+url.QueryEscape("/team/demo/account"))
		if p.status != http.StatusSeeOther || p.location() != "/team/demo/account" {
			t.Fatalf("%d %q %s", p.status, p.location(), p.body)
		}
		acct := b.get(h.base + "/account")
		if !strings.Contains(acct.body, "carol@corp.example") {
			t.Errorf("account page: %s", acct.body)
		}
		// The same upstream subject is the same person next time.
		b2 := h.browser()
		signInUpstream(b2, h.base+"/sign-in/oidc")
		if !strings.Contains(b2.get(h.base+"/account").body, "carol@corp.example") {
			t.Error("second sign-in failed")
		}
	})

	t.Run("prompt=login is passed upstream", func(t *testing.T) {
		signInUpstream(h.browser(), h.base+"/sign-in/oidc?prompt=login")
		idp.mu.Lock()
		last := idp.prompts[len(idp.prompts)-1]
		idp.mu.Unlock()
		if last != "login" {
			t.Errorf("prompt upstream = %q", last)
		}
	})

	t.Run("callback in another browser", func(t *testing.T) {
		starter := h.browser()
		p := starter.get(h.base + "/sign-in/oidc")
		p = starter.get(p.location()) // at the provider; it redirects back with a code
		victim := h.browser()
		cb := victim.get(p.location())
		if cb.status != http.StatusBadRequest || sessionCookieOrNil(cb.header) != nil {
			t.Errorf("callback without the state cookie: %d", cb.status)
		}
	})

	t.Run("tampered state", func(t *testing.T) {
		b := h.browser()
		p := b.get(h.base + "/sign-in/oidc")
		p = b.get(p.location())
		u, _ := url.Parse(p.location())
		q := u.Query()
		q.Set("state", "other")
		u.RawQuery = q.Encode()
		if cb := b.get(u.String()); cb.status != http.StatusBadRequest || sessionCookieOrNil(cb.header) != nil {
			t.Errorf("%d", cb.status)
		}
	})

	t.Run("provider error", func(t *testing.T) {
		b := h.browser()
		p := b.get(h.base + "/sign-in/oidc")
		au, _ := url.Parse(p.location())
		st := au.Query().Get("state")
		cb := b.get(h.base + "/sign-in/callback?error=access_denied&state=" + url.QueryEscape(st))
		if cb.status != http.StatusOK || !strings.Contains(cb.body, "did not complete") {
			t.Errorf("%d %s", cb.status, cb.body)
		}
	})

	t.Run("expired start", func(t *testing.T) {
		b := h.browser()
		p := b.get(h.base + "/sign-in/oidc")
		p = b.get(p.location())
		h.clock.Advance(11 * time.Minute)
		if cb := b.get(p.location()); cb.status != http.StatusBadRequest {
			t.Errorf("%d", cb.status)
		}
	})
}

// TestUpstreamSignInMustBeRecent plays a browser that is still signed in at the company's
// identity provider, which answers without asking for a password: a connect link needs a sign-in
// within the project's recent sign-in window, and such an answer must not count as one. The
// provider is asked for one (max_age), and its ID token's auth_time decides (OpenID Connect Core
// §3.1.2.1, §3.1.3.7).
func TestUpstreamSignInMustBeRecent(t *testing.T) {
	h := newHarness(t)
	idp := newFakeIDP(t, h.clock.Now)
	gh := &config.Connector{Key: "team/github", Namespace: "team", Name: "github", DisplayName: "GitHub"}
	h.update(func(p *config.Project) {
		p.SignIn.OIDC = &config.OIDCProvider{Issuer: idp.srv.URL, ClientID: "latchkey", ClientSecret: "idp-secret", Label: "Sign in with Corp SSO"}
		p.Connectors = map[string]*config.Connector{gh.Key: gh}
	})
	window := h.project.Lifetimes.RecentSignIn
	setAuthTime := func(fn func() (time.Time, bool)) {
		idp.mu.Lock()
		idp.authTime = fn
		idp.mu.Unlock()
	}
	signedInAgo := func(d time.Duration) func() (time.Time, bool) {
		return func() (time.Time, bool) { return h.clock.Now().Add(-d), true }
	}
	lastMaxAge := func() string {
		idp.mu.Lock()
		defer idp.mu.Unlock()
		return idp.maxAges[len(idp.maxAges)-1]
	}
	// through follows b from a page on this server through the provider and back, and
	// returns the first answer that is not a redirect to the sign-in page or the provider.
	through := func(b *browser, start string) page {
		t.Helper()
		p := b.get(start)
		for range 8 {
			loc := p.location()
			if p.status != http.StatusFound && p.status != http.StatusSeeOther {
				break
			}
			if strings.HasPrefix(loc, h.base[len(h.ts.URL):]+"/sign-in?") {
				// The sign-in page: choose the organisation's sign-in.
				form := b.get(loc)
				href, ok := form.sp().Link("Sign in with")
				if !ok {
					t.Fatalf("no organisation sign-in on %s:\n%s", loc, form.body)
				}
				p = b.get(href)
				continue
			}
			if !strings.HasPrefix(loc, idp.srv.URL) && !strings.Contains(loc, "/sign-in/") {
				break
			}
			p = b.get(loc)
		}
		return p
	}

	// Carol exists (she signed in before); a connect link is made for her.
	setAuthTime(signedInAgo(2 * time.Hour))
	through(h.browser(), h.base+"/sign-in/oidc")
	carol, err := h.store.UpsertPerson(t.Context(), store.Person{Project: projectKey, ID: "unused", Source: "oidc",
		SourceSubject: idp.srv.URL + "|carol-123"})
	if err != nil || carol.ID == "unused" {
		t.Fatalf("carol: %+v %v", carol, err)
	}
	code := "link-code-for-carol"
	if _, _, err := h.store.OpenLink(t.Context(), store.Link{
		ID: "l1", CodeHash: secret.Hash(code), Project: projectKey, Subject: carol.ID, ClientID: "web", Connector: gh.Key,
		Kind: store.LinkConnect, State: store.LinkOpen, ExpiresAt: h.clock.Now().Add(time.Hour), CreatedAt: h.clock.Now(),
	}, h.clock.Now()); err != nil {
		t.Fatal(err)
	}
	link := h.base + "/account/services/link/" + code
	isOffer := func(p page) bool {
		return p.status == http.StatusOK && strings.Contains(p.body, "GitHub")
	}
	maxAge := strconv.Itoa(int(window / time.Second))

	for name, tc := range map[string]struct {
		authTime func() (time.Time, bool)
		ok       bool
	}{
		"the provider's sign-in is old":   {signedInAgo(2 * time.Hour), false},
		"just outside the window":         {signedInAgo(window + time.Second), false},
		"the provider sends no auth_time": {func() (time.Time, bool) { return time.Time{}, false }, false},
		"a recent sign-in":                {signedInAgo(time.Minute), true},
	} {
		t.Run(name, func(t *testing.T) {
			setAuthTime(tc.authTime)
			b := h.browser()
			p := through(b, link)
			if got := lastMaxAge(); got != maxAge {
				t.Errorf("max_age sent to the provider = %q, want %q", got, maxAge)
			}
			if tc.ok {
				if p.status != http.StatusSeeOther || !strings.HasSuffix(p.location(), "/link/"+code) {
					t.Fatalf("callback: %d %q %s", p.status, p.location(), p.body)
				}
				if !isOffer(b.get(p.location())) {
					t.Error("a recent sign-in does not open the link")
				}
				return
			}
			if p.status != http.StatusForbidden || !strings.Contains(p.body, "did not confirm a recent sign-in") ||
				sessionCookieOrNil(p.header) != nil {
				t.Fatalf("callback: %d %v %s", p.status, p.header, p.body)
			}
			if again := b.get(link); isOffer(again) {
				t.Error("the link opened without a recent sign-in")
			}
		})
	}

	t.Run("an ordinary sign-in records the provider's auth_time", func(t *testing.T) {
		// Signed in at the provider two hours ago: signing in to the account page works, but it
		// is not a recent sign-in, so the link asks for another (prompt=login, max_age=0).
		setAuthTime(signedInAgo(2 * time.Hour))
		b := h.browser()
		p := through(b, h.base+"/sign-in/oidc?return_to="+url.QueryEscape("/team/demo/account"))
		if p.status != http.StatusSeeOther || p.location() != "/team/demo/account" {
			t.Fatalf("%d %q %s", p.status, p.location(), p.body)
		}
		if lastMaxAge() != "" {
			t.Errorf("an ordinary sign-in asked for max_age=%s", lastMaxAge())
		}
		l := b.get(link)
		if isOffer(l) || l.status != http.StatusSeeOther || !strings.Contains(l.location(), "prompt=login") {
			t.Fatalf("a sign-in two hours old at the provider opened the link: %d %q", l.status, l.location())
		}
		// The provider ignores prompt=login and answers with the old sign-in: refused.
		if p := through(b, link); p.status != http.StatusForbidden || lastMaxAge() != "0" {
			t.Fatalf("prompt=login answered with an old sign-in: %d max_age=%q %s", p.status, lastMaxAge(), p.body)
		}
		// Inside the window but from before this request: still not a sign-in again.
		setAuthTime(signedInAgo(5 * time.Minute))
		if p := through(b, link); p.status != http.StatusForbidden {
			t.Fatalf("prompt=login answered with a sign-in from before it: %d %s", p.status, p.body)
		}
		// The provider asks for the password again: the link opens.
		setAuthTime(signedInAgo(0))
		p = through(b, link)
		if p.status != http.StatusSeeOther || !isOffer(b.get(p.location())) {
			t.Fatalf("a sign-in again: %d %q %s", p.status, p.location(), p.body)
		}
	})
}

package webhook_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"latchkey.dev/latchkey/internal/config"
)

// fakeIdP is a minimal OpenID provider: it approves everyone as "carol" and checks PKCE.
type fakeIdP struct {
	t     *testing.T
	srv   *httptest.Server
	key   *ecdsa.PrivateKey
	now   func() time.Time
	mu    sync.Mutex
	codes map[string]idpCode
	// prompts records the prompt parameter of every authorization request.
	prompts []string
}

type idpCode struct{ nonce, challenge, redirect string }

func newFakeIdP(t *testing.T, now func() time.Time) *fakeIdP {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	f := &fakeIdP{t: t, key: key, now: now, codes: map[string]idpCode{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{
			"issuer": f.srv.URL, "authorization_endpoint": f.srv.URL + "/authorize", "token_endpoint": f.srv.URL + "/token",
			"jwks_uri": f.srv.URL + "/jwks", "id_token_signing_alg_values_supported": []string{"ES256"},
			"response_types_supported": []string{"code"}, "subject_types_supported": []string{"public"},
		})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: key.Public(), KeyID: "idp", Algorithm: "ES256", Use: "sig"}}})
	})
	mux.HandleFunc("GET /authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("code_challenge_method") != "S256" || q.Get("nonce") == "" || q.Get("client_id") != "latchkey" {
			http.Error(w, "bad request", 400)
			return
		}
		code := "idp-code-" + q.Get("state")[:8]
		f.mu.Lock()
		f.codes[code] = idpCode{nonce: q.Get("nonce"), challenge: q.Get("code_challenge"), redirect: q.Get("redirect_uri")}
		f.prompts = append(f.prompts, q.Get("prompt"))
		f.mu.Unlock()
		http.Redirect(w, r, q.Get("redirect_uri")+"?"+url.Values{"code": {code}, "state": {q.Get("state")}}.Encode(), http.StatusFound)
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		f.mu.Lock()
		c, ok := f.codes[r.PostForm.Get("code")]
		delete(f.codes, r.PostForm.Get("code"))
		f.mu.Unlock()
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		user, pass, _ := r.BasicAuth()
		if !ok || base64.RawURLEncoding.EncodeToString(sum[:]) != c.challenge || c.redirect != r.PostForm.Get("redirect_uri") || user != "latchkey" || pass != "idp-secret" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(400)
			w.Write([]byte(`{"error":"invalid_grant"}`))
			return
		}
		signer, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", "idp"))
		now := f.now()
		idt, _ := jwt.Signed(signer).Claims(map[string]any{
			"iss": f.srv.URL, "sub": "carol-123", "aud": "latchkey", "exp": now.Add(time.Hour).Unix(), "iat": now.Unix(),
			"nonce": c.nonce, "email": "carol@corp.example", "name": "Carol",
		}).Serialize()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"access_token": "idp-at", "token_type": "Bearer", "expires_in": 3600, "id_token": idt})
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func TestUpstreamSignIn(t *testing.T) {
	var idp *fakeIdP
	h := newHarness(t)
	idp = newFakeIdP(t, h.clock.Now)
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

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

	"latchkey.dev/latchkey/internal/secret"
)

// fakeIDP is left for the tests of this package still to move beside their flow (test/stack's
// UpstreamIDP once moved); it goes with harness_test.go.
//
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

package upstream_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/testclock"

	"github.com/go-jose/go-jose/v4"
	"golang.org/x/oauth2"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/netguard"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/internal/upstream/fakegithub"
)

const callbackURL = "https://auth.example.com/default/acme/connectors/default/github/callback"

// clock is the injected clock: tests move it, nothing sleeps.
type clock = testclock.Clock

var (
	alice = fakegithub.Account{ID: 583231, Login: "alice", Name: "Alice Liddell", Password: "pw", Repos: []fakegithub.Repo{{Name: "notes", Private: true}}}
	bob   = fakegithub.Account{ID: 77, Login: "bob", Password: "pw"}
)

type gh struct {
	fake *fakegithub.Server
	srv  *httptest.Server
	clk  *clock
	c    *config.Connector
}

func newGitHub(t *testing.T, ttl time.Duration) *gh {
	t.Helper()
	clk := testclock.New(time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC))
	fake := fakegithub.New(fakegithub.Options{
		ClientID: "Iv1.latchkey", ClientSecret: "s3cret", Now: clk.Now, AccessTokenTTL: ttl,
		RedirectURIs: []string{callbackURL}, Accounts: []fakegithub.Account{alice, bob},
	})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return &gh{fake: fake, srv: srv, clk: clk, c: fake.Connector(srv.URL, callbackURL)}
}

// authorize plays the browser: login is signed in at GitHub and has approved the app before, so
// GitHub redirects straight to the callback. It returns the callback's query.
func (g *gh) authorize(t *testing.T, login, state, verifier string) url.Values {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	u, _ := url.Parse(g.srv.URL)
	jar.SetCookies(u, []*http.Cookie{g.fake.SessionCookie(login)})
	g.fake.Approve(login, g.c.ClientID)
	b := &http.Client{Jar: jar, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), callbackURL) {
			return http.ErrUseLastResponse
		}
		return nil
	}}
	resp, err := b.Get(upstream.AuthURL(g.c, state, verifier))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || err != nil || !strings.HasPrefix(loc.String(), callbackURL+"?") {
		t.Fatalf("authorize: status %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	return loc.Query()
}

func TestAuthURLAlwaysUsesTheFixedCallback(t *testing.T) {
	base := config.Connector{
		ClientID: "cid", CallbackURL: callbackURL, Scopes: []string{"repo", "read:user"}, PKCE: true,
		AuthURL: "https://github.example/login/oauth/authorize",
	}
	verifier := upstream.NewVerifier()
	tests := []struct {
		name   string
		mutate func(*config.Connector)
		state  string
	}{
		{"plain", func(*config.Connector) {}, "abc"},
		{"AuthParams try to move the callback", func(c *config.Connector) {
			c.AuthParams = map[string]string{"redirect_uri": "https://evil.example/cb", "client_id": "other", "state": "x",
				"response_type": "token", "code_challenge_method": "plain", "scope": "admin", "allow_signup": "false"}
		}, "abc"},
		{"AuthURL carries its own redirect_uri", func(c *config.Connector) {
			c.AuthURL += "?redirect_uri=https%3A%2F%2Fevil.example%2Fcb&tenant=acme#frag"
		}, "abc"},
		{"state tries to add parameters", func(*config.Connector) {}, "x&redirect_uri=https://evil.example/cb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.mutate(&c)
			u, err := url.Parse(upstream.AuthURL(&c, tt.state, verifier))
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			if got := q["redirect_uri"]; len(got) != 1 || got[0] != callbackURL {
				t.Errorf("redirect_uri = %q, want exactly [%q]", got, callbackURL)
			}
			want := map[string]string{
				"client_id": "cid", "response_type": "code", "state": tt.state, "scope": "repo read:user",
				"code_challenge": oauth2.S256ChallengeFromVerifier(verifier), "code_challenge_method": "S256",
			}
			for k, v := range want {
				if got := q[k]; len(got) != 1 || got[0] != v {
					t.Errorf("%s = %q, want [%q]", k, got, v)
				}
			}
			if u.Fragment != "" || u.Host != "github.example" || u.Path != "/login/oauth/authorize" {
				t.Errorf("URL %s", u)
			}
		})
	}

	c := base
	c.PKCE = false
	c.AuthParams = map[string]string{"allow_signup": "false"}
	q, _ := url.ParseQuery(strings.SplitN(upstream.AuthURL(&c, "s", verifier), "?", 2)[1])
	if q.Has("code_challenge") || q.Has("code_challenge_method") || q.Get("allow_signup") != "false" {
		t.Errorf("without PKCE: %v", q)
	}
}

func TestExchangeReadsTheGitHubAccount(t *testing.T) {
	g := newGitHub(t, 0)
	verifier := upstream.NewVerifier()
	q := g.authorize(t, "alice", "st", verifier)
	if q.Get("state") != "st" {
		t.Fatalf("state %q", q.Get("state"))
	}
	acct, tok, err := upstream.Exchange(t.Context(), nil, g.c, q.Get("code"), verifier)
	if err != nil {
		t.Fatal(err)
	}
	if acct != (upstream.Account{ID: "583231", Name: "alice"}) {
		t.Fatalf("account %+v", acct)
	}
	if !strings.HasPrefix(tok.AccessToken, "gho_") {
		t.Fatalf("token %+v", tok)
	}

	// The code is spent; and a wrong verifier never works.
	_, _, err = upstream.Exchange(t.Context(), nil, g.c, q.Get("code"), verifier)
	var re *oauth2.RetrieveError
	if !errors.Is(err, upstream.ErrService) || !errors.As(err, &re) || re.ErrorCode != "bad_verification_code" {
		t.Fatalf("replayed code: %v", err)
	}
	q = g.authorize(t, "bob", "st", verifier)
	if _, _, err := upstream.Exchange(t.Context(), nil, g.c, q.Get("code"), upstream.NewVerifier()); !errors.As(err, &re) || re.ErrorCode != "bad_verification_code" {
		t.Fatalf("wrong verifier: %v", err)
	}
}

func TestExchangeTimeout(t *testing.T) {
	g := newGitHub(t, 0)
	verifier := upstream.NewVerifier()
	q := g.authorize(t, "alice", "st", verifier)
	g.fake.SetDelay(time.Hour)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, _, err := upstream.Exchange(ctx, nil, g.c, q.Get("code"), verifier); !errors.Is(err, upstream.ErrTimeout) {
		t.Fatalf("slow service: %v, want ErrTimeout", err)
	}
}

// A generic OAuth 2.0 service whose userinfo nests the account and uses string ids.
func TestExchangeGenericUserInfo(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		if r.PostForm.Get("code") != "good" || r.PostForm.Get("code_verifier") != "v" || r.PostForm.Get("redirect_uri") != callbackURL {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":"invalid_grant"}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"access_token":"at","token_type":"Bearer","expires_in":3600,"refresh_token":"rt"}`))
	})
	mux.HandleFunc("GET /me", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer at" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true,"user":{"id":"U024BE7LH","profile":{"display_name":"Ada"}},"team.id":12345678901234567890}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := &config.Connector{AllowedNetworks: netguard.Loopback, ClientID: "c", ClientSecret: "s", CallbackURL: callbackURL, AuthURL: srv.URL + "/auth",
		TokenURL: srv.URL + "/token", UserInfoURL: srv.URL + "/me", AccountIDField: "user.id", AccountNameField: "user.profile.display_name"}
	acct, tok, err := upstream.Exchange(t.Context(), srv.Client(), c, "good", "v")
	if err != nil {
		t.Fatal(err)
	}
	if acct != (upstream.Account{ID: "U024BE7LH", Name: "Ada"}) || tok.RefreshToken != "rt" {
		t.Fatalf("account %+v token %+v", acct, tok)
	}
	// A number keeps all its digits, and a field whose name has a dot is found as written.
	c.AccountIDField, c.AccountNameField = "team.id", "nope"
	acct, _, err = upstream.Exchange(t.Context(), srv.Client(), c, "good", "v")
	if err != nil || acct.ID != "12345678901234567890" || acct.Name != acct.ID {
		t.Fatalf("numeric id: %+v %v", acct, err)
	}
	c.AccountIDField = "missing"
	if _, _, err := upstream.Exchange(t.Context(), srv.Client(), c, "good", "v"); !errors.Is(err, upstream.ErrService) {
		t.Fatalf("missing id field: %v", err)
	}
	if _, _, err := upstream.Exchange(t.Context(), srv.Client(), c, "bad", "v"); !errors.Is(err, upstream.ErrService) {
		t.Fatalf("bad code: %v", err)
	}
}

// An OIDC service: the account comes from the verified ID token, not from userinfo.
func TestExchangeOIDC(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: "k1"}}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	var issuer string
	aud := "latchkey-client"
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"issuer": issuer, "authorization_endpoint": issuer + "/auth",
			"token_endpoint": issuer + "/token", "jwks_uri": issuer + "/jwks", "id_token_signing_alg_values_supported": []string{"ES256"}})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		claims, _ := json.Marshal(map[string]any{"iss": issuer, "aud": aud, "sub": "00u1abcd", "preferred_username": "ada@example.com",
			"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()})
		obj, _ := signer.Sign(claims)
		idt, _ := obj.CompactSerialize()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"access_token": "at", "token_type": "Bearer", "expires_in": 3600, "id_token": idt})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	issuer = srv.URL
	c := &config.Connector{AllowedNetworks: netguard.Loopback, ClientID: aud, ClientSecret: "s", CallbackURL: callbackURL, AuthURL: issuer + "/auth",
		TokenURL: issuer + "/token", OIDCIssuer: issuer}
	acct, _, err := upstream.Exchange(t.Context(), srv.Client(), c, "code", "")
	if err != nil {
		t.Fatal(err)
	}
	if acct != (upstream.Account{ID: "00u1abcd", Name: "ada@example.com"}) {
		t.Fatalf("account %+v", acct)
	}
	// An ID token for another client is not accepted.
	aud = "someone-else"
	if _, _, err := upstream.Exchange(t.Context(), srv.Client(), c, "code", ""); !errors.Is(err, upstream.ErrService) {
		t.Fatalf("foreign audience: %v", err)
	}
}

package stack

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"

	"golang.org/x/crypto/argon2"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook"
)

// The clients and the person the flow tests (webhook/<flow>) use besides Repo Helper, the
// service, Alice and Mallory.
const (
	// Web is a confidential web application: code flow with PKCE and refresh, OpenID scopes
	// and read/write, two redirect URIs (WebRedirect first).
	Web         = "web"
	WebSecret   = "lk_cs_web-secret-for-tests-only-0123456789abcdef"
	WebRedirect = "https://app.example/cb"
	// Other is a second confidential application, the one that must not see Web's tokens.
	Other       = "other"
	OtherSecret = "lk_cs_other-secret-for-tests-only-0123456789abcde"
	// CLI is a public client (no secret): a loopback and a private-use-scheme redirect.
	CLI = "cli"
	// JWTService is a client_credentials client whose access tokens are JWTs.
	JWTService = "jwt"
	JWTSecret  = "lk_cs_jwt-secret-for-tests-only-0123456789abcdef"

	// Bob's password is stored as argon2id (Alice's and Mallory's as bcrypt), so both
	// formats are signed in with.
	BobEmail    = "bob@example.com"
	BobPassword = "tr0ub4dor&3"
)

// NewProject is the project team/demo at issuer, without Repo Helper and its connector: Alice,
// Mallory and Bob sign in with passwords; the service, Web, Other, CLI and JWTService are its
// clients; registration is open; one ES256 signing key. Another project of a test starts here
// and changes what it needs.
func NewProject(issuer string) *config.Project {
	hs := hashes()
	p := &config.Project{
		Key: ProjectKey, Namespace: "team", Name: "demo", DisplayName: "Demo Team", Issuer: issuer,
		SignIn: config.SignIn{Passwords: map[string]config.PasswordUser{
			AliceEmail:   {Email: AliceEmail, Name: "Alice", Hash: hs[AliceEmail]},
			MalloryEmail: {Email: MalloryEmail, Name: "Mallory", Hash: hs[MalloryEmail]},
			BobEmail:     {Email: BobEmail, Name: "Bob", Hash: hs[BobEmail]},
		}},
		Lifetimes:    config.DefaultLifetimes(),
		Registration: config.Registration{Mode: config.RegistrationOpen},
		Clients: map[string]*config.Client{
			Service: {
				ID: Service, SecretHash: secret.Hash(ServiceSecret), Name: "Service",
				GrantTypes: []string{"client_credentials"}, Scopes: []string{"read", "write"},
				TokenEndpointAuthMethod: "client_secret_basic",
			},
		},
		SigningKeys: []config.SigningKey{{ID: "k1", Algorithm: "ES256", Private: signingKey()}},
		Redirects:   config.DefaultRedirectRules(),
	}
	maps.Copy(p.Clients, flowClients())
	return p
}

// PasswordHash is the hash the project stores for email's password (Alice, Mallory, Bob).
func PasswordHash(email string) string { return hashes()[email] }

func flowClients() map[string]*config.Client {
	return map[string]*config.Client{
		Web: {
			ID: Web, SecretHash: secret.Hash(WebSecret), Name: "Web App",
			RedirectURIs:            []string{WebRedirect, "http://127.0.0.1/callback"},
			GrantTypes:              []string{"authorization_code", "refresh_token"},
			Scopes:                  []string{"openid", "profile", "email", "read", "write"},
			TokenEndpointAuthMethod: "client_secret_basic",
		},
		Other: {
			ID: Other, SecretHash: secret.Hash(OtherSecret), Name: "Other App",
			RedirectURIs: []string{"https://other.example/cb"},
			GrantTypes:   []string{"authorization_code", "refresh_token"},
		},
		CLI: {
			ID: CLI, Name: "Command Line", TokenEndpointAuthMethod: "none",
			RedirectURIs: []string{"http://127.0.0.1/callback", "com.example.cli:/cb"},
			GrantTypes:   []string{"authorization_code", "refresh_token"},
		},
		JWTService: {
			ID: JWTService, SecretHash: secret.Hash(JWTSecret), Name: "JWT Service",
			GrantTypes: []string{"client_credentials"}, AccessTokenFormat: config.TokenJWT,
		},
	}
}

func signingKey() *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return key
}

// argon2idPHC hashes password as argon2id in PHC form, with small parameters to keep tests fast.
func argon2idPHC(password string) string {
	salt := make([]byte, 16)
	_, _ = rand.Read(salt)
	const m, t, p = 1024, 1, 1
	key := argon2.IDKey([]byte(password), salt, t, m, p, 32)
	return fmt.Sprintf("$argon2id$v=19$m=%d,t=%d,p=%d$%s$%s", m, t, p,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key))
}

// ---------------------------------------------------------------------------------------------
// Changing the configuration

var versions atomic.Uint64

// Update publishes a changed copy of the project to every replica, as the controllers do when
// a resource changes.
func (s *Stack) Update(fn func(p *config.Project)) {
	passwordsMu.Lock()
	p := *s.Project
	passwordsMu.Unlock()
	fn(&p)
	s.Project = &p
	v := versions.Add(1) + 1
	for _, r := range s.Replicas {
		r.Holder.Store(&config.Snapshot{Projects: map[string]*config.Project{ProjectKey: &p}, Version: v})
	}
}

// Server is the first replica's server (the only one unless Options.Replicas says otherwise).
func (s *Stack) Server() *webhook.Server { return s.Replicas[0].Server }

// Store is the first replica's store.
func (s *Stack) Store() store.Store { return s.Replicas[0].Store }

// ---------------------------------------------------------------------------------------------
// A client's requests

// Token posts form to the token endpoint with Basic authentication as client ("" for none).
func (s *Stack) Token(form url.Values, client, clientSecret string) Answer {
	s.T.Helper()
	return s.MustPost("/token", form, client, clientSecret)
}

// RefreshAs is client using a refresh token.
func (s *Stack) RefreshAs(client, clientSecret, refreshToken string) Answer {
	s.T.Helper()
	return s.Token(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refreshToken}}, client, clientSecret)
}

// Introspect is the service introspecting tok.
func (s *Stack) Introspect(tok string) Answer {
	s.T.Helper()
	return s.MustPost("/introspect", url.Values{"token": {tok}}, Service, ServiceSecret)
}

// Active says whether introspection finds tok active.
func (s *Stack) Active(tok string) bool {
	s.T.Helper()
	a := s.Introspect(tok)
	if a.Status != http.StatusOK {
		s.T.Fatalf("introspection: %d %s", a.Status, a.Raw)
	}
	return a.Body["active"] == true
}

// Userinfo calls the UserInfo endpoint with tok.
func (s *Stack) Userinfo(tok string) Answer {
	s.T.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.Issuer+"/userinfo", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	return s.Send(req)
}

// Send sends req and reads the answer; a transport error fails the test.
func (s *Stack) Send(req *http.Request) Answer {
	s.T.Helper()
	return MustDo(s.T, req)
}

// MustDo is Do for tests that expect an answer.
func MustDo(t testing.TB, req *http.Request) Answer {
	t.Helper()
	a, err := Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// CodeFlowAs signs email in with b (if needed), allows client on the consent page, and
// redeems the code at client's first redirect URI; anything but tokens fails the test.
func (s *Stack) CodeFlowAs(b *Browser, client, clientSecret, scope, email, password string) Answer {
	s.T.Helper()
	redirect := s.Project.Clients[client].RedirectURIs[0]
	pk := NewPKCE()
	to, _, err := b.AuthorizeAt(s.AuthorizeURL(client, redirect, scope, pk, nil), email, password)
	if err != nil {
		s.T.Fatal(err)
	}
	code := to.Query().Get("code")
	if code == "" {
		s.T.Fatalf("no code in %s", to)
	}
	a := s.Token(url.Values{
		"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {redirect}, "code_verifier": {pk.Verifier},
	}, client, clientSecret)
	if a.Status != http.StatusOK {
		s.T.Fatalf("code redemption: %d %s", a.Status, a.Raw)
	}
	return a
}

// ---------------------------------------------------------------------------------------------
// A browser that fails the test instead of returning errors

// MustGet is Get failing the test on a transport error.
func (b *Browser) MustGet(u string) Page {
	b.t().Helper()
	p, err := b.Get(u)
	if err != nil {
		b.t().Fatal(err)
	}
	return p
}

// MustPost is Post failing the test on a transport error.
func (b *Browser) MustPost(u string, form url.Values) Page {
	b.t().Helper()
	p, err := b.Post(u, form)
	if err != nil {
		b.t().Fatal(err)
	}
	return p
}

// MustDo sends req with the browser's cookies, failing the test on a transport error.
func (b *Browser) MustDo(req *http.Request) Page {
	b.t().Helper()
	p, err := b.do(req)
	if err != nil {
		b.t().Fatal(err)
	}
	return p
}

// SignInPage opens the sign-in page (asking to come back to returnTo, when set), signs in as
// email and returns the answer to the form.
func (b *Browser) SignInPage(returnTo, email, password string) Page {
	b.t().Helper()
	u := b.Issuer + "/sign-in"
	if returnTo != "" {
		u += "?return_to=" + url.QueryEscape(returnTo)
	}
	return b.MustFillSignIn(b.MustGet(u), email, password)
}

// MustFillSignIn is FillSignIn on a page that must be a sign-in page.
func (b *Browser) MustFillSignIn(p Page, email, password string) Page {
	b.t().Helper()
	if p.Status != http.StatusOK || !p.HasField("Password") {
		b.t().Fatalf("not a sign-in page: %d %s", p.Status, p.Text())
	}
	res, err := b.FillSignIn(p, email, password)
	if err != nil {
		b.t().Fatal(err)
	}
	return res
}

// MustAuthorizeAt is AuthorizeAt failing the test when the flow stops.
func (b *Browser) MustAuthorizeAt(authURL, email, password string) (to *url.URL, consented bool) {
	b.t().Helper()
	to, consented, err := b.AuthorizeAt(authURL, email, password)
	if err != nil {
		b.t().Fatal(err)
	}
	return to, consented
}

func (b *Browser) t() testing.TB {
	if b.S == nil {
		panic("stack: a browser made by NewBrowser has no test to fail; use the error-returning methods")
	}
	return b.S.T
}

// MustJSON decodes s into v, failing the test when s is not JSON.
func MustJSON(t testing.TB, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, s)
	}
}

// Strings reads a JSON array of strings (as decoded into any); anything else is empty.
func Strings(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, x := range l {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

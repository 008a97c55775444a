package webhook_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store/sql/pgtest"
	"latchkey.dev/latchkey/internal/testclock"

	"golang.org/x/crypto/bcrypt"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
	"latchkey.dev/latchkey/webhook"
)

// clock is the injected clock: tests move it, nothing sleeps.
type clock = testclock.Clock

const (
	projectKey = "team/demo"
	webSecret  = "lk_cs_web-secret-for-tests-only-0123456789abcdef"
	svcSecret  = "lk_cs_svc-secret-for-tests-only-0123456789abcdef"
	jwtSecret  = "lk_cs_jwt-secret-for-tests-only-0123456789abcdef"
	otherSecr  = "lk_cs_other-secret-for-tests-only-0123456789abcde"
	alicePass  = "correct horse battery staple"
	bobPass    = "tr0ub4dor&3"
	iatToken   = "lk_iat_initial-access-token-for-tests"
)

// Password hashes are made once: bcrypt at its minimum cost and argon2id with small
// parameters keep the tests fast while exercising both formats.
var hashes = sync.OnceValue(func() map[string]string {
	a, err := bcrypt.GenerateFromPassword([]byte(alicePass), bcrypt.MinCost)
	if err != nil {
		panic(err)
	}
	return map[string]string{"alice": string(a), "bob": argon2idPHC(bobPass)}
})

type harness struct {
	t       testing.TB
	clock   *clock
	store   store.Store
	holder  *config.Holder
	project *config.Project
	srv     *webhook.Server
	ts      *httptest.Server
	base    string // issuer URL
}

type option func(*config.Project)

func newHarness(t testing.TB, opts ...option) *harness {
	return newHarnessDSN(t, "sqlite:"+filepath.Join(t.TempDir(), "latchkey.db"), opts...)
}

func newHarnessDSN(t testing.TB, dsn string, opts ...option) *harness {
	t.Helper()
	return newHarnessServer(t, dsn, nil, opts...)
}

// newHarnessServer is newHarnessDSN with server options: server, when not nil, changes the
// webhook.Options the server is built with.
func newHarnessServer(t testing.TB, dsn string, server func(*webhook.Options), opts ...option) *harness {
	t.Helper()
	st, err := sqlstore.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := &harness{t: t, clock: testclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)), store: st, holder: &config.Holder{}}
	var handler http.Handler
	h.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	t.Cleanup(h.ts.Close)
	h.base = h.ts.URL + "/team/demo"
	h.project = testProject(h.base)
	for _, o := range opts {
		o(h.project)
	}
	h.holder.Store(&config.Snapshot{Projects: map[string]*config.Project{projectKey: h.project}, Version: 1})
	so := webhook.Options{
		Config:    h.holder,
		Store:     st,
		Keyring:   secret.NewRandomKeyring(),
		Now:       h.clock.Now,
		PublicURL: h.ts.URL,
	}
	if server != nil {
		server(&so)
	}
	h.srv, err = webhook.New(so)
	if err != nil {
		t.Fatal(err)
	}
	handler = h.srv
	return h
}

func testProject(issuer string) *config.Project {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	hs := hashes()
	return &config.Project{
		Key: projectKey, Namespace: "team", Name: "demo", DisplayName: "Demo Team", Issuer: issuer,
		SignIn: config.SignIn{Passwords: map[string]config.PasswordUser{
			"alice@example.com": {Email: "alice@example.com", Name: "Alice", Hash: hs["alice"]},
			"bob@example.com":   {Email: "bob@example.com", Name: "Bob", Hash: hs["bob"]},
		}},
		Lifetimes:    config.DefaultLifetimes(),
		Registration: config.Registration{Mode: config.RegistrationOpen},
		Clients: map[string]*config.Client{
			"web": {
				ID: "web", SecretHash: secret.Hash(webSecret), Name: "Web App",
				RedirectURIs:            []string{"https://app.example/cb", "http://127.0.0.1/callback"},
				GrantTypes:              []string{"authorization_code", "refresh_token"},
				Scopes:                  []string{"openid", "profile", "email", "read", "write"},
				TokenEndpointAuthMethod: "client_secret_basic",
			},
			"other": {
				ID: "other", SecretHash: secret.Hash(otherSecr), Name: "Other App",
				RedirectURIs: []string{"https://other.example/cb"},
				GrantTypes:   []string{"authorization_code", "refresh_token"},
			},
			"cli": {
				ID: "cli", Name: "Command Line", TokenEndpointAuthMethod: "none",
				RedirectURIs: []string{"http://127.0.0.1/callback", "com.example.cli:/cb"},
				GrantTypes:   []string{"authorization_code", "refresh_token"},
			},
			"svc": {
				ID: "svc", SecretHash: secret.Hash(svcSecret), Name: "Service",
				GrantTypes: []string{"client_credentials"}, Scopes: []string{"read", "write"},
				TokenEndpointAuthMethod: "client_secret_post",
			},
			"jwt": {
				ID: "jwt", SecretHash: secret.Hash(jwtSecret), Name: "JWT Service",
				GrantTypes: []string{"client_credentials"}, AccessTokenFormat: config.TokenJWT,
			},
		},
		Redirects:   config.DefaultRedirectRules(),
		SigningKeys: []config.SigningKey{{ID: "k1", Algorithm: "ES256", Private: key}},
	}
}

// update publishes a changed copy of the project.
func (h *harness) update(fn func(p *config.Project)) {
	p := *h.project
	fn(&p)
	h.project = &p
	h.holder.Store(&config.Snapshot{Projects: map[string]*config.Project{projectKey: &p}, Version: 2})
}

// ---- browser ---------------------------------------------------------------------------------

// browser is one person's browser: its own cookie jar, redirects followed by hand.
type browser struct {
	h *harness
	c *http.Client
}

func (h *harness) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{h: h, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

type page struct {
	status int
	header http.Header
	body   string
	url    string
}

func (p page) location() string { return p.header.Get("Location") }

func (b *browser) do(req *http.Request) page {
	b.h.t.Helper()
	resp, err := b.c.Do(req)
	if err != nil {
		b.h.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return page{status: resp.StatusCode, header: resp.Header, body: string(body), url: req.URL.String()}
}

func (b *browser) get(u string) page {
	b.h.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.abs(u), nil)
	return b.do(req)
}

func (b *browser) post(u string, form url.Values) page {
	b.h.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.abs(u), strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(req)
}

func (b *browser) abs(u string) string {
	if strings.HasPrefix(u, "/") {
		return b.h.ts.URL + u
	}
	return u
}

var (
	reHidden   = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)
	reContinue = regexp.MustCompile(`<meta http-equiv="refresh" content="0; url=([^"]+)">`)
	reConfirm  = regexp.MustCompile(`name="confirm_destination" value="([^"]*)"`)
)

// hidden returns a page's hidden form fields (last form wins for repeated single fields).
func (p page) hidden() url.Values {
	v := url.Values{}
	for _, m := range reHidden.FindAllStringSubmatch(p.body, -1) {
		v.Add(html.UnescapeString(m[1]), html.UnescapeString(m[2]))
	}
	return v
}

func (p page) continueURL() string {
	m := reContinue.FindStringSubmatch(p.body)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

// signIn signs in through the sign-in page and returns the page after the form POST.
func (b *browser) signIn(returnTo, user, pass string) page {
	b.h.t.Helper()
	u := b.h.base + "/sign-in"
	if returnTo != "" {
		u += "?return_to=" + url.QueryEscape(returnTo)
	}
	return b.submitSignIn(b.get(u), user, pass)
}

func (b *browser) submitSignIn(form page, user, pass string) page {
	b.h.t.Helper()
	if form.status != http.StatusOK || !strings.Contains(form.body, `name="password"`) {
		b.h.t.Fatalf("not a sign-in page: %d %s", form.status, form.body)
	}
	f := form.hidden()
	f.Set("username", user)
	f.Set("password", pass)
	return b.post(b.h.base+"/sign-in", f)
}

// ---- OAuth client side -------------------------------------------------------------------------

type pkce struct{ verifier, challenge string }

func newPKCE() pkce {
	v := secret.New("")
	s := sha256.Sum256([]byte(v))
	return pkce{verifier: v, challenge: base64.RawURLEncoding.EncodeToString(s[:])}
}

func authorizeURL(h *harness, clientID, redirectURI, scope string, pk pkce, extra url.Values) string {
	q := url.Values{
		"response_type": {"code"}, "client_id": {clientID}, "redirect_uri": {redirectURI},
		"state": {"st-" + clientID}, "code_challenge": {pk.challenge}, "code_challenge_method": {"S256"},
	}
	if scope != "" {
		q.Set("scope", scope)
	}
	for k, v := range extra {
		q[k] = v
	}
	return h.base + "/authorize?" + q.Encode()
}

// authorize runs the browser side of an authorization code flow: signing in as user when
// needed and allowing on the consent page. It returns the final redirect to the client and
// whether the consent page was shown.
func (b *browser) authorize(authURL, user, pass string) (redirect *url.URL, consented bool) {
	b.h.t.Helper()
	p := b.get(authURL)
	for range 10 {
		switch {
		case p.status == http.StatusSeeOther || p.status == http.StatusFound:
			loc := p.location()
			if strings.Contains(loc, "/sign-in") && !strings.HasPrefix(loc, "http") {
				p = b.submitSignIn(b.get(loc), user, pass)
				continue
			}
			u, err := url.Parse(loc)
			if err != nil {
				b.h.t.Fatal(err)
			}
			if u.IsAbs() {
				return u, consented
			}
			p = b.get(loc)
		case p.status == http.StatusOK && strings.Contains(p.body, `name="password"`):
			p = b.submitSignIn(p, user, pass)
		case p.status == http.StatusOK && p.continueURL() != "":
			p = b.get(p.continueURL())
		case p.status == http.StatusOK && strings.Contains(p.body, "Where access goes"):
			consented = true
			f := p.hidden()
			f.Set("decision", "allow")
			if m := reConfirm.FindStringSubmatch(p.body); m != nil {
				// The person ticks "I set up this connection and expected access to go to …".
				f.Set("confirm_destination", html.UnescapeString(m[1]))
			}
			p = b.post(b.h.base+"/authorize", f)
		default:
			b.h.t.Fatalf("unexpected page %d at %s: %s", p.status, p.url, p.body)
		}
	}
	b.h.t.Fatal("authorization did not finish")
	return nil, false
}

type tokenResult struct {
	status int
	header http.Header
	json   map[string]any
	raw    string
}

func (r tokenResult) str(k string) string { s, _ := r.json[k].(string); return s }

func (h *harness) postForm(path string, form url.Values, user, pass string) tokenResult {
	h.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if user != "" {
		req.SetBasicAuth(url.QueryEscape(user), url.QueryEscape(pass))
	}
	return h.send(req)
}

func (h *harness) send(req *http.Request) tokenResult {
	h.t.Helper()
	return sendRequest(h.t, req)
}

// sendRequest sends req and reads the answer as a token endpoint's JSON.
func sendRequest(t testing.TB, req *http.Request) tokenResult {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := tokenResult{status: resp.StatusCode, header: resp.Header, raw: string(b)}
	json.Unmarshal(b, &r.json)
	return r
}

func (h *harness) token(form url.Values, user, pass string) tokenResult {
	h.t.Helper()
	return h.postForm("/token", form, user, pass)
}

// codeFlow signs user in, consents and redeems the code for client "web" (or the given
// confidential client).
func (h *harness) codeFlow(b *browser, clientID, secretValue, scope, user, pass string) tokenResult {
	h.t.Helper()
	redirect := h.project.Clients[clientID].RedirectURIs[0]
	pk := newPKCE()
	loc, _ := b.authorize(authorizeURL(h, clientID, redirect, scope, pk, nil), user, pass)
	code := loc.Query().Get("code")
	if code == "" {
		h.t.Fatalf("no code in %s", loc)
	}
	res := h.token(url.Values{
		"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {redirect}, "code_verifier": {pk.verifier},
	}, clientID, secretValue)
	if res.status != http.StatusOK {
		h.t.Fatalf("code redemption: %d %s", res.status, res.raw)
	}
	return res
}

func (h *harness) refresh(clientID, secretValue, rt string) tokenResult {
	h.t.Helper()
	return h.token(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}}, clientID, secretValue)
}

func (h *harness) introspect(tok string) tokenResult {
	h.t.Helper()
	return h.postForm("/introspect", url.Values{"token": {tok}}, "svc", svcSecret)
}

func (h *harness) active(tok string) bool {
	h.t.Helper()
	r := h.introspect(tok)
	if r.status != http.StatusOK {
		h.t.Fatalf("introspection: %d %s", r.status, r.raw)
	}
	return r.json["active"] == true
}

func (h *harness) userinfo(tok string) tokenResult {
	h.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, h.base+"/userinfo", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	return h.send(req)
}

// ---- PostgreSQL --------------------------------------------------------------------------------

// postgresDSN gives one test its own schema (internal/store/sql/pgtest).
func postgresDSN(t testing.TB) string { return pgtest.DSN(t) }

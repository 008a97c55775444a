// Package callbacktest runs the connector flows for tests: the real HTTP server (webhook.New)
// with the callback and account flows mounted, a real SQLite store in a temporary directory,
// the fake GitHub (internal/upstream/fakegithub) on its own listener, an injected clock, and
// browsers with their own cookie jars. Two people are set up: Alice and Mallory, each with a
// Latchkey password and an account at the fake GitHub.
package callbacktest

import (
	"context"
	"database/sql"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/testclock"
	"latchkey.dev/latchkey/test/stack"

	"github.com/go-logr/logr"
	"golang.org/x/crypto/bcrypt"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events/audittest"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
	"latchkey.dev/latchkey/internal/upstream/fakegithub"
	"latchkey.dev/latchkey/internal/upstream/fakeoauth"
	"latchkey.dev/latchkey/webhook"
	"latchkey.dev/latchkey/webhook/callback"
	"latchkey.dev/latchkey/webhook/exchange"
	"latchkey.dev/latchkey/webhook/signin"
)

// The people of the stories.
const (
	ProjectKey = "team/demo"

	AliceEmail    = "alice@example.com"
	AlicePassword = "alice's long password"
	AliceLogin    = "alice-gh"
	AliceGitHubID = 2002

	MalloryEmail    = "mallory@example.com"
	MalloryPassword = "mallory's long password"
	MalloryLogin    = "mallory-gh"
	MalloryGitHubID = 1001

	ClientID     = "Iv1.latchkeytest"
	ClientSecret = "github-client-secret-for-tests"
)

// Clock is the injected clock: tests move it, nothing sleeps.
type Clock = testclock.Clock

// Options configure a Harness.
type Options struct {
	// LatchkeyHost and GitHubHost are the loopback addresses to listen on; default 127.0.0.1.
	// A browser test puts them on different hosts (127.0.0.1 and 127.0.0.2), which makes them
	// different sites: cookies are per host, not per port.
	LatchkeyHost, GitHubHost string
	// PublicHost, when set, is the host name in the issuer instead of LatchkeyHost's address
	// (WebAuthn needs a domain name: "localhost").
	PublicHost string
	// AccessTokenTTL > 0 makes the fake GitHub issue expiring tokens with refresh tokens.
	AccessTokenTTL time.Duration
	// Hooks run after each saved connection.
	Hooks []callback.Hook
	// Store, when set, wraps the store the server uses (a test makes some calls fail);
	// Harness.Store stays the real one.
	Store func(store.Store) store.Store
	// Logger receives the server's log; discarded when unset.
	Logger logr.Logger
	// Services start a fake service of each shape (internal/upstream/fakeoauth) with its
	// connector, default/<shape>, next to GitHub; the Agent client may exchange tokens for all.
	// Their tokens expire after ServiceTokenTTL (0: never, without refresh tokens).
	Services        []fakeoauth.Shape
	ServiceTokenTTL time.Duration
}

// Service is a running fake service and its connector.
type Service struct {
	Fake      *fakeoauth.Server
	URL       string
	Connector *config.Connector
}

// The confidential client that exchanges tokens for the Services' connectors.
const (
	Agent       = "agent"
	AgentSecret = "agent-secret-for-callback-tests-0123456789"
)

// Harness is one running installation.
type Harness struct {
	T         testing.TB
	Clock     *Clock
	Store     store.Store
	DBPath    string
	Holder    *config.Holder
	Project   *config.Project
	Connector *config.Connector
	Server    *webhook.Server
	Latchkey  *httptest.Server
	GitHub    *fakegithub.Server
	GitHubURL string
	// Issuer and CallbackURL are absolute.
	Issuer, CallbackURL string
	// AuditSink is the project's event sink for the audit trail (Trail reads it).
	AuditSink *audittest.Sink
	// Services are Options.Services by shape.
	Services map[fakeoauth.Shape]*Service
}

var hashes = sync.OnceValue(func() map[string]string {
	out := map[string]string{}
	for email, pw := range map[string]string{AliceEmail: AlicePassword, MalloryEmail: MalloryPassword} {
		b, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
		if err != nil {
			panic(err)
		}
		out[email] = string(b)
	}
	return out
})

func listen(t testing.TB, host string) net.Listener {
	t.Helper()
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("listen on %s: %v", host, err)
	}
	return ln
}

// New starts an installation; everything stops when the test ends.
func New(t testing.TB, o Options) *Harness {
	t.Helper()
	dbPath := filepath.Join(t.TempDir(), "latchkey.db")
	st, err := sqlstore.Open(context.Background(), "sqlite:"+dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := &Harness{
		T:      t,
		Clock:  testclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)),
		Store:  st,
		DBPath: dbPath,
		Holder: &config.Holder{},
	}

	// The server's URL is needed to build the handler, so the listener starts first; the
	// handler is published atomically for requests that arrive from other processes.
	var handler atomic.Pointer[webhook.Server]
	h.Latchkey = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := handler.Load()
		if s == nil {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		s.ServeHTTP(w, r)
	}))
	h.Latchkey.Listener.Close()
	h.Latchkey.Listener = listen(t, o.LatchkeyHost)
	h.Latchkey.Start()
	t.Cleanup(h.Latchkey.Close)
	if o.PublicHost != "" {
		_, port, _ := net.SplitHostPort(h.Latchkey.Listener.Addr().String())
		h.Latchkey.URL = "http://" + net.JoinHostPort(o.PublicHost, port)
	}
	h.Issuer = h.Latchkey.URL + "/team/demo"
	// The connector fakegithub.Connector describes is default/github.
	h.CallbackURL = h.Issuer + config.CallbackPath("default", "github")

	// The fake GitHub knows the one fixed callback exactly, as GitHub's OAuth app settings do,
	// so a code exchanged for any other redirect_uri fails.
	h.GitHub = fakegithub.New(fakegithub.Options{
		ClientID:     ClientID,
		ClientSecret: ClientSecret,
		Accounts: []fakegithub.Account{
			{ID: AliceGitHubID, Login: AliceLogin, Name: "Alice", Password: AlicePassword,
				Repos: []fakegithub.Repo{{Name: "diary", Private: true}}},
			{ID: MalloryGitHubID, Login: MalloryLogin, Name: "Mallory", Password: MalloryPassword},
		},
		RedirectURIs:   []string{h.CallbackURL},
		Now:            h.Clock.Now,
		AccessTokenTTL: o.AccessTokenTTL,
	})
	gh := httptest.NewUnstartedServer(h.GitHub)
	gh.Listener.Close()
	gh.Listener = listen(t, o.GitHubHost)
	gh.Start()
	t.Cleanup(gh.Close)
	h.GitHubURL = gh.URL
	h.Connector = h.GitHub.Connector(gh.URL, h.CallbackURL)

	hs := hashes()
	h.Project = &config.Project{
		Key: ProjectKey, Namespace: "team", Name: "demo", DisplayName: "Demo Team", Issuer: h.Issuer,
		SignIn: config.SignIn{Passwords: map[string]config.PasswordUser{
			AliceEmail:   {Email: AliceEmail, Name: "Alice", Hash: hs[AliceEmail]},
			MalloryEmail: {Email: MalloryEmail, Name: "Mallory", Hash: hs[MalloryEmail]},
		}},
		Lifetimes:    config.DefaultLifetimes(),
		Registration: config.Registration{Mode: config.RegistrationOpen},
		Clients: map[string]*config.Client{
			"repo-helper": {ID: "repo-helper", Name: "Repo Helper", RedirectURIs: []string{"http://127.0.0.1/cb"},
				TokenEndpointAuthMethod: "none", Connectors: []string{h.Connector.Key}},
		},
		Connectors:           map[string]*config.Connector{h.Connector.Key: h.Connector},
		ConnectorsByAudience: map[string]*config.Connector{h.Connector.Audience: h.Connector},
		Redirects:            config.DefaultRedirectRules(),
	}
	h.Services = map[fakeoauth.Shape]*Service{}
	for _, shape := range o.Services {
		// The github preset's fake sits beside the fake GitHub the harness always has
		// (default/github, audience github, "GitHub"): its connector takes other names.
		name := string(shape)
		if shape == fakeoauth.GitHub {
			name = "github-preset"
		}
		key := "default/" + name
		cb := h.Issuer + config.CallbackPath("default", name)
		fake := fakeoauth.New(fakeoauth.Options{
			Shape: shape, ClientID: ClientID, ClientSecret: ClientSecret, RedirectURI: cb, Now: h.Clock.Now,
			AccessTokenTTL: o.ServiceTokenTTL,
			Accounts: []fakeoauth.Account{
				{ID: "U0ALICE", Number: AliceGitHubID, Login: AliceLogin, Name: "Alice", Email: AliceEmail},
				{ID: "U0MALLORY", Number: MalloryGitHubID, Login: MalloryLogin, Name: "Mallory", Email: MalloryEmail},
			},
		})
		srv := httptest.NewServer(fake)
		t.Cleanup(srv.Close)
		sv := &Service{Fake: fake, URL: srv.URL, Connector: fake.Connector(srv.URL, key, cb)}
		if shape == fakeoauth.GitHub {
			sv.Connector.Audience, sv.Connector.DisplayName = name, "GitHub (preset)"
		}
		h.Services[shape] = sv
		h.Project.Connectors[key] = sv.Connector
		h.Project.ConnectorsByAudience[sv.Connector.Audience] = sv.Connector
	}
	if len(o.Services) > 0 {
		agent := &config.Client{
			ID: Agent, SecretHash: secret.Hash(AgentSecret), Name: "Agent", RedirectURIs: []string{"http://127.0.0.1/agent"},
			GrantTypes: []string{"authorization_code", exchange.GrantType}, Scopes: []string{"openid"},
			TokenEndpointAuthMethod: "client_secret_basic",
		}
		for key := range h.Project.Connectors {
			agent.Connectors = append(agent.Connectors, key)
		}
		h.Project.Clients[Agent] = agent
	}
	h.AuditSink = audittest.NewSink(t, h.Clock.Now)
	h.Project.EventSinks = []config.EventSink{h.AuditSink.Config()}
	h.Holder.Store(&config.Snapshot{Projects: map[string]*config.Project{ProjectKey: h.Project}, Version: 1})

	var served store.Store = st
	if o.Store != nil {
		served = o.Store(st)
	}
	h.Server, err = webhook.New(webhook.Options{
		Config:          h.Holder,
		Store:           served,
		Keyring:         secret.NewRandomKeyring(),
		Now:             h.Clock.Now,
		PublicURL:       h.Latchkey.URL,
		Logger:          o.Logger,
		ConnectionHooks: o.Hooks,
	})
	if err != nil {
		t.Fatal(err)
	}
	handler.Store(h.Server)
	return h
}

// Person returns the stored person with that email (they exist once they have signed in).
func (h *Harness) Person(email string) store.Person {
	h.T.Helper()
	db := h.rawDB()
	defer db.Close()
	var id string
	if err := db.QueryRow(`SELECT id FROM people WHERE project = ? AND email = ?`, ProjectKey, email).Scan(&id); err != nil {
		h.T.Fatalf("person %s: %v", email, err)
	}
	p, err := h.Store.GetPerson(context.Background(), ProjectKey, id)
	if err != nil {
		h.T.Fatal(err)
	}
	return p
}

// Connections lists a person's connections.
func (h *Harness) Connections(email string) []store.Connection {
	h.T.Helper()
	cs, err := h.Store.ListConnections(context.Background(), ProjectKey, h.Person(email).ID)
	if err != nil {
		h.T.Fatal(err)
	}
	return cs
}

// CountRows counts the rows of a table, straight from the database file.
func (h *Harness) CountRows(table string) int {
	h.T.Helper()
	db := h.rawDB()
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil {
		h.T.Fatal(err)
	}
	return n
}

// ConnectionBytes is every stored connection row's token and name columns, as the database
// holds them, for "the token is not stored in the clear" checks.
func (h *Harness) ConnectionBytes() []byte {
	h.T.Helper()
	db := h.rawDB()
	defer db.Close()
	var out []byte
	rows, err := db.Query(`SELECT coalesce(access_token, x''), coalesce(refresh_token, x''), account_name FROM connections`)
	if err != nil {
		h.T.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var at, rt []byte
		var name string
		if err := rows.Scan(&at, &rt, &name); err != nil {
			h.T.Fatal(err)
		}
		out = append(append(append(out, at...), rt...), name...)
	}
	return out
}

// FileBytes is the database file and its write-ahead log, byte for byte.
func (h *Harness) FileBytes() []byte {
	h.T.Helper()
	var out []byte
	for _, f := range []string{h.DBPath, h.DBPath + "-wal"} {
		b, err := os.ReadFile(f)
		if err != nil && !os.IsNotExist(err) {
			h.T.Fatal(err)
		}
		out = append(out, b...)
	}
	return out
}

func (h *Harness) rawDB() *sql.DB {
	db, err := sql.Open("sqlite", h.DBPath+"?_busy_timeout=10000&_query_only=1")
	if err != nil {
		h.T.Fatal(err)
	}
	return db
}

// Audit returns the project's audit records, newest first.
func (h *Harness) Audit() []store.AuditRecord {
	h.T.Helper()
	recs, err := h.Store.ListAudit(context.Background(), ProjectKey, 1000)
	if err != nil {
		h.T.Fatal(err)
	}
	return recs
}

// Trail delivers what is pending and checks that each action is in the audit log and was
// received by AuditSink, verified (internal/events/audittest). It returns the newest record of
// each action.
func (h *Harness) Trail(actions ...string) map[string]store.AuditRecord {
	h.T.Helper()
	return audittest.Trail(h.T, h.Store, h.Holder, h.Clock.Now, h.AuditSink, ProjectKey, actions...)
}

// AuditActions lists the actions of the audit records, oldest first.
func (h *Harness) AuditActions() []string {
	recs := h.Audit()
	out := make([]string, 0, len(recs))
	for i := len(recs) - 1; i >= 0; i-- {
		out = append(out, recs[i].Action)
	}
	return out
}

// ---------------------------------------------------------------------------------------------
// Browsers

// Browser is one person's browser: its own cookie jar; redirects are followed by hand.
type Browser struct {
	H   *Harness
	Jar http.CookieJar
	C   *http.Client
}

// Browser returns a new browser with an empty jar.
func (h *Harness) Browser() *Browser {
	jar, _ := cookiejar.New(nil)
	return &Browser{H: h, Jar: jar, C: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

// Page is a response as a test reads it; test/stack reads its document as a browser would.
type Page = stack.Page

func (b *Browser) abs(u string) string {
	if strings.HasPrefix(u, "/") {
		return b.H.Latchkey.URL + u
	}
	return u
}

// Do sends a request through the browser's jar.
func (b *Browser) Do(req *http.Request) Page {
	b.H.T.Helper()
	resp, err := b.C.Do(req)
	if err != nil {
		b.H.T.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return Page{Status: resp.StatusCode, Header: resp.Header, Body: string(body), URL: req.URL.String(), SetCookies: resp.Cookies()}
}

// Get loads an address (absolute, or a path on Latchkey).
func (b *Browser) Get(u string) Page {
	b.H.T.Helper()
	req, err := http.NewRequest(http.MethodGet, b.abs(u), nil)
	if err != nil {
		b.H.T.Fatal(err)
	}
	return b.Do(req)
}

// Post submits a form as a page of the same origin would (browsers send Origin on POST).
func (b *Browser) Post(u string, form url.Values) Page {
	b.H.T.Helper()
	return b.PostFrom(u, form, "")
}

// PostFrom submits a form as a page at origin would; "" means the target's own origin.
func (b *Browser) PostFrom(u string, form url.Values, origin string) Page {
	b.H.T.Helper()
	req, err := http.NewRequest(http.MethodPost, b.abs(u), strings.NewReader(form.Encode()))
	if err != nil {
		b.H.T.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin == "" {
		origin = req.URL.Scheme + "://" + req.URL.Host
	}
	req.Header.Set("Origin", origin)
	return b.Do(req)
}

// Follow follows redirects from p (at most ten) and returns the first page that is not one.
func (b *Browser) Follow(p Page) Page {
	b.H.T.Helper()
	for range 10 {
		if p.Status < 300 || p.Status > 399 {
			return p
		}
		p = b.Get(p.Location())
	}
	b.H.T.Fatalf("too many redirects, last at %s", p.URL)
	return p
}

// SignIn signs the browser in to Latchkey through the sign-in page.
func (b *Browser) SignIn(email, password string) {
	b.H.T.Helper()
	// prompt=login shows the form even to a browser that is signed in already.
	form := b.Get(b.H.Issuer + "/sign-in?prompt=login")
	if form.Status != http.StatusOK {
		b.H.T.Fatalf("sign-in page: %d", form.Status)
	}
	action, fields, ok := form.Form("Sign in")
	if !ok {
		b.H.T.Fatalf("no sign-in form: %s", form.Body)
	}
	fields.Set("username", email)
	fields.Set("password", password)
	res := b.Post(action, fields)
	if res.Status != http.StatusOK || !strings.Contains(res.Body, "You are signed in") {
		b.H.T.Fatalf("sign-in failed: %d %s", res.Status, res.Text())
	}
}

// SignInWithPasskey leaves the browser signed in as the person with email (who has signed in
// before) the way a passkey sign-in does: a new session, made now, whose method is
// signin.MethodHardwareKey. The ceremony itself is tested in webhook/signin and test/e2e.
func (b *Browser) SignInWithPasskey(email string) {
	b.H.T.Helper()
	b.SignInWith(email, signin.MethodHardwareKey)
}

// SignInWith leaves the browser signed in as the person with email (who has signed in before)
// with a new session, made now, whose sign-in method is method (signin.MethodOIDC, …).
func (b *Browser) SignInWith(email, method string) {
	b.H.T.Helper()
	person := b.H.Person(email)
	v := secret.New("")
	now := b.H.Clock.Now()
	if err := b.H.Store.CreateSession(context.Background(), store.Session{
		IDHash: secret.Hash(v), Project: ProjectKey, Subject: person.ID, AuthTime: now, CreatedAt: now,
		ExpiresAt: now.Add(b.H.Project.Lifetimes.Session), Method: method,
	}); err != nil {
		b.H.T.Fatal(err)
	}
	u, _ := url.Parse(b.H.Issuer + "/")
	b.Jar.SetCookies(u, []*http.Cookie{{
		Name: signin.CookieName(b.H.Server.Env(), b.H.Project, "session"), Value: v, Path: u.Path,
	}})
}

// SignInGitHub signs the browser in at the fake GitHub, as if the person had done so earlier.
func (b *Browser) SignInGitHub(login string) {
	u, _ := url.Parse(b.H.GitHubURL)
	b.Jar.SetCookies(u, []*http.Cookie{b.H.GitHub.SessionCookie(login)})
}

// Account loads the account page.
func (b *Browser) Account() Page {
	b.H.T.Helper()
	return b.Get(b.H.Issuer + "/account")
}

// Press loads the account page, presses the button that says label (the first one) and
// returns the answer without following it; "Connect GitHub" answers with a redirect to GitHub
// that carries the binding cookie.
func (b *Browser) Press(label string) Page {
	b.H.T.Helper()
	acct := b.Account()
	action, fields, ok := acct.Form(label)
	if !ok {
		b.H.T.Fatalf("no %q button on the account page: %s", label, acct.Text())
	}
	return b.Post(action, fields)
}

// BindingCookie is the binding cookie the browser holds for the callback, or nil.
func (b *Browser) BindingCookie() *http.Cookie {
	u, _ := url.Parse(b.H.CallbackURL)
	for _, c := range b.Jar.Cookies(u) {
		if c.Name == callback.CookieName(b.H.Server.Env()) {
			return c
		}
	}
	return nil
}

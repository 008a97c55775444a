// Package stack is the one full-server harness (decision 0081): it runs a Latchkey
// installation — one or more replicas (each a webhook.Server with its own store connection to
// one database, as separate pods would have) behind a round-robin front that plays the Service,
// the fake GitHub on its own listener, an injected clock — with the project every full-server
// test shares (NewProject, and Repo Helper with its GitHub connector), the requests of its
// clients, and browsers that read pages as a person would (html.go). The flow tests of
// webhook/<flow>, and the fault, replica and log tests of test/, run on it.
//
// All replicas share what real replicas share: the database, the sealing keys (one Secret) and
// the compiled configuration (the same resources), and nothing else.
package stack

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/bcrypt"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/events/audittest"
	"latchkey.dev/latchkey/internal/metrics"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
	"latchkey.dev/latchkey/internal/store/sql/pgtest"
	"latchkey.dev/latchkey/internal/testclock"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/internal/upstream/fakegithub"
	"latchkey.dev/latchkey/internal/upstream/fakeoauth"
	"latchkey.dev/latchkey/internal/workload"
	"latchkey.dev/latchkey/webhook"
	"latchkey.dev/latchkey/webhook/callback"
	"latchkey.dev/latchkey/webhook/exchange"
)

// The project and its people.
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

	// Agent is Repo Helper: it signs people in (code flow, refresh) and exchanges their tokens
	// for GitHub.
	Agent       = "repo-helper"
	AgentName   = "Repo Helper"
	AgentSecret = "lk_cs_repo-helper-secret-for-stack-tests-0123456789"
	AgentRedir  = "http://127.0.0.1/cb"

	// Service is a client_credentials client.
	Service       = "svc"
	ServiceSecret = "lk_cs_service-secret-for-stack-tests-0123456789abc"

	GitHubClientID     = "Iv1.stacktest"
	GitHubClientSecret = "github-client-secret-for-stack-tests"
	// Audience names GitHub in token exchange.
	Audience = "github"
)

// Clock is the injected clock: tests move it, nothing sleeps.
type Clock = testclock.Clock

// Options configure a Stack.
type Options struct {
	// DSN of the database every replica opens (sqlite:… or postgres://…); a new SQLite
	// database of the test's own when empty.
	DSN string
	// Replicas is the number of servers behind the front; default 1.
	Replicas int
	// AccessTokenTTL > 0 makes the fake GitHub issue expiring, refreshable tokens.
	AccessTokenTTL time.Duration
	// UpstreamTimeout bounds a call to GitHub (upstream.Vault.Timeout); 0 is its default.
	UpstreamTimeout time.Duration
	// Logger is every replica's logger; discarded when zero.
	Logger logr.Logger
	// Metrics, when set, is every replica's (they share the series, as a scrape of the
	// whole deployment would add them up).
	Metrics *metrics.Metrics
	// TokenLifetime is how long the tokens AccessToken issues live; a day when zero.
	TokenLifetime time.Duration
	// Extra GitHub accounts beyond Alice's and Mallory's, by login.
	ExtraLogins []string
	// BackchannelNotify posts CIBA ping notifications (webhook.Options.BackchannelNotify).
	BackchannelNotify *http.Client
	// Workloads reviews workload_identity clients' ServiceAccount tokens (a
	// tokenreview.Reviewer on a test cluster); nil: none, as without a cluster.
	Workloads workload.Reviewer
	// Project, when set, changes the project before the replicas start.
	Project func(*config.Project)
	// Server, when set, changes the options every replica's server is built with.
	Server func(*webhook.Options)

	// FrontHost and GitHubHost are the loopback addresses the front and the fake GitHub listen
	// on; default 127.0.0.1. A browser test puts them on different hosts (127.0.0.1 and
	// 127.0.0.2), which makes them different sites: cookies are per host, not per port.
	FrontHost, GitHubHost string
	// PublicHost, when set, is the host name in the issuer instead of FrontHost's address
	// (WebAuthn needs a domain name: "localhost").
	PublicHost string
	// Hooks run after each saved connection (webhook.Options.ConnectionHooks).
	Hooks []callback.Hook
	// Store, when set, wraps the store every replica's server uses (a test makes some calls
	// fail); Replica.Store and Stack.Store stay the real one.
	Store func(store.Store) store.Store
	// Services start a fake service of each shape (internal/upstream/fakeoauth) with its
	// connector, default/<shape>, next to GitHub (services.go); ServicesAgent may exchange
	// tokens for all. Their tokens expire after ServiceTokenTTL (0: never, without refresh
	// tokens).
	Services        []fakeoauth.Shape
	ServiceTokenTTL time.Duration
	// Audit lists an event sink that verifies what it receives (Stack.AuditSink), so Trail can
	// read the audit trail both ways an operator can.
	Audit bool
	// Links sets up the connect-link stories (links.go): the MCP server, Copycat and a
	// registered client, security events counted by Stack.Emitter, and the "ops" sink
	// (Stack.Sink) recording what it receives.
	Links bool
}

// Replica is one server of the installation.
type Replica struct {
	Store  store.Store
	Server *webhook.Server
	Holder *config.Holder
	// Served counts the requests the front sent here.
	Served atomic.Int64
}

// Stack is a running installation.
type Stack struct {
	T         testing.TB
	Clock     *Clock
	Project   *config.Project
	Connector *config.Connector
	Keyring   *secret.Keyring
	Replicas  []*Replica
	// Admin is the test's own connection to the database, for setting up and counting.
	Admin     store.Store
	Front     *httptest.Server
	Issuer    string
	GitHub    *fakegithub.Server
	GitHubURL string
	// CallbackURL is GitHub's connector's callback, absolute.
	CallbackURL string
	// DBPath is the SQLite database file ("" on PostgreSQL).
	DBPath string
	// AuditSink receives the audit trail when Options.Audit is set.
	AuditSink *audittest.Sink
	// Services are Options.Services by shape.
	Services map[fakeoauth.Shape]*FakeService
	// Emitter counts security events into Registry, and Sink is the "ops" sink, when
	// Options.Links is set.
	Emitter  *events.Emitter
	Registry *prometheus.Registry
	Sink     *Sink

	dsn           string
	tokenLifetime time.Duration
	rr            atomic.Uint64
}

// DSN is the database every replica uses.
func (s *Stack) DSN() string { return s.dsn }

var hashes = sync.OnceValue(func() map[string]string {
	out := map[string]string{}
	for email, pw := range map[string]string{AliceEmail: AlicePassword, MalloryEmail: MalloryPassword} {
		b, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
		if err != nil {
			panic(err)
		}
		out[email] = string(b)
	}
	out[BobEmail] = argon2idPHC(BobPassword)
	return out
})

// New starts an installation; everything stops when the test ends.
func New(t testing.TB, o Options) *Stack {
	t.Helper()
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.Logger.GetSink() == nil {
		o.Logger = logr.Discard()
	}
	if o.TokenLifetime <= 0 {
		o.TokenLifetime = 24 * time.Hour
	}
	s := &Stack{
		T:             t,
		Clock:         testclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)),
		Keyring:       secret.NewRandomKeyring(),
		tokenLifetime: o.TokenLifetime,
	}
	if o.DSN == "" {
		s.DBPath = filepath.Join(t.TempDir(), "latchkey.db")
		o.DSN = "sqlite:" + s.DBPath
	}
	s.dsn = o.DSN
	admin, err := sqlstore.Open(context.Background(), o.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	s.Admin = admin

	s.Front = serve(t, o.FrontHost, http.HandlerFunc(s.route))
	if o.PublicHost != "" {
		_, port, _ := net.SplitHostPort(s.Front.Listener.Addr().String())
		s.Front.URL = "http://" + net.JoinHostPort(o.PublicHost, port)
	}
	s.Issuer = s.Front.URL + "/team/demo"
	// The connector fakegithub.Connector describes is default/github.
	s.CallbackURL = s.Issuer + config.CallbackPath("default", "github")
	s.startGitHub(o)
	s.newProject(o)
	for range o.Replicas {
		s.Replicas = append(s.Replicas, s.newReplica(o))
	}
	return s
}

// serve starts handler on host's loopback address (127.0.0.1 when empty).
func serve(t testing.TB, host string, handler http.Handler) *httptest.Server {
	t.Helper()
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("listen on %s: %v", host, err)
	}
	srv := httptest.NewUnstartedServer(handler)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// startGitHub starts the fake GitHub. It knows the one fixed callback exactly, as GitHub's
// OAuth app settings do, so a code exchanged for any other redirect_uri fails.
func (s *Stack) startGitHub(o Options) {
	accounts := []fakegithub.Account{
		{ID: AliceGitHubID, Login: AliceLogin, Name: "Alice", Password: AlicePassword,
			Repos: []fakegithub.Repo{{Name: "diary", Private: true}}},
		{ID: MalloryGitHubID, Login: MalloryLogin, Name: "Mallory", Password: MalloryPassword},
	}
	for i, l := range o.ExtraLogins {
		accounts = append(accounts, fakegithub.Account{ID: int64(10000 + i), Login: l, Name: l})
	}
	s.GitHub = fakegithub.New(fakegithub.Options{
		ClientID: GitHubClientID, ClientSecret: GitHubClientSecret, Accounts: accounts,
		RedirectURIs: []string{s.CallbackURL}, Now: s.Clock.Now, AccessTokenTTL: o.AccessTokenTTL,
	})
	gh := serve(s.T, o.GitHubHost, s.GitHub)
	s.GitHubURL = gh.URL
	s.Connector = s.GitHub.Connector(gh.URL, s.CallbackURL)
}

// newProject makes the project: NewProject's, Repo Helper with GitHub, and what o asks for.
func (s *Stack) newProject(o Options) {
	s.Project = NewProject(s.Issuer)
	s.Project.Clients[Agent] = &config.Client{
		ID: Agent, SecretHash: secret.Hash(AgentSecret), Name: AgentName, RedirectURIs: []string{AgentRedir},
		GrantTypes:              []string{"authorization_code", "refresh_token", exchange.GrantType},
		Scopes:                  []string{"openid", "profile", "email", "read"},
		TokenEndpointAuthMethod: "client_secret_basic", Connectors: []string{s.Connector.Key},
	}
	s.Project.Connectors = map[string]*config.Connector{s.Connector.Key: s.Connector}
	s.Project.ConnectorsByAudience = map[string]*config.Connector{s.Connector.Audience: s.Connector}
	s.startServices(o)
	if o.Audit {
		s.AuditSink = audittest.NewSink(s.T, s.Clock.Now)
		s.Project.EventSinks = append(s.Project.EventSinks, s.AuditSink.Config())
	}
	if o.Links {
		s.setUpLinks()
	}
	if o.Project != nil {
		o.Project(s.Project)
	}
}

// newReplica starts one server with its own store connection and its own compiled snapshot.
func (s *Stack) newReplica(o Options) *Replica {
	t := s.T
	st, err := sqlstore.Open(context.Background(), o.DSN, sqlstore.Observe(o.Metrics.StoreOperation))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r := &Replica{Store: st, Holder: &config.Holder{}}
	// Each replica compiles the same resources into its own snapshot.
	r.Holder.Store(&config.Snapshot{Projects: map[string]*config.Project{ProjectKey: s.Project}, Version: 1})
	var served store.Store = st
	if o.Store != nil {
		served = o.Store(st)
	}
	so := webhook.Options{
		Config: r.Holder, Store: served, Keyring: s.Keyring, Logger: o.Logger, Now: s.Clock.Now,
		PublicURL: s.Front.URL, Metrics: o.Metrics, RateBuckets: st.RateBuckets(), BackchannelNotify: o.BackchannelNotify,
		Workloads: o.Workloads, ConnectionHooks: o.Hooks,
		Vault: &upstream.Vault{Store: served, Keyring: s.Keyring, Now: s.Clock.Now, Timeout: o.UpstreamTimeout,
			OnRefresh: o.Metrics.UpstreamRefresh},
	}
	if o.Links {
		so.Events = s.emitter(st, r.Holder).Recorded
	}
	if o.Server != nil {
		o.Server(&so)
	}
	r.Server, err = webhook.New(so)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// ReplicaHeader pins a request to one replica (its index), bypassing the round robin.
const ReplicaHeader = "X-Test-Replica"

// route is the Service: requests go to the replicas in turn.
func (s *Stack) route(w http.ResponseWriter, r *http.Request) {
	i := int(s.rr.Add(1)-1) % len(s.Replicas)
	if v := r.Header.Get(ReplicaHeader); v != "" {
		_, _ = fmt.Sscan(v, &i) // not a number: keep the round-robin choice
		i %= len(s.Replicas)
	}
	rep := s.Replicas[i]
	rep.Served.Add(1)
	rep.Server.ServeHTTP(w, r)
}

// ---------------------------------------------------------------------------------------------
// Setting up state directly (as a finished flow would have left it)

// PersonID returns the id of the person with that email, creating them as sign-in would.
func (s *Stack) PersonID(email string) string {
	s.T.Helper()
	s.admit(email)
	p, err := s.Admin.UpsertPerson(context.Background(), store.Person{
		Project: ProjectKey, ID: "p-" + strings.NewReplacer("@", "-at-", ".", "-").Replace(email), Source: "password",
		SourceSubject: email, Email: email, CreatedAt: s.Clock.Now(),
	})
	if err != nil {
		s.T.Fatal(err)
	}
	return p.ID
}

// admit puts email in the Project's password file, as for someone who could sign in: a person
// of the password file who is not in it is refused everywhere (docs/leavers.md). The file is
// replaced, never written in place, since the replicas' handlers read it meanwhile; nobody
// signs in with the placeholder hash.
func (s *Stack) admit(email string) {
	passwordsMu.Lock()
	defer passwordsMu.Unlock()
	if _, ok := s.Project.SignIn.Passwords[email]; ok {
		return
	}
	ps := maps.Clone(s.Project.SignIn.Passwords)
	ps[email] = config.PasswordUser{Email: email, Name: email, Hash: hashes()[AliceEmail]}
	s.Project.SignIn.Passwords = ps
}

var passwordsMu sync.Mutex

// AccessToken issues a Latchkey access token for the person to client, with audience, as the
// authorization code grant would have; it lives Options.TokenLifetime.
func (s *Stack) AccessToken(email, client string, audience ...string) string {
	s.T.Helper()
	tok := secret.New(secret.PrefixAccessToken)
	now := s.Clock.Now()
	if err := s.Admin.CreateTokens(context.Background(), store.Token{
		Hash: secret.Hash(tok), Kind: store.AccessToken, Project: ProjectKey, ClientID: client,
		Subject: s.PersonID(email), Scopes: []string{"openid"}, Audience: audience, FamilyID: secret.New(""),
		AuthTime: now, IssuedAt: now, ExpiresAt: now.Add(s.tokenLifetime),
	}); err != nil {
		s.T.Fatal(err)
	}
	return tok
}

// ConnectGitHub connects the person's GitHub account (login) as the callback would after a
// real authorization at the fake GitHub (so the tokens are real ones it will refresh), and lets
// Repo Helper use it.
func (s *Stack) ConnectGitHub(email, login string) store.Connection {
	s.T.Helper()
	ctx := context.Background()
	s.GitHub.Approve(login, GitHubClientID)
	verifier := upstream.NewVerifier()
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{
		"response_type": {"code"}, "client_id": {GitHubClientID}, "redirect_uri": {s.Connector.CallbackURL},
		"scope": {strings.Join(s.Connector.Scopes, " ")}, "state": {"st"},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
	}
	req, _ := http.NewRequest(http.MethodGet, s.Connector.AuthURL+"?"+q.Encode(), nil)
	req.AddCookie(s.GitHub.SessionCookie(login))
	resp, err := noRedirects.Do(req)
	if err != nil {
		s.T.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || loc.Query().Get("code") == "" {
		s.T.Fatalf("GitHub did not hand out a code: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	acct, tok, err := upstream.Exchange(ctx, nil, s.Connector, loc.Query().Get("code"), verifier)
	if err != nil {
		s.T.Fatal(err)
	}
	now := s.Clock.Now()
	c := store.Connection{
		ID: secret.New("")[:22], Project: ProjectKey, Subject: s.PersonID(email), Connector: s.Connector.Key,
		AccountID: acct.ID, AccountName: acct.Name, Status: store.ConnectionActive, CreatedAt: now, UpdatedAt: now,
	}
	v := &upstream.Vault{Store: s.Admin, Keyring: s.Keyring, Now: s.Clock.Now}
	v.Seal(&c, tok)
	saved, err := s.Admin.SaveConnection(ctx, c)
	if err != nil {
		s.T.Fatal(err)
	}
	if err := s.Admin.AllowAgent(ctx, store.AgentPermission{
		Project: ProjectKey, Subject: c.Subject, Connector: c.Connector, ClientID: Agent, ConnectionID: saved.ID, CreatedAt: now,
	}); err != nil {
		s.T.Fatal(err)
	}
	return saved
}

var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// ---------------------------------------------------------------------------------------------
// The token endpoint

// Answer is a JSON answer of the server.
type Answer struct {
	Status int
	Header http.Header
	Body   map[string]any
	Raw    []byte
	// Took is how long the answer took.
	Took time.Duration
}

// Str returns a member of the body as text: a string, or a number written out ("" when
// absent or anything else).
func (a Answer) Str(k string) string {
	switch v := a.Body[k].(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return ""
}

// Post sends a form to a path under the issuer with Basic client authentication, through the
// front. Transport errors are returned, not fatal: the fault tests count them.
func (s *Stack) Post(ctx context.Context, path string, form url.Values, client, clientSecret string) (Answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.Issuer+path, strings.NewReader(form.Encode()))
	if err != nil {
		return Answer{}, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if client != "" {
		req.SetBasicAuth(url.QueryEscape(client), url.QueryEscape(clientSecret))
	}
	return Do(req)
}

// Do sends req and reads a JSON answer (Body stays nil when the answer is not JSON).
func Do(req *http.Request) (Answer, error) {
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Answer{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	a := Answer{Status: resp.StatusCode, Header: resp.Header, Raw: raw, Took: time.Since(start)}
	if err != nil {
		return a, err
	}
	_ = json.Unmarshal(raw, &a.Body) // not JSON (an HTML page): Body stays nil, Raw has it
	return a, nil
}

// MustPost is Post for tests that expect an answer.
func (s *Stack) MustPost(path string, form url.Values, client, clientSecret string) Answer {
	s.T.Helper()
	a, err := s.Post(context.Background(), path, form, client, clientSecret)
	if err != nil {
		s.T.Fatal(err)
	}
	return a
}

// Exchange is Repo Helper asking for the subject token's owner's GitHub token.
func (s *Stack) Exchange(ctx context.Context, subjectToken string) (Answer, error) {
	return s.Post(ctx, "/token", url.Values{
		"grant_type":           {exchange.GrantType},
		"subject_token":        {subjectToken},
		"subject_token_type":   {exchange.TokenTypeAccessToken},
		"requested_token_type": {exchange.TokenTypeAccessToken},
		"audience":             {Audience},
	}, Agent, AgentSecret)
}

// ClientCredentials asks for a service token.
func (s *Stack) ClientCredentials(ctx context.Context) (Answer, error) {
	return s.Post(ctx, "/token", url.Values{"grant_type": {"client_credentials"}}, Service, ServiceSecret)
}

// Refresh is Repo Helper refreshing.
func (s *Stack) Refresh(ctx context.Context, refreshToken string) (Answer, error) {
	return s.Post(ctx, "/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refreshToken}}, Agent, AgentSecret)
}

// ---------------------------------------------------------------------------------------------
// Browsers

// Browser is one person's browser: its own cookie jar; redirects are followed by hand.
type Browser struct {
	// S is the stack the browser belongs to; nil for a browser made by NewBrowser.
	S *Stack
	// Base is the server's address; Issuer the project's.
	Base, Issuer string
	Jar          http.CookieJar
	C            *http.Client
}

// Browser returns a new browser for the stack's project.
func (s *Stack) Browser() *Browser {
	b := NewBrowser(s.Front.URL, s.Issuer)
	b.S = s
	return b
}

// NewBrowser returns a browser for any server: base is its address, issuer the project's.
func NewBrowser(base, issuer string) *Browser {
	jar, _ := cookiejar.New(nil)
	return &Browser{Base: base, Issuer: issuer, Jar: jar, C: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// Page is a response as a test reads it; html.go reads its document.
type Page struct {
	Status int
	Header http.Header
	Body   string
	URL    string
	// SetCookies are the cookies the response set.
	SetCookies []*http.Cookie
}

// Location is the redirect target resolved against the request URL.
func (p Page) Location() string {
	loc := p.Header.Get("Location")
	base, err := url.Parse(p.URL)
	if loc == "" || err != nil {
		return loc
	}
	u, err := base.Parse(loc)
	if err != nil {
		return loc
	}
	return u.String()
}

// Cookie returns the cookie the response set with that name, or nil.
func (p Page) Cookie(name string) *http.Cookie {
	for _, c := range p.SetCookies {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// Press submits the form of page whose button says label.
func (b *Browser) Press(p Page, label string) (Page, error) {
	f, ok := p.FindForm(label)
	if !ok {
		return p, &StepError{Page: p, Err: fmt.Errorf("no %q button among %q", label, p.Buttons())}
	}
	return b.Submit(f)
}

// Follow follows redirects from p (at most ten) and returns the first page that is not one.
func (b *Browser) Follow(p Page) (Page, error) {
	for range 10 {
		if p.Status < 300 || p.Status > 399 {
			return p, nil
		}
		var err error
		if p, err = b.Get(p.Location()); err != nil {
			return p, err
		}
	}
	return p, &StepError{Page: p, Err: errors.New("too many redirects")}
}

// SignInGitHub signs the browser in at the fake GitHub, as if the person had done so earlier.
func (b *Browser) SignInGitHub(login string) {
	u, _ := url.Parse(b.S.GitHubURL)
	b.Jar.SetCookies(u, []*http.Cookie{b.S.GitHub.SessionCookie(login)})
}

// Cookies are the browser's cookies for the project's pages, the upstream callback
// included (each cookie is scoped to the path it serves).
func (b *Browser) Cookies() []*http.Cookie {
	var out []*http.Cookie
	seen := map[string]bool{}
	for _, p := range []string{b.Base + "/", b.Issuer + "/", b.S.Connector.CallbackURL, b.Issuer + "/account/"} {
		u, _ := url.Parse(p)
		for _, c := range b.Jar.Cookies(u) {
			if !seen[c.Name+"="+c.Value] {
				seen[c.Name+"="+c.Value] = true
				out = append(out, c)
			}
		}
	}
	return out
}

func (b *Browser) abs(u string) string {
	if strings.HasPrefix(u, "/") {
		return b.Base + u
	}
	return u
}

// Get loads an address; transport errors are returned.
func (b *Browser) Get(u string) (Page, error) {
	req, err := http.NewRequest(http.MethodGet, b.abs(u), nil)
	if err != nil {
		return Page{}, err
	}
	return b.do(req)
}

// Post submits a form as a page of the same origin would.
func (b *Browser) Post(u string, form url.Values) (Page, error) {
	req, err := http.NewRequest(http.MethodPost, b.abs(u), strings.NewReader(form.Encode()))
	if err != nil {
		return Page{}, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", req.URL.Scheme+"://"+req.URL.Host)
	return b.do(req)
}

func (b *Browser) do(req *http.Request) (Page, error) {
	resp, err := b.C.Do(req)
	if err != nil {
		return Page{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return Page{Status: resp.StatusCode, Header: resp.Header, Body: string(body), URL: req.URL.String(), SetCookies: resp.Cookies()}, err
}

// SignIn signs the browser in through the sign-in page.
func (b *Browser) SignIn(email, password string) error {
	form, err := b.Get(b.Issuer + "/sign-in?prompt=login")
	if err != nil {
		return err
	}
	if form.Status != http.StatusOK || !form.HasField("Password") {
		return fmt.Errorf("sign-in page: %d", form.Status)
	}
	res, err := b.FillSignIn(form, email, password)
	if err != nil {
		return err
	}
	if res.Status != http.StatusOK || !strings.Contains(res.Text(), "signed in") {
		return fmt.Errorf("sign-in: %d", res.Status)
	}
	return nil
}

// FillSignIn fills in the sign-in form of page p (Email, Password) and presses "Sign in".
func (b *Browser) FillSignIn(p Page, email, password string) (Page, error) {
	f, ok := p.FindForm("Sign in")
	if !ok {
		return p, &StepError{Page: p, Err: fmt.Errorf("no sign-in form; buttons %q", p.Buttons())}
	}
	if err := f.Set("Email", email); err != nil {
		return p, &StepError{Page: p, Err: err}
	}
	if err := f.Set("Password", password); err != nil {
		return p, &StepError{Page: p, Err: err}
	}
	return b.Submit(f)
}

// Allow presses "Allow" on a consent page, first ticking the box that confirms where access
// goes when the page asks for it, as the person who set up the connection would.
func (b *Browser) Allow(p Page) (Page, error) {
	f, ok := p.FindForm("Allow")
	if !ok {
		return p, &StepError{Page: p, Err: fmt.Errorf("no Allow button; buttons %q", p.Buttons())}
	}
	if p.HasField(confirmLabel) {
		if err := f.Check(confirmLabel); err != nil {
			return p, &StepError{Page: p, Err: err}
		}
	}
	return b.Submit(f)
}

// confirmLabel starts the label of the consent page's "I expected access to go there" box.
const confirmLabel = "I set up this connection"

// PKCE is a code verifier and its S256 challenge.
type PKCE struct{ Verifier, Challenge string }

func NewPKCE() PKCE {
	v := secret.New("")
	sum := sha256.Sum256([]byte(v))
	return PKCE{Verifier: v, Challenge: base64.RawURLEncoding.EncodeToString(sum[:])}
}

// StepError is a browser flow that stopped: at a page it did not expect, or on a transport
// error.
type StepError struct {
	Page Page
	Err  error
}

func (e *StepError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("at %s: %v", e.Page.URL, e.Err)
	}
	return fmt.Sprintf("stopped at %d %s: %s", e.Page.Status, e.Page.URL, e.Page.Text())
}

func (e *StepError) Unwrap() error { return e.Err }

// AuthorizeURL is an authorization request of client with PKCE; extra parameters are added
// (replacing any of the same name). Its state is "st-" and the client's id.
func (s *Stack) AuthorizeURL(client, redirectURI, scope string, pk PKCE, extra url.Values) string {
	return authorizeURL(s.Issuer, client, redirectURI, scope, pk, extra)
}

func authorizeURL(issuer, client, redirectURI, scope string, pk PKCE, extra url.Values) string {
	q := url.Values{
		"response_type": {"code"}, "client_id": {client}, "redirect_uri": {redirectURI}, "state": {"st-" + client},
		"code_challenge": {pk.Challenge}, "code_challenge_method": {"S256"},
	}
	if scope != "" {
		q.Set("scope", scope)
	}
	maps.Copy(q, extra)
	return issuer + "/authorize?" + q.Encode()
}

// Authorize runs the browser side of an authorization code flow for client (signing in as
// email when asked, allowing on the consent page) and returns the code. With email "" a
// request to sign in is an error: the browser is expected to be signed in already.
func (b *Browser) Authorize(client, redirectURI, scope, email, password string, pk PKCE) (string, error) {
	to, last, _, err := b.authorize(authorizeURL(b.Issuer, client, redirectURI, scope, pk, nil), email, password,
		func(loc string) bool { return strings.HasPrefix(loc, redirectURI) })
	if err != nil {
		return "", err
	}
	if c := to.Query().Get("code"); c != "" {
		return c, nil
	}
	// The redirect itself is the page: a caller can read the error the client was sent.
	return "", &StepError{Page: last, Err: fmt.Errorf("redirected without a code: %s", to)}
}

// AuthorizeAt is the browser side of the authorization request at authURL: it signs in as
// email when asked and allows on the consent page, and returns where Latchkey finally sends
// the browser away to (the client's redirect) and whether a consent page was shown.
func (b *Browser) AuthorizeAt(authURL, email, password string) (to *url.URL, consented bool, err error) {
	to, _, consented, err = b.authorize(authURL, email, password, func(loc string) bool { return !strings.HasPrefix(loc, b.Base+"/") })
	return to, consented, err
}

// authorize follows the authorization request at authURL until a redirect to an address done
// accepts, and returns that redirect's page too.
func (b *Browser) authorize(authURL, email, password string, done func(string) bool) (*url.URL, Page, bool, error) {
	consented := false
	p, err := b.Get(authURL)
	for range 10 {
		if err != nil {
			return nil, p, consented, &StepError{Page: p, Err: err}
		}
		switch {
		case p.Status == http.StatusSeeOther || p.Status == http.StatusFound:
			loc := p.Location()
			if done(loc) {
				u, err := url.Parse(loc)
				return u, p, consented, err
			}
			p, err = b.Get(loc)
		case p.Status == http.StatusOK && p.HasField("Password"):
			if email == "" {
				return nil, p, consented, &StepError{Page: p, Err: errors.New("asked to sign in again")}
			}
			p, err = b.FillSignIn(p, email, password)
		case p.Status == http.StatusOK && p.Continue() != "":
			p, err = b.Get(p.Continue())
		case p.Status == http.StatusOK && strings.Contains(p.Text(), "Where access goes"):
			consented = true
			p, err = b.Allow(p)
		default:
			return nil, p, consented, &StepError{Page: p}
		}
	}
	return nil, p, consented, &StepError{Page: p, Err: errors.New("authorization did not finish")}
}

// CodeFlow signs email in (if needed), consents for Repo Helper and redeems the code.
func (b *Browser) CodeFlow(email, password string) (Answer, error) {
	pk := NewPKCE()
	code, err := b.Authorize(Agent, AgentRedir, "openid read", email, password, pk)
	if err != nil {
		return Answer{}, err
	}
	return b.S.Post(context.Background(), "/token", url.Values{
		"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {AgentRedir}, "code_verifier": {pk.Verifier},
	}, Agent, AgentSecret)
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL

// PostgresDSN gives one test its own schema in LATCHKEY_TEST_POSTGRES_DSN's database, dropped
// when the test ends. Without the variable the test is skipped, or fails under CI=true.
func PostgresDSN(t testing.TB) string { return pgtest.DSN(t) }

// PgBouncerDSN gives one test its own schema as PostgresDSN does, reached through the PgBouncer
// in transaction mode of LATCHKEY_TEST_PGBOUNCER_DSN (internal/store/sql/pgtest). Without the
// variables the test is skipped, or fails under CI=true.
func PgBouncerDSN(t testing.TB) string { return pgtest.PgBouncerDSN(t) }

// NewSchema creates a fresh schema in the database at base and returns a DSN that uses it.
func NewSchema(t testing.TB, base string) string { return pgtest.Schema(t, base) }

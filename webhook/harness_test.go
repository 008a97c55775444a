package webhook_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/store/sql/pgtest"
	"latchkey.dev/latchkey/internal/testclock"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook"
)

// The whole-server tests of this package run on test/stack, the one full-server harness; the
// names below are the package's short spellings of it.

type clock = testclock.Clock

const (
	projectKey = stack.ProjectKey
	webSecret  = stack.WebSecret
	svcSecret  = stack.ServiceSecret
	jwtSecret  = stack.JWTSecret
	otherSecr  = stack.OtherSecret
	alicePass  = stack.AlicePassword
	bobPass    = stack.BobPassword
	iatToken   = "lk_iat_initial-access-token-for-tests"
)

func hashes() map[string]string {
	return map[string]string{"alice": stack.PasswordHash(stack.AliceEmail)}
}

type harness struct {
	s       *stack.Stack
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

func newHarness(t testing.TB, opts ...option) *harness { return newHarnessServer(t, "", nil, opts...) }

func newHarnessDSN(t testing.TB, dsn string, opts ...option) *harness {
	return newHarnessServer(t, dsn, nil, opts...)
}

// newHarnessServer is newHarnessDSN with server options: server, when not nil, changes the
// webhook.Options the server is built with.
func newHarnessServer(t testing.TB, dsn string, server func(*webhook.Options), opts ...option) *harness {
	t.Helper()
	s := stack.New(t, stack.Options{DSN: dsn, Server: server, Project: func(p *config.Project) {
		for _, o := range opts {
			o(p)
		}
	}})
	r := s.Replicas[0]
	return &harness{s: s, t: t, clock: s.Clock, store: r.Store, holder: r.Holder, project: s.Project, srv: r.Server,
		ts: s.Front, base: s.Issuer}
}

func testProject(issuer string) *config.Project { return stack.NewProject(issuer) }

// update publishes a changed copy of the project.
func (h *harness) update(fn func(p *config.Project)) {
	h.s.Update(fn)
	h.project = h.s.Project
}

// browser is one person's browser.
type browser struct {
	h  *harness
	sb *stack.Browser
	c  *http.Client
}

func (h *harness) browser() *browser {
	sb := h.s.Browser()
	return &browser{h: h, sb: sb, c: sb.C}
}

type page struct {
	status int
	header http.Header
	body   string
	url    string
}

func pageOf(p stack.Page) page {
	return page{status: p.Status, header: p.Header, body: p.Body, url: p.URL}
}

func (p page) sp() stack.Page {
	return stack.Page{Status: p.status, Header: p.header, Body: p.body, URL: p.url}
}

func (p page) location() string    { return p.header.Get("Location") }
func (p page) hidden() url.Values  { return p.sp().Hidden() }
func (p page) continueURL() string { return p.sp().Continue() }

func (b *browser) do(req *http.Request) page { b.h.t.Helper(); return pageOf(b.sb.MustDo(req)) }
func (b *browser) get(u string) page         { b.h.t.Helper(); return pageOf(b.sb.MustGet(u)) }

// post submits a form without an Origin header, as a client that is not a browser would.
func (b *browser) post(u string, form url.Values) page {
	b.h.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.abs(u), strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(req)
}

func (b *browser) abs(u string) string {
	if len(u) > 0 && u[0] == '/' {
		return b.h.ts.URL + u
	}
	return u
}

func (b *browser) signIn(returnTo, user, pass string) page {
	b.h.t.Helper()
	return pageOf(b.sb.SignInPage(returnTo, user, pass))
}

func (b *browser) submitSignIn(form page, user, pass string) page {
	b.h.t.Helper()
	return pageOf(b.sb.MustFillSignIn(form.sp(), user, pass))
}

type pkce struct{ verifier, challenge string }

func newPKCE() pkce { p := stack.NewPKCE(); return pkce{verifier: p.Verifier, challenge: p.Challenge} }

func authorizeURL(h *harness, clientID, redirectURI, scope string, pk pkce, extra url.Values) string {
	return h.s.AuthorizeURL(clientID, redirectURI, scope, stack.PKCE{Verifier: pk.verifier, Challenge: pk.challenge}, extra)
}

func (b *browser) authorize(authURL, user, pass string) (redirect *url.URL, consented bool) {
	b.h.t.Helper()
	return b.sb.MustAuthorizeAt(authURL, user, pass)
}

type tokenResult struct {
	status int
	header http.Header
	json   map[string]any
	raw    string
}

func resultOf(a stack.Answer) tokenResult {
	return tokenResult{status: a.Status, header: a.Header, json: a.Body, raw: string(a.Raw)}
}

func (r tokenResult) str(k string) string { s, _ := r.json[k].(string); return s }

func (h *harness) postForm(path string, form url.Values, user, pass string) tokenResult {
	h.t.Helper()
	return resultOf(h.s.MustPost(path, form, user, pass))
}

func (h *harness) send(req *http.Request) tokenResult { h.t.Helper(); return sendRequest(h.t, req) }

func sendRequest(t testing.TB, req *http.Request) tokenResult {
	t.Helper()
	return resultOf(stack.MustDo(t, req))
}

func (h *harness) token(form url.Values, user, pass string) tokenResult {
	h.t.Helper()
	return resultOf(h.s.Token(form, user, pass))
}

func (h *harness) codeFlow(b *browser, clientID, secretValue, scope, user, pass string) tokenResult {
	h.t.Helper()
	return resultOf(h.s.CodeFlowAs(b.sb, clientID, secretValue, scope, user, pass))
}

func (h *harness) refresh(clientID, secretValue, rt string) tokenResult {
	h.t.Helper()
	return resultOf(h.s.RefreshAs(clientID, secretValue, rt))
}

func (h *harness) introspect(tok string) tokenResult {
	h.t.Helper()
	return resultOf(h.s.Introspect(tok))
}
func (h *harness) active(tok string) bool          { h.t.Helper(); return h.s.Active(tok) }
func (h *harness) userinfo(tok string) tokenResult { h.t.Helper(); return resultOf(h.s.Userinfo(tok)) }

func postgresDSN(t testing.TB) string { return pgtest.DSN(t) }

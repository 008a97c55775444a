package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/exchange"
)

// api is the GitHub API the proxy forwards to: the fake GitHub, plus a few paths that play a
// misbehaving service (one that sets cookies, echoes the request's headers, or streams a large
// answer). It keeps every credential it was sent, so tests can look for them in what the agent
// got back.
type api struct {
	gh http.Handler

	mu      sync.Mutex
	creds   []string
	headers []http.Header
	paths   []string
	release chan struct{} // /stream waits on it after its first part
}

func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	if c := r.Header.Get("Authorization"); c != "" {
		a.creds = append(a.creds, strings.TrimPrefix(c, "Bearer "))
	}
	a.headers = append(a.headers, r.Header.Clone())
	a.paths = append(a.paths, r.URL.EscapedPath())
	a.mu.Unlock()
	switch r.URL.Path {
	case "/user/echo":
		// A service that quotes the request back, credential and all, and sets a session.
		w.Header().Set("Set-Cookie", "user_session=abc; HttpOnly")
		w.Header().Set("Connection", "X-Upstream-Hop")
		w.Header().Set("X-Upstream-Hop", "one connection only")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("WWW-Authenticate", `Bearer realm="GitHub", token="`+r.Header.Get("Authorization")+`"`)
		w.Header().Set("X-Kept", "yes")
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "you sent: %s\n", r.Header.Get("Authorization"))
	case "/user/stream":
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(bytes.Repeat([]byte("a"), 256<<10))
		w.(http.Flusher).Flush()
		<-a.release
		w.Write(bytes.Repeat([]byte("b"), 4<<20))
	default:
		a.gh.ServeHTTP(w, r)
	}
}

func (a *api) sent() (creds []string, paths []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.creds...), append([]string(nil), a.paths...)
}

type fixture struct {
	s   *stack.Stack
	api *api
	// answers holds every answer any agent got, whole, for TestProxyNeverReturnsTheToken.
	mu      sync.Mutex
	answers [][]byte
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	s := stack.New(t, stack.Options{DSN: "sqlite:" + filepath.Join(t.TempDir(), "latchkey.db")})
	a := &api{gh: s.GitHub, release: make(chan struct{})}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		select {
		case <-a.release:
		default:
			close(a.release)
		}
	})
	s.Connector.Proxy = &config.Proxy{BaseURL: srv.URL, Rules: []config.ProxyRule{
		{Methods: []string{"GET", "HEAD"}, PathPrefix: "/user"},
	}}
	return &fixture{s: s, api: a}
}

// call sends method path with the token as a bearer token (none when ""), and returns the
// answer with its body read whole; the raw answer is kept.
func (f *fixture) call(t *testing.T, method, path, token string, hdr http.Header) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, f.s.Issuer+"/proxy/github"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	f.keep(resp, body)
	return resp, body
}

func (f *fixture) keep(resp *http.Response, body []byte) {
	var b bytes.Buffer
	resp.Header.Write(&b)
	b.Write(body)
	f.mu.Lock()
	f.answers = append(f.answers, b.Bytes())
	f.mu.Unlock()
}

// noToken fails if any answer any agent got holds a credential the service was sent.
func (f *fixture) noToken(t *testing.T) {
	t.Helper()
	creds, _ := f.api.sent()
	if len(creds) == 0 {
		t.Fatal("the service was never sent a credential")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range creds {
		for i, a := range f.answers {
			if bytes.Contains(a, []byte(c)) {
				t.Errorf("answer %d holds the upstream token %s…: %q", i, c[:8], a)
			}
		}
	}
}

func problemOf(t *testing.T, resp *http.Response, body []byte) map[string]any {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json: %s", ct, body)
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	if int(m["status"].(float64)) != resp.StatusCode {
		t.Errorf("status member %v, answer %d", m["status"], resp.StatusCode)
	}
	return m
}

// The story: Repo Helper lists alice's repositories through the proxy; it never holds her
// GitHub token, and no byte of any answer it gets carries it.
func TestProxyListsAlicesRepositories(t *testing.T) {
	f := newFixture(t)
	f.s.ConnectGitHub(stack.AliceEmail, stack.AliceLogin)
	alice := f.s.AccessToken(stack.AliceEmail, stack.Agent)

	resp, body := f.call(t, http.MethodGet, "/user/repos", alice, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("repos: %d %s", resp.StatusCode, body)
	}
	var repos []map[string]any
	if err := json.Unmarshal(body, &repos); err != nil || len(repos) != 1 || repos[0]["name"] != "diary" {
		t.Fatalf("repos %s (%v), want alice's private diary", body, err)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q: an answer with a person's data must not be stored", cc)
	}
	resp, body = f.call(t, http.MethodGet, "/user", alice, nil)
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"login":"alice-gh"`)) {
		t.Fatalf("user: %d %s", resp.StatusCode, body)
	}
	// The service echoing the credential back gets it overwritten, in headers and body alike.
	resp, body = f.call(t, http.MethodGet, "/user/echo", alice, nil)
	if resp.StatusCode != http.StatusOK || !bytes.HasPrefix(body, []byte("you sent: Bearer ***")) {
		t.Fatalf("echo: %d %q", resp.StatusCode, body)
	}
	if resp.Header.Get("WWW-Authenticate") != "" {
		t.Errorf("a WWW-Authenticate quoting the token reached the agent: %q", resp.Header.Get("WWW-Authenticate"))
	}
	// Refusals are answers too.
	f.call(t, http.MethodPost, "/user/repos", alice, nil)
	f.call(t, http.MethodGet, "/user/repos", "", nil)
	f.noToken(t)
}

func TestProxyRefusals(t *testing.T) {
	f := newFixture(t)
	s := f.s
	s.ConnectGitHub(stack.AliceEmail, stack.AliceLogin)
	alice := s.AccessToken(stack.AliceEmail, stack.Agent)
	mallory := s.AccessToken(stack.MalloryEmail, stack.Agent)
	now := s.Clock.Now()
	if err := s.Admin.CreateClient(context.Background(), store.Client{
		Project: stack.ProjectKey, ID: "dcr-client", SecretHash: secret.Hash("lk_cs_dcr-client-secret-0123456789abcdefghijklmnop"), Name: stack.AgentName,
		RedirectURIs: []string{"https://evil.example/cb"}, GrantTypes: []string{"authorization_code", exchange.GrantType},
		ResponseTypes: []string{"code"}, TokenEndpointAuthMethod: "client_secret_basic", CreatedAt: now, UpdatedAt: now,
	}); err != nil {
		t.Fatal(err)
	}
	registered := s.AccessToken(stack.AliceEmail, "dcr-client")
	machine := secret.New(secret.PrefixAccessToken)
	if err := s.Admin.CreateTokens(context.Background(), store.Token{
		Hash: secret.Hash(machine), Kind: store.AccessToken, Project: stack.ProjectKey, ClientID: stack.Agent,
		FamilyID: "cc", IssuedAt: now, ExpiresAt: now.Add(time.Hour),
	}); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name, method, path, token string
		status                    int
		code                      string
	}{
		{"no token", "GET", "/user/repos", "", 401, "invalid_token"},
		{"unknown token", "GET", "/user/repos", secret.New(secret.PrefixAccessToken), 401, "invalid_token"},
		{"method not allowed", "DELETE", "/user/repos", alice, 403, "call_not_allowed"},
		{"path not allowed", "GET", "/orgs/acme/repos", alice, 403, "call_not_allowed"},
		{"a prefix is whole segments", "GET", "/users/alice-gh", alice, 403, "call_not_allowed"},
		{"a self-registered client", "GET", "/user/repos", registered, 403, "unauthorized_client"},
		{"a token without a person", "GET", "/user/repos", machine, 403, "no_person"},
		{"mallory has not connected", "GET", "/user/repos", mallory, 403, "connect_required"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := f.call(t, c.method, c.path, c.token, nil)
			if resp.StatusCode != c.status {
				t.Fatalf("%d %s, want %d", resp.StatusCode, body, c.status)
			}
			m := problemOf(t, resp, body)
			if m["type"] != "urn:latchkey:problem:"+c.code {
				t.Errorf("type %v, want %s", m["type"], c.code)
			}
			if c.status == 401 && resp.Header.Get("WWW-Authenticate") == "" {
				t.Error("a 401 without WWW-Authenticate")
			}
		})
	}
	_, paths := f.api.sent()
	if len(paths) != 0 {
		t.Errorf("refused calls reached the service: %v", paths)
	}

	t.Run("the connect link is mallory's", func(t *testing.T) {
		resp, body := f.call(t, "GET", "/user/repos", mallory, nil)
		m := problemOf(t, resp, body)
		uri, _ := m["connect_uri"].(string)
		if m["reason"] != "connect_required" || !strings.HasPrefix(uri, s.Issuer+"/") || m["connect_message"] == "" {
			t.Fatalf("refusal %s lacks the connect link", body)
		}
	})

	t.Run("another person's token gets that person's account", func(t *testing.T) {
		s.ConnectGitHub(stack.MalloryEmail, stack.MalloryLogin)
		resp, body := f.call(t, "GET", "/user", mallory, nil)
		if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"login":"mallory-gh"`)) {
			t.Fatalf("%d %s, want mallory's own account", resp.StatusCode, body)
		}
	})

	t.Run("no proxy rules: nothing passes", func(t *testing.T) {
		rules := s.Connector.Proxy
		s.Connector.Proxy = nil
		defer func() { s.Connector.Proxy = rules }()
		resp, body := f.call(t, "GET", "/user", alice, nil)
		if resp.StatusCode != http.StatusForbidden || problemOf(t, resp, body)["type"] != "urn:latchkey:problem:call_not_allowed" {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	})

	t.Run("DPoP required, bearer token", func(t *testing.T) {
		s.Project.RequireDPoP = true
		defer func() { s.Project.RequireDPoP = false }()
		resp, body := f.call(t, "GET", "/user", alice, nil)
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "DPoP ") {
			t.Fatalf("%d %q %s, want a DPoP challenge", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
		}
	})

	t.Run("unknown connector", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, s.Issuer+"/proxy/gitlab/user", nil)
		req.Header.Set("Authorization", "Bearer "+alice)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("%d, want 404", resp.StatusCode)
		}
	})
	f.noToken(t)
}

// raw sends a request line exactly as written, so no client cleans the path first.
func raw(t *testing.T, base, target, token string) (int, string) {
	t.Helper()
	u, _ := url.Parse(base)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", target, u.Host, token)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Paths that a service, or a proxy on the way, could read as somewhere else than the rules
// checked are refused, and never reach the service.
func TestProxyPathEscapes(t *testing.T) {
	f := newFixture(t)
	f.s.ConnectGitHub(stack.AliceEmail, stack.AliceLogin)
	alice := f.s.AccessToken(stack.AliceEmail, stack.Agent)
	base := "/team/demo/proxy/github"
	for _, p := range []string{
		"/user/../orgs/acme",
		"/user/%2e%2e/orgs/acme",
		"/user/%2E%2E/orgs/acme",
		"/user/.%2e/orgs/acme",
		"/user%2f..%2forgs/acme",
		"/user%2F..%2Forgs%2Facme",
		"/user/..%2forgs",
		"/user/..%5corgs",
		`/user/..\orgs`,
		"/user/./repos",
		"/user//repos",
		"/user/%2e/repos",
		"/user/..",
		"/user/%00",
		"/user/%0d%0aX-Injected:%201",
		"/../../other/project/proxy/github/user",
	} {
		t.Run(p, func(t *testing.T) {
			status, body := raw(t, f.s.Front.URL, base+p, alice)
			if status != http.StatusBadRequest || !strings.Contains(body, "urn:latchkey:problem:invalid_path") {
				t.Fatalf("%d %s, want 400 invalid_path", status, body)
			}
		})
	}
	if _, paths := f.api.sent(); len(paths) != 0 {
		t.Fatalf("an escaping path reached the service: %v", paths)
	}
	// An encoded character that is not a separator is forwarded as the path it decodes to,
	// escaped canonically: the one the rules were checked against.
	status, body := raw(t, f.s.Front.URL, base+"/%75ser", alice)
	if _, paths := f.api.sent(); status != 200 || len(paths) != 1 || paths[0] != "/user" {
		t.Fatalf("%d %s, service saw %v; want /user", status, body, paths)
	}
}

// A large answer streams: the agent reads its first part while the service has not finished.
func TestProxyStreamsLargeAnswers(t *testing.T) {
	f := newFixture(t)
	f.s.ConnectGitHub(stack.AliceEmail, stack.AliceLogin)
	alice := f.s.AccessToken(stack.AliceEmail, stack.Agent)
	req, _ := http.NewRequest(http.MethodGet, f.s.Issuer+"/proxy/github/user/stream", nil)
	req.Header.Set("Authorization", "Bearer "+alice)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// The last bytes of a read wait for the next (the token may be split across them).
	first := make([]byte, 255<<10)
	got := make(chan error, 1)
	go func() { _, err := io.ReadFull(resp.Body, first); got <- err }()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the first part did not arrive while the service was still answering: the answer is buffered")
	}
	if bytes.Count(first, []byte("a")) != len(first) {
		t.Fatal("the first part is not the service's")
	}
	close(f.api.release)
	rest, err := io.ReadAll(resp.Body)
	if err != nil || len(rest) != 1<<10+4<<20 {
		t.Fatalf("rest: %d bytes, %v", len(rest), err)
	}
}

// Hop-by-hop headers, the agent's credentials and cookies never reach the service; the
// service's hop-by-hop headers, cookies and credentials never reach the agent.
func TestProxyHeaders(t *testing.T) {
	f := newFixture(t)
	f.s.ConnectGitHub(stack.AliceEmail, stack.AliceLogin)
	alice := f.s.AccessToken(stack.AliceEmail, stack.Agent)
	resp, body := f.call(t, "GET", "/user/echo", alice, http.Header{
		"Connection":          {"X-Agent-Hop"},
		"X-Agent-Hop":         {"one connection only"},
		"Keep-Alive":          {"timeout=5"},
		"Proxy-Authorization": {"Basic c2VjcmV0"},
		"Cookie":              {"latchkey_session=agent-cookie"},
		"Dpop":                {"not-a-proof"},
		"X-Agent-Kept":        {"yes"},
	})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	f.api.mu.Lock()
	got := f.api.headers[len(f.api.headers)-1]
	f.api.mu.Unlock()
	for _, h := range []string{"X-Agent-Hop", "Keep-Alive", "Proxy-Authorization", "Cookie", "Dpop"} {
		if v := got.Get(h); v != "" {
			t.Errorf("the service got the agent's %s: %q", h, v)
		}
	}
	if got.Get("X-Agent-Kept") != "yes" || strings.Contains(got.Get("Authorization"), alice) {
		t.Errorf("service headers %v", got)
	}
	for _, h := range []string{"Set-Cookie", "X-Upstream-Hop", "Keep-Alive", "WWW-Authenticate"} {
		if v := resp.Header.Get(h); v != "" {
			t.Errorf("the agent got the service's %s: %q", h, v)
		}
	}
	if resp.Header.Get("X-Kept") != "yes" {
		t.Error("an end-to-end header of the service was dropped")
	}
	f.noToken(t)
}

// Calls are audited per person, agent and connector per minute, one record for many calls.
func TestProxyAuditIsAggregated(t *testing.T) {
	f := newFixture(t)
	f.s.ConnectGitHub(stack.AliceEmail, stack.AliceLogin)
	alice := f.s.AccessToken(stack.AliceEmail, stack.Agent)
	for range 3 {
		if resp, body := f.call(t, "GET", "/user", alice, nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
	proxied := func() []store.AuditRecord {
		all, err := f.s.Admin.ListAudit(context.Background(), stack.ProjectKey, 100)
		if err != nil {
			t.Fatal(err)
		}
		var out []store.AuditRecord
		for _, r := range all {
			if r.Action == events.TokenProxied {
				out = append(out, r)
			}
			if r.Action == events.TokenExchanged {
				t.Errorf("a proxied call was recorded one by one: %+v", r)
			}
		}
		return out
	}
	if got := proxied(); len(got) != 0 {
		t.Fatalf("records before the minute ended: %+v", got)
	}
	f.s.Clock.Advance(time.Minute)
	f.call(t, "GET", "/user", alice, nil)
	got := proxied()
	if len(got) != 1 {
		t.Fatalf("%d token.proxied records, want 1: %+v", len(got), got)
	}
	r := got[0]
	if r.Details["count"] != "3" || r.Details["status_2xx"] != "3" || r.Details["agent"] != stack.Agent ||
		r.Target != f.s.PersonID(stack.AliceEmail) || r.Connector != f.s.Connector.Key {
		t.Fatalf("record %+v", r)
	}
}

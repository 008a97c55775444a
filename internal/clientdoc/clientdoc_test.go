package clientdoc

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/testclock"
	"latchkey.dev/latchkey/internal/trust"
)

// clock is the injected clock: tests move it, nothing sleeps.
type clock = testclock.Clock

// site is a client's web site on 127.0.0.1, serving documents by path.
type site struct {
	ts      *httptest.Server
	fetches atomic.Int64
	mu      sync.Mutex
	serve   map[string]http.HandlerFunc
}

func newSite(t *testing.T) *site {
	s := &site{serve: map[string]http.HandlerFunc{}}
	s.ts = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		h := s.serve[r.URL.Path]
		s.mu.Unlock()
		if h == nil {
			http.NotFound(w, r)
			return
		}
		h(w, r)
	}))
	t.Cleanup(s.ts.Close)
	return s
}

func (s *site) url(path string) string { return s.ts.URL + path }

func (s *site) handle(path string, h http.HandlerFunc) {
	s.mu.Lock()
	s.serve[path] = h
	s.mu.Unlock()
}

// json serves doc (with client_id set to the path's URL unless doc sets it) and headers.
func (s *site) json(path string, doc map[string]any, headers ...string) string {
	id := s.url(path)
	if _, ok := doc["client_id"]; !ok {
		doc["client_id"] = id
	}
	b, _ := json.Marshal(doc)
	s.handle(path, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.Write(b)
	})
	return id
}

func (s *site) fetcher(c *clock, o Options) *Fetcher {
	pool := x509.NewCertPool()
	pool.AddCert(s.ts.Certificate())
	o.RootCAs = pool
	o.AllowLoopback = true
	o.Now = c.Now
	return New(o)
}

func good() map[string]any {
	return map[string]any{
		"client_name":                "Claude Code",
		"redirect_uris":              []string{"http://127.0.0.1/callback", "http://127.0.0.1/callback", "https://claude.ai/api/mcp/auth_callback"},
		"token_endpoint_auth_method": "none",
		"grant_types":                []string{"authorization_code", "refresh_token"},
	}
}

func wantProblem(t *testing.T, err error, contains string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("want *Error containing %q, got %v", contains, err)
	}
	if !strings.Contains(e.Reason, contains) {
		t.Errorf("reason %q does not say %q", e.Reason, contains)
	}
}

func TestGetHappyPathAndCache(t *testing.T) {
	s := newSite(t)
	c := testclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	f := s.fetcher(c, Options{})
	id := s.json("/oauth/client.json", good(), "Cache-Control", "public, max-age=600")

	d, err := f.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if d.ClientID != id || d.ClientName != "Claude Code" || len(d.RedirectURIs) != 2 || d.Host != strings.TrimPrefix(s.ts.URL, "https://") {
		t.Errorf("document: %+v", d)
	}
	for range 3 {
		if _, err := f.Get(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.fetches.Load(); n != 1 {
		t.Errorf("fetched %d times within max-age, want 1", n)
	}
	c.Advance(9 * time.Minute)
	f.Get(context.Background(), id)
	if n := s.fetches.Load(); n != 1 {
		t.Errorf("fetched %d times within max-age, want 1", n)
	}
	c.Advance(2 * time.Minute)
	f.Get(context.Background(), id)
	if n := s.fetches.Load(); n != 2 {
		t.Errorf("fetched %d times after max-age, want 2", n)
	}
}

// Concurrent requests for one client id share one fetch (a burst of authorize requests must not
// make the server a burst of fetches), and a caller that gives up neither fails nor cancels the
// fetch the others wait for.
func TestConcurrentGetsShareOneFetch(t *testing.T) {
	s := newSite(t)
	c := testclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	f := s.fetcher(c, Options{})
	entered := make(chan struct{})
	release := make(chan struct{})
	doc, _ := json.Marshal(map[string]any{
		"client_id": s.url("/slow.json"), "client_name": "Slow", "redirect_uris": []string{"http://127.0.0.1/cb"},
		"token_endpoint_auth_method": "none",
	})
	s.handle("/slow.json", func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		w.Header().Set("Content-Type", "application/json")
		w.Write(doc)
	})
	id := s.url("/slow.json")

	impatient, giveUp := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := f.Get(impatient, id)
		gaveUp <- err
	}()
	<-entered
	const waiters = 8
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	for range waiters {
		wg.Go(func() {
			d, err := f.Get(context.Background(), id)
			if err == nil && d.ClientName != "Slow" {
				err = errors.New("wrong document: " + d.ClientName)
			}
			errs <- err
		})
	}
	giveUp()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Errorf("the caller that gave up got %v, want context.Canceled", err)
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
	}
	if n := s.fetches.Load(); n != 1 {
		t.Errorf("fetched %d times for concurrent requests, want 1", n)
	}
}

func TestCacheBounds(t *testing.T) {
	s := newSite(t)
	c := testclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	f := s.fetcher(c, Options{})
	for _, tc := range []struct {
		header string
		want   time.Duration
	}{
		{"", DefaultTTL},
		{"no-store", DefaultMinTTL},
		{"no-cache, max-age=3600", DefaultMinTTL},
		{"max-age=0", DefaultMinTTL},
		{"max-age=5", DefaultMinTTL},
		{"max-age=7200", 2 * time.Hour},
		{"max-age=99999999999", DefaultMaxTTL},
		{`max-age="120"`, 2 * time.Minute},
		{"max-age=nonsense", DefaultTTL},
	} {
		h := http.Header{}
		if tc.header != "" {
			h.Set("Cache-Control", tc.header)
		}
		if got := f.ttl(h); got != tc.want {
			t.Errorf("Cache-Control %q: ttl %s, want %s", tc.header, got, tc.want)
		}
	}

	// A failure is remembered briefly, then fetched again.
	bad := s.json("/bad.json", map[string]any{"client_id": "https://elsewhere.example/x", "redirect_uris": []string{"https://a.example/cb"}})
	if _, err := f.Get(context.Background(), bad); err == nil {
		t.Fatal("not self-naming accepted")
	}
	before := s.fetches.Load()
	f.Get(context.Background(), bad)
	if s.fetches.Load() != before {
		t.Error("a failure must be remembered for a while")
	}
	c.Advance(DefaultFailureTTL)
	f.Get(context.Background(), bad)
	if s.fetches.Load() != before+1 {
		t.Error("a remembered failure must expire")
	}

	// The cache holds at most MaxEntries documents.
	small := s.fetcher(c, Options{MaxEntries: 2})
	for _, p := range []string{"/a.json", "/b.json", "/c.json", "/d.json"} {
		if _, err := small.Get(context.Background(), s.json(p, good())); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(small.cache); n > 2 {
		t.Errorf("cache holds %d entries, bound is 2", n)
	}
}

func TestRefusals(t *testing.T) {
	s := newSite(t)
	c := testclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	f := s.fetcher(c, Options{})
	with := func(k string, v any) map[string]any {
		d := good()
		d[k] = v
		return d
	}
	big := good()
	big["padding"] = strings.Repeat("x", DefaultMaxBytes)
	cases := map[string]struct {
		path  string
		setup func(path string) string
		want  string
	}{
		"not self-naming": {"/a.json", func(p string) string {
			return s.json(p, with("client_id", "https://claude.ai/client.json"))
		}, "client_id must be exactly"},
		"client id differs in case": {"/b.json", func(p string) string {
			return s.json(p, with("client_id", strings.ToUpper(s.url(p)[:5])+s.url(p)[5:]))
		}, "client_id must be exactly"},
		"no client id": {"/c.json", func(p string) string {
			return s.json(p, with("client_id", ""))
		}, "client_id must be exactly"},
		"bad redirect": {"/d.json", func(p string) string {
			return s.json(p, with("redirect_uris", []string{"https://claude.ai@evil.example/cb"}))
		}, "redirect_uris"},
		"http redirect elsewhere": {"/e.json", func(p string) string {
			return s.json(p, with("redirect_uris", []string{"http://evil.example/cb"}))
		}, "redirect_uris"},
		"no redirects": {"/f.json", func(p string) string {
			return s.json(p, with("redirect_uris", []string{}))
		}, "at least one"},
		"secret": {"/g.json", func(p string) string {
			return s.json(p, with("client_secret", "s3cret"))
		}, "client_secret"},
		"shared-secret auth": {"/h.json", func(p string) string {
			return s.json(p, with("token_endpoint_auth_method", "client_secret_basic"))
		}, "token_endpoint_auth_method must be none or private_key_jwt"},
		// private_key_jwt is fine with keys to check its assertions, and nothing without.
		"private_key_jwt without keys": {"/i.json", func(p string) string {
			return s.json(p, with("token_endpoint_auth_method", "private_key_jwt"))
		}, "needs exactly one of jwks_uri and jwks"},
		"wrong type": {"/j.json", func(p string) string {
			return s.json(p, with("redirect_uris", "https://a.example/cb"))
		}, "wrong type"},
		"oversized": {"/k.json", func(p string) string { return s.json(p, big) }, "larger than"},
		"oversized, chunked": {"/l.json", func(p string) string {
			s.handle(p, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				for range 80 {
					w.Write([]byte(strings.Repeat(" ", 1024)))
					w.(http.Flusher).Flush()
				}
			})
			return s.url(p)
		}, "larger than"},
		"not json": {"/m.json", func(p string) string {
			s.handle(p, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Write([]byte("<html>hello</html>"))
			})
			return s.url(p)
		}, "not a JSON object"},
		"html": {"/n.json", func(p string) string {
			s.handle(p, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				w.Write([]byte("{}"))
			})
			return s.url(p)
		}, "application/json"},
		"not found": {"/missing.json", func(p string) string { return s.url(p) }, "HTTP 404"},
		"redirect": {"/o.json", func(p string) string {
			s.json("/target.json", good())
			s.handle(p, func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "/target.json", http.StatusFound)
			})
			return s.url(p)
		}, "without redirects"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := f.Get(context.Background(), tc.setup(tc.path))
			wantProblem(t, err, tc.want)
		})
	}
}

// The address check runs on the address dialled: without the test-only allowance, a client id
// whose host resolves to this machine is refused at dial time, whatever the name said.
func TestPrivateAddressRefusedAtDial(t *testing.T) {
	s := newSite(t)
	c := testclock.New(time.Now())
	f := s.fetcher(c, Options{})
	strict := New(Options{RootCAs: f.o.RootCAs, Now: c.Now})
	id := s.json("/oauth/client.json", good())
	if err := ValidateID(id, false); err == nil {
		t.Fatal("an IP literal client id must be refused")
	}
	// localhost passes the name check only with the allowance; the dial check still stops it.
	_, _, err := strict.fetch(context.Background(), strings.Replace(id, "127.0.0.1", "localhost", 1))
	wantProblem(t, err, "public address")
	if n := s.fetches.Load(); n != 0 {
		t.Errorf("the site was reached %d times", n)
	}
	if _, err := strict.Get(context.Background(), id); err == nil {
		t.Error("strict fetcher fetched from loopback")
	}
}

func TestTimeout(t *testing.T) {
	s := newSite(t)
	release := make(chan struct{})
	defer close(release)
	s.handle("/slow.json", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	f := s.fetcher(testclock.New(time.Now()), Options{Timeout: 300 * time.Millisecond})
	_, err := f.Get(context.Background(), s.url("/slow.json"))
	wantProblem(t, err, "did not arrive within")
}

func TestValidateID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"https://app.example.com/oauth/client.json", true},
		{"https://app.example.com:8443/client", true},
		{"https://app.example.com/a/b%20c", true},
		{"http://app.example.com/client.json", false},
		{"HTTPS://app.example.com/client.json", false},
		{"https://App.Example.com/client.json", false},
		{"https://app.example.com", false},
		{"https://app.example.com/", false},
		{"https://app.example.com/client.json?x=1", false},
		{"https://app.example.com/client.json?", false},
		{"https://app.example.com/client.json#frag", false},
		{"https://user@app.example.com/client.json", false},
		{"https://claude.ai@evil.example/client.json", false},
		{"https://app.example.com/./client.json", false},
		{"https://app.example.com/a/../client.json", false},
		{"https://app.example.com/%2e%2e/client.json", false},
		{"https://app.example.com/%2E/client.json", false},
		{"https://app.example.com./client.json", false},
		{"https://intranet/client.json", false},
		{"https://localhost/client.json", false},
		{"https://printer.local/client.json", false},
		{"https://db.internal/client.json", false},
		{"https://127.0.0.1/client.json", false},
		{"https://10.0.0.1/client.json", false},
		{"https://[::1]/client.json", false},
		{"https://93.184.216.34/client.json", false},
		{"https://app.example.com:0/client.json", false},
		{"https://app.example.com:99999/client.json", false},
		{"https://app.example.com:/client.json", false},
		{"https://app.exa mple.com/client.json", false},
		{"https://xn--pple-43d.com/client.json", true}, // punycode is ASCII; the consent page shows it as is
		{"https://аpple.com/client.json", false},
		{"https://app_example.com/client.json", false},
		{"https://-app.example.com/client.json", false},
		{"https://app.example.com/" + strings.Repeat("a", MaxIDLength), false},
	} {
		err := ValidateID(tc.id, false)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateID(%q) = %v, want ok=%v", tc.id, err, tc.ok)
		}
	}
	if err := ValidateID("https://127.0.0.1:8443/client.json", true); err != nil {
		t.Errorf("loopback with the test allowance: %v", err)
	}
	if err := ValidateID("https://10.0.0.1/client.json", true); err == nil {
		t.Error("the test allowance is for loopback only")
	}
}

func FuzzValidateID(f *testing.F) {
	for _, s := range []string{"https://app.example.com/client.json", "https://a.b/c", "https://127.0.0.1:1/x", "https://a@b.c/d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if ValidateID(id, false) != nil {
			return
		}
		// Anything accepted is an https URL to a lower-case DNS name with a real path.
		if !strings.HasPrefix(id, "https://") || strings.ContainsAny(id, "?#@ \\") {
			t.Fatalf("accepted %q", id)
		}
	})
}

// A client's metadata document on a server whose CA is in the operator's --ca-bundle is
// fetched with the bundle (trust.Use), not refused: the fetcher's own transport asks trust.Roots.
func TestCABundle(t *testing.T) {
	s := newSite(t)
	id := s.json("/client.json", good())
	c := testclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	if _, err := New(Options{AllowLoopback: true, Now: c.Now}).Get(context.Background(), id); err == nil {
		t.Fatal("a document from a server with an unknown CA was fetched")
	}
	pool := x509.NewCertPool()
	pool.AddCert(s.ts.Certificate())
	dt := http.DefaultTransport.(*http.Transport)
	saved := dt.TLSClientConfig
	trust.Use(pool)
	t.Cleanup(func() { trust.Use(nil); dt.TLSClientConfig = saved })
	if _, err := New(Options{AllowLoopback: true, Now: c.Now}).Get(context.Background(), id); err != nil {
		t.Fatalf("with the CA bundle: %v", err)
	}
}

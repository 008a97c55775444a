package proxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/test/stack"
)

// BenchmarkProxy compares a GET of a small answer (the fake GitHub's /user) made directly with
// the person's GitHub token and the same GET through the token proxy with the agent's Latchkey
// token, one call at a time on SQLite. Each reports ns/op and its p99 latency (p99-µs); the
// proxy's throughput ratio is direct ns/op ÷ proxied ns/op, its added p99 the difference of
// the p99s (docs/token-proxy.md, "Cost").
func BenchmarkProxy(b *testing.B) {
	s := stack.New(b, stack.Options{DSN: "sqlite:" + filepath.Join(b.TempDir(), "latchkey.db")})
	var cred atomic.Value
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cred.Load() == nil {
			cred.Store(r.Header.Get("Authorization"))
		}
		s.GitHub.ServeHTTP(w, r)
	}))
	b.Cleanup(up.Close)
	s.Connector.Proxy = &config.Proxy{BaseURL: up.URL, Rules: []config.ProxyRule{{Methods: []string{"GET"}, PathPrefix: "/user"}}}
	s.ConnectGitHub(stack.AliceEmail, stack.AliceLogin)
	alice := s.AccessToken(stack.AliceEmail, stack.Agent)
	get := func(b *testing.B, url, auth string) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	get(b, s.Issuer+"/proxy/github/user", "Bearer "+alice)
	github := cred.Load().(string)
	run := func(url, auth string) func(*testing.B) {
		return func(b *testing.B) {
			var took []time.Duration
			for b.Loop() {
				start := time.Now()
				get(b, url, auth)
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
		}
	}
	b.Run("direct", run(up.URL+"/user", github))
	b.Run("proxied", run(s.Issuer+"/proxy/github/user", "Bearer "+alice))
}

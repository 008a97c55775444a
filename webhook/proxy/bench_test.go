package proxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/test/stack"
)

// BenchmarkProxy compares a GET of a small answer (the fake GitHub's /user) made directly with
// the person's GitHub token and the same GET through the token proxy with the agent's Latchkey
// token, on SQLite: one call at a time (direct, proxied) and from as many client goroutines as
// the machine has cores times four (direct-parallel, proxied-parallel), where throughput is
// bound by CPU rather than by latency. Each reports ns/op, its p99 latency (p99-µs) and the
// process's CPU time per call (cpu-µs/op: load generator, proxy and upstream together, all in
// this process). The proxy's throughput ratio is direct ns/op ÷ proxied ns/op, its added p99
// the difference of the p99s, and its own CPU per call the difference of the cpu-µs/op: the
// load generator and the upstream do the same work either way (docs/token-proxy.md, "Cost").
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
	// The load generator keeps a connection per goroutine, as a busy agent would.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxIdleConns: 512}}
	b.Cleanup(client.CloseIdleConnections)
	get := func(b *testing.B, url, auth string) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Authorization", auth)
		resp, err := client.Do(req)
		if err != nil {
			b.Error(err)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Errorf("status %d", resp.StatusCode)
		}
	}
	get(b, s.Issuer+"/proxy/github/user", "Bearer "+alice)
	github := cred.Load().(string)
	serial := func(url, auth string) func(*testing.B) {
		return func(b *testing.B) {
			var took []time.Duration
			cpu := cpuTime()
			for b.Loop() {
				start := time.Now()
				get(b, url, auth)
				took = append(took, time.Since(start))
			}
			report(b, took, cpuTime()-cpu)
		}
	}
	parallel := func(url, auth string) func(*testing.B) {
		return func(b *testing.B) {
			var mu sync.Mutex
			var took []time.Duration
			b.SetParallelism(4)
			cpu := cpuTime()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				var mine []time.Duration
				for pb.Next() {
					start := time.Now()
					get(b, url, auth)
					mine = append(mine, time.Since(start))
				}
				mu.Lock()
				took = append(took, mine...)
				mu.Unlock()
			})
			report(b, took, cpuTime()-cpu)
		}
	}
	b.Run("direct", serial(up.URL+"/user", github))
	b.Run("proxied", serial(s.Issuer+"/proxy/github/user", "Bearer "+alice))
	b.Run("direct-parallel", parallel(up.URL+"/user", github))
	b.Run("proxied-parallel", parallel(s.Issuer+"/proxy/github/user", "Bearer "+alice))
}

// report adds the p99 latency and the CPU time per call to b's result.
func report(b *testing.B, took []time.Duration, cpu time.Duration) {
	if len(took) == 0 {
		return
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(cpu.Microseconds())/float64(len(took)), "cpu-µs/op")
}

// cpuTime is the CPU time (user and system) this process has used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

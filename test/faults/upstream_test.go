package faults_test

import (
	"context"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"latchkey.dev/latchkey/internal/metrics"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
)

// A connected service that stops answering: token exchange answers temporarily_unavailable
// within the upstream timeout, leaves the connection as it was, and works again once the
// service answers.
func TestUpstreamTimeout(t *testing.T) {
	const timeout = time.Second
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	s := stack.New(t, stack.Options{
		DSN: "sqlite:" + filepath.Join(t.TempDir(), "latchkey.db"), AccessTokenTTL: time.Hour,
		UpstreamTimeout: timeout, Metrics: m,
	})
	conn := s.ConnectGitHub(stack.AliceEmail, stack.AliceLogin)
	subject := s.AccessToken(stack.AliceEmail, stack.Agent)
	s.Clock.Advance(2 * time.Hour) // the GitHub token has expired: exchange must refresh it
	s.GitHub.SetDelay(time.Minute)

	const n = 10
	var wg sync.WaitGroup
	answers := make([]stack.Answer, n)
	errs := make([]error, n)
	began := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			answers[i], errs[i] = s.Exchange(ctx, subject)
		}()
	}
	wg.Wait()
	took := time.Since(began)

	var slowest time.Duration
	for i, a := range answers {
		if errs[i] != nil {
			t.Fatalf("exchange %d: %v", i, errs[i])
		}
		slowest = max(slowest, a.Took)
		if a.Status != http.StatusServiceUnavailable || a.Str("error") != "temporarily_unavailable" ||
			a.Header.Get("Cache-Control") != "no-store" || a.Str("error_description") == "" {
			t.Errorf("exchange %d while GitHub hangs: %d %s; want 503 temporarily_unavailable", i, a.Status, a.Raw)
		}
		if a.Str("connect_uri") != "" {
			t.Errorf("exchange %d: a connect link for a service that is only slow: %s", i, a.Raw)
		}
	}
	// The bound is the upstream timeout plus the time to answer; 5s is far above it and far
	// below the minute GitHub would take.
	if slowest > 5*time.Second {
		t.Errorf("the slowest answer took %v with an upstream timeout of %v", slowest, timeout)
	}
	c, err := s.Admin.GetConnection(context.Background(), stack.ProjectKey, conn.ID)
	if err != nil || c.Status != store.ConnectionExpiring {
		t.Errorf("connection after timeouts: %v %v; a slow service makes it expiring, never broken (docs/connection-health.md)", c.Status, err)
	}

	s.GitHub.SetDelay(0)
	a, err := s.Exchange(context.Background(), subject)
	if err != nil || a.Status != http.StatusOK || a.Str("access_token") == "" {
		t.Fatalf("exchange once GitHub answers again: %v %d %s", err, a.Status, a.Raw)
	}
	if c, err := s.Admin.GetConnection(context.Background(), stack.ProjectKey, conn.ID); err != nil || c.Status != store.ConnectionActive {
		t.Errorf("connection once GitHub answers again: %v %v", c.Status, err)
	}

	if got := gauge(t, reg, "latchkey_upstream_refreshes_total", "result", "timeout"); got < 1 {
		t.Errorf("latchkey_upstream_refreshes_total{result=timeout} = %v", got)
	}
	if got := gauge(t, reg, "latchkey_upstream_refreshes_total", "result", "ok"); got != 1 {
		t.Errorf("latchkey_upstream_refreshes_total{result=ok} = %v, want 1", got)
	}
	if got := gauge(t, reg, "latchkey_token_exchanges_total", "outcome", "unavailable"); got != n {
		t.Errorf("latchkey_token_exchanges_total{outcome=unavailable} = %v, want %d", got, n)
	}
	t.Logf("GitHub hanging, upstream timeout %v: %d concurrent exchanges all answered 503 temporarily_unavailable; slowest %v, all within %v; the connection became expiring (never broken) and was active again once GitHub answered",
		timeout, n, slowest.Round(time.Millisecond), took.Round(time.Millisecond))
}

// gauge sums the series of a metric with one label value.
func gauge(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	v := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return v
}

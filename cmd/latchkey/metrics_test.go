package main

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"latchkey.dev/latchkey/internal/metrics"
)

// The metrics port serves Latchkey's own collectors next to controller-runtime's, each family
// once.
func TestMetricsGathererServesLatchkeyMetrics(t *testing.T) {
	m, err := metrics.New(prometheus.DefaultRegisterer)
	must(t, err)
	m.TokenIssued("team/demo", "client_credentials")
	mfs, err := metricsGatherer().Gather()
	must(t, err)
	seen := map[string]int{}
	for _, mf := range mfs {
		seen[mf.GetName()]++
	}
	for _, name := range []string{"latchkey_tokens_issued_total", "latchkey_token_exchanges_total", "latchkey_http_requests_in_flight", "go_goroutines"} {
		if seen[name] != 1 {
			t.Errorf("%s appears %d times", name, seen[name])
		}
	}
}

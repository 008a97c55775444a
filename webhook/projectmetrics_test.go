package webhook_test

import (
	"net/url"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"latchkey.dev/latchkey/internal/metrics"
	"latchkey.dev/latchkey/test/stack"
)

// Token issuance and sign-ins are counted under the project they happened in.
func TestMetricsCountByProject(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	s := stack.New(t, stack.Options{Metrics: m})
	if r := s.Token(url.Values{"grant_type": {"client_credentials"}, "client_id": {stack.Service}, "client_secret": {stack.ServiceSecret}}, "", ""); r.Status != 200 {
		t.Fatalf("client_credentials: %d %s", r.Status, r.Raw)
	}
	s.Browser().SignInPage("", stack.AliceEmail, "wrong password")
	s.Browser().SignInPage("", stack.AliceEmail, stack.AlicePassword)

	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"latchkey_tokens_issued_total", map[string]string{"project": stack.ProjectKey, "grant_type": "client_credentials"}},
		{"latchkey_sign_ins_total", map[string]string{"project": stack.ProjectKey, "method": "password", "result": "refused"}},
		{"latchkey_sign_ins_total", map[string]string{"project": stack.ProjectKey, "method": "password", "result": "ok"}},
	} {
		if got := counterValue(t, reg, c.name, c.labels); got != 1 {
			t.Errorf("%s%v = %v, want 1", c.name, c.labels, got)
		}
	}
}

func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			if matches(s, labels) {
				v += s.GetCounter().GetValue()
			}
		}
	}
	return v
}

func matches(s *dto.Metric, labels map[string]string) bool {
	n := 0
	for _, l := range s.GetLabel() {
		if want, ok := labels[l.GetName()]; ok {
			if l.GetValue() != want {
				return false
			}
			n++
		}
	}
	return n == len(labels)
}

package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/metrics"
	"latchkey.dev/latchkey/internal/store"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
)

func newMetrics(t *testing.T) (*metrics.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// labels returns every label value of every series in reg, for "never a raw path" checks.
func labels(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				out = append(out, l.GetName()+"="+l.GetValue())
			}
		}
	}
	return out
}

func TestInstrumentLabelsByPatternNeverByPath(t *testing.T) {
	m, reg := newMetrics(t)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{ns}/{project}/account/services/link/{code}", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
	})
	mux.HandleFunc("POST /{ns}/{project}/token", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("{}")) // no WriteHeader: a 200
	})
	mux.HandleFunc("GET /panic", func(w http.ResponseWriter, r *http.Request) { panic("boom") })
	type seen struct {
		route  string
		status int
	}
	var log []seen
	h := m.Instrument(mux, func(r *http.Request, route string, status int, _ time.Duration) {
		log = append(log, seen{route, status})
	})

	const code = "q3JxSecretLinkCode0123456789abcdefghijklmnop"
	for _, req := range []*http.Request{
		httptest.NewRequest(http.MethodGet, "/team/demo/account/services/link/"+code, nil),
		httptest.NewRequest(http.MethodPost, "/team/demo/token?code="+code, nil),
		httptest.NewRequest(http.MethodGet, "/nowhere/"+code, nil),
		httptest.NewRequest("BREW", "/team/demo/token", nil),
	} {
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("a panic must propagate to the server's own recovery")
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/panic", nil))
	}()

	want := []seen{
		{"/{ns}/{project}/account/services/link/{code}", 404},
		{"/{ns}/{project}/token", 200},
		{metrics.Unmatched, 404},
		{metrics.Unmatched, 405},
		{"/panic", 500},
	}
	if !reflect.DeepEqual(log, want) {
		t.Errorf("done saw %v, want %v", log, want)
	}
	for _, c := range []struct {
		route, method, class string
	}{
		{"/{ns}/{project}/account/services/link/{code}", "GET", "4xx"},
		{"/{ns}/{project}/token", "POST", "2xx"},
		{metrics.Unmatched, "other", "4xx"},
		{"/panic", "GET", "5xx"},
	} {
		got := value(t, reg, "latchkey_http_requests_total", map[string]string{"route": c.route, "method": c.method, "code": c.class})
		if got != 1 {
			t.Errorf("latchkey_http_requests_total{route=%q,method=%q,code=%q} = %v, want 1", c.route, c.method, c.class, got)
		}
	}
	for _, l := range labels(t, reg) {
		if strings.Contains(l, code) || strings.Contains(l, "team") {
			t.Errorf("a label carries part of a raw path: %s", l)
		}
	}
	if got := value(t, reg, "latchkey_http_requests_in_flight", nil); got != 0 {
		t.Errorf("in flight after every request finished = %v", got)
	}
}

// value sums the series of name whose labels include want (histograms: their sample counts).
func value(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
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
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, x := range want {
				if have[k] != x {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				v += m.GetCounter().GetValue()
			case m.Gauge != nil:
				v += m.GetGauge().GetValue()
			case m.Histogram != nil:
				v += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return v
}

func TestTokenAndExchangeCounters(t *testing.T) {
	m, reg := newMetrics(t)
	const te = "urn:ietf:params:oauth:grant-type:token-exchange"
	m.TokenIssued("team/demo", "refresh_token")
	m.TokenError("team/demo", "refresh_token", "invalid_grant")
	m.TokenError("team/demo", "refresh_token", "made_up_by_a_client\x00")
	m.Exchange("team/demo", metrics.ExchangeRefused, "connect_required")
	m.Exchange("team/demo", metrics.ExchangeRefused, "connect_required")
	m.Exchange("team/demo", metrics.ExchangeRefused, "nonsense")
	m.Exchange("team/demo", metrics.ExchangeIssued, "")
	m.Exchange("team/demo", "weird", "")
	m.UpstreamRefresh("default/github", metrics.RefreshTimeout)
	m.UpstreamRefresh("default/github", "???")

	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"latchkey_tokens_issued_total", map[string]string{"grant_type": "refresh_token"}, 1},
		{"latchkey_token_errors_total", map[string]string{"grant_type": "refresh_token", "error": "invalid_grant"}, 1},
		{"latchkey_token_errors_total", map[string]string{"grant_type": "refresh_token", "error": "other"}, 1},
		{"latchkey_token_exchanges_total", map[string]string{"outcome": "refused"}, 3},
		{"latchkey_token_exchanges_total", map[string]string{"outcome": "issued"}, 1},
		{"latchkey_token_exchanges_total", map[string]string{"outcome": "error"}, 1},
		{"latchkey_token_exchange_refusals_total", map[string]string{"reason": "connect_required"}, 2},
		{"latchkey_token_exchange_refusals_total", map[string]string{"reason": "other"}, 1},
		{"latchkey_token_exchange_refusals_total", map[string]string{"reason": "allow_required"}, 0},
		{"latchkey_upstream_refreshes_total", map[string]string{"connector": "default/github", "result": "timeout"}, 1},
		{"latchkey_upstream_refreshes_total", map[string]string{"connector": "default/github", "result": "error"}, 1},
	} {
		if got := value(t, reg, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// A nil *Metrics records nothing and does not panic.
	var none *metrics.Metrics
	none.TokenIssued("team/demo", te)
	none.Exchange("team/demo", metrics.ExchangeIssued, "")
	none.SignIn("team/demo", metrics.SignInPassword, metrics.SignInOK)
	none.UpstreamRefresh("x", "ok")
}

// The project label names only Projects in the compiled configuration: a key nobody declared
// (a deleted Project, a value that came from a request) is counted under "other", so series
// grow with the Projects an administrator declares and nothing else.
func TestProjectLabelIsBounded(t *testing.T) {
	m, reg := newMetrics(t)
	m.TokenIssued("team/demo", "client_credentials") // no configuration known yet
	holder := &config.Holder{}
	holder.Store(&config.Snapshot{Projects: map[string]*config.Project{"team/demo": {Key: "team/demo"}}})
	m.Projects(holder)
	for i := range 50 {
		m.TokenIssued(fmt.Sprintf("attacker/p%d", i), "client_credentials")
		m.SignIn(fmt.Sprintf("attacker/p%d", i), "made-up", "made-up")
	}
	m.TokenIssued("team/demo", "client_credentials")
	m.Exchange("team/demo", metrics.ExchangeIssued, "")
	m.SignIn("team/demo", metrics.SignInPassword, metrics.SignInOK)
	m.SignIn("team/demo", metrics.SignInPassword, metrics.SignInRefused)

	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"latchkey_tokens_issued_total", map[string]string{"project": "team/demo"}, 1},
		{"latchkey_tokens_issued_total", map[string]string{"project": metrics.OtherProject}, 51},
		{"latchkey_token_exchanges_total", map[string]string{"project": "team/demo", "outcome": "issued"}, 1},
		{"latchkey_sign_ins_total", map[string]string{"project": "team/demo", "method": "password", "result": "ok"}, 1},
		{"latchkey_sign_ins_total", map[string]string{"project": "team/demo", "method": "password", "result": "refused"}, 1},
		{"latchkey_sign_ins_total", map[string]string{"project": metrics.OtherProject, "method": "other", "result": "failed"}, 50},
	} {
		if got := value(t, reg, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// Every exchange outcome and refusal reason of a project exists once it has exchanged.
	if got := value(t, reg, "latchkey_token_exchanges_total", map[string]string{"project": "team/demo", "outcome": "error"}); got != 0 {
		t.Errorf("error outcome = %v", got)
	}
	for _, l := range labels(t, reg) {
		if strings.Contains(l, "attacker") || strings.Contains(l, "made-up") {
			t.Errorf("label %s came from a request", l)
		}
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "latchkey_token_exchanges_total" && len(mf.GetMetric()) != 10 {
			t.Errorf("%d exchange series, want 10 (team/demo and other × 5 outcomes)", len(mf.GetMetric()))
		}
	}
}

func TestNewTwiceSharesCollectors(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := metrics.New(reg)
	if err != nil {
		t.Fatalf("a second server in the same process: %v", err)
	}
	a.TokenIssued("team/demo", "client_credentials")
	b.TokenIssued("team/demo", "client_credentials")
	if got := value(t, reg, "latchkey_tokens_issued_total", map[string]string{"grant_type": "client_credentials"}); got != 2 {
		t.Errorf("shared counter = %v, want 2", got)
	}
}

func openSQLite(t *testing.T, opts ...sqlstore.Option) *sqlstore.Store {
	t.Helper()
	st, err := sqlstore.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "latchkey.db"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// The SQL store reports its operations to StoreOperation: a real store call shows up under its
// method's name with the result its caller saw. (Which error an operation reports, once, is
// the SQL store's part: internal/store/sql TestObserveReportsOnceWithWhatTheCallerSaw.)
func TestStoreOperationsAreTimed(t *testing.T) {
	m, reg := newMetrics(t)
	st := openSQLite(t, sqlstore.Observe(m.StoreOperation))
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	if _, err := st.GetSession(ctx, []byte("no such cookie"), now); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetSession of nothing: %v", err)
	}
	s := store.Session{IDHash: []byte("cookie-hash"), Project: "team/demo", Subject: "p1", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if err := st.CreateSession(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateSession(ctx, s); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("the same session twice: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		op, result string
		want       float64
	}{
		{"GetSession", "not_found", 1},
		{"CreateSession", "ok", 1},
		{"CreateSession", "conflict", 1},
		{"CreateSession", "error", 0},
		{"Close", "ok", 1},
	} {
		got := value(t, reg, "latchkey_store_operation_duration_seconds", map[string]string{"operation": c.op, "result": c.result})
		if got != c.want {
			t.Errorf("latchkey_store_operation_duration_seconds{operation=%q,result=%q} observed %v times, want %v", c.op, c.result, got, c.want)
		}
	}
	// Anything else is an error; a nil *Metrics records nothing and does not panic.
	m.StoreOperation("GetSession", time.Millisecond, errors.New("connection refused"))
	if got := value(t, reg, "latchkey_store_operation_duration_seconds", map[string]string{"operation": "GetSession", "result": "error"}); got != 1 {
		t.Errorf("an unexpected error observed %v times as error, want 1", got)
	}
	var none *metrics.Metrics
	none.StoreOperation("GetSession", time.Millisecond, nil)
}

func TestOutboxDepthAndStoreUp(t *testing.T) {
	reg := prometheus.NewRegistry()
	st := openSQLite(t)
	if err := metrics.Outbox(reg, st, time.Second); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	if err := st.EnqueueEvents(context.Background(),
		store.Event{ID: "e1", Project: "team/demo", Sink: "a", Type: "t", Data: []byte("{}"), CreatedAt: now, NextAttempt: now},
		store.Event{ID: "e1", Project: "team/demo", Sink: "b", Type: "t", Data: []byte("{}"), CreatedAt: now, NextAttempt: now},
	); err != nil {
		t.Fatal(err)
	}
	if got := value(t, reg, "latchkey_event_outbox_depth", nil); got != 2 {
		t.Errorf("outbox depth = %v, want 2", got)
	}
	if got := value(t, reg, "latchkey_store_up", nil); got != 1 {
		t.Errorf("store_up = %v, want 1", got)
	}
	st.Close()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("a scrape while the store is down must not fail: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "latchkey_event_outbox_depth" {
			t.Error("outbox depth reported while the store is down")
		}
	}
	if got := value(t, reg, "latchkey_store_up", nil); got != 0 {
		t.Errorf("store_up with the store closed = %v, want 0", got)
	}
}

// latchkey_connections counts connections by declared Connector and state; a Connector no
// Project declares is "other", so the series stay bounded by what administrators declared.
func TestConnectionsByConnectorAndState(t *testing.T) {
	reg := prometheus.NewRegistry()
	st := openSQLite(t)
	h := &config.Holder{}
	h.Store(&config.Snapshot{Projects: map[string]*config.Project{
		"team/demo": {Key: "team/demo", Connectors: map[string]*config.Connector{"team/github": {Key: "team/github"}}},
	}})
	if err := metrics.Connections(reg, st, h, time.Second); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for i, c := range []struct {
		connector string
		status    store.ConnectionStatus
	}{
		{"team/github", store.ConnectionActive}, {"team/github", store.ConnectionActive},
		{"team/github", store.ConnectionRevokedUpstream}, {"team/gone-1", store.ConnectionActive}, {"team/gone-2", store.ConnectionExpiring},
	} {
		if _, err := st.SaveConnection(context.Background(), store.Connection{ID: fmt.Sprint("c", i), Project: "team/demo",
			Subject: fmt.Sprint("p", i), Connector: c.connector, AccountID: "1", KeyID: "k", TokenType: "bearer",
			Status: c.status, CreatedAt: now, UpdatedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		connector, state string
		want             float64
	}{
		{"team/github", "active", 2}, {"team/github", "revoked_upstream", 1}, {"team/github", "expiring", 0},
		{"team/github", "needs_reconnect", 0}, {"other", "active", 1}, {"other", "expiring", 1}, {"team/gone-1", "active", 0},
	} {
		if got := value(t, reg, "latchkey_connections", map[string]string{"connector": tc.connector, "state": tc.state}); got != tc.want {
			t.Errorf("%s %s = %v, want %v", tc.connector, tc.state, got, tc.want)
		}
	}
}

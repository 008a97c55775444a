package events_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/testclock"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
)

// clock is the injected clock: tests move it, nothing sleeps.
type clock = testclock.Clock

// sink answers 503 while down and records every event it accepts, by id.
type sink struct {
	mu       sync.Mutex
	down     bool
	refused  int
	received map[string]int
	bodies   []events.CloudEvent
	bad      []string
	key      []byte
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		s.refused++
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	var ev events.CloudEvent
	if err := json.Unmarshal(body, &ev); err != nil || r.Header.Get("Content-Type") != events.ContentType {
		s.bad = append(s.bad, "not a structured CloudEvent")
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if !verify(s.key, body, r.Header.Get(events.SignatureHeader)) {
		s.bad = append(s.bad, "bad signature on "+ev.ID)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	s.received[ev.ID]++
	s.bodies = append(s.bodies, ev)
	w.WriteHeader(http.StatusAccepted)
}

func (s *sink) setDown(d bool) {
	s.mu.Lock()
	s.down = d
	s.mu.Unlock()
}

func verify(key, body []byte, header string) bool {
	ts, sig, ok := strings.Cut(header, ",v1=")
	ts, ok2 := strings.CutPrefix(ts, "t=")
	want, err := hex.DecodeString(sig)
	if !ok || !ok2 || err != nil {
		return false
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(ts + "."))
	m.Write(body)
	return hmac.Equal(m.Sum(nil), want)
}

type fixture struct {
	clock   *clock
	store   store.Store
	holder  *config.Holder
	project *config.Project
	emitter *events.Emitter
	sinks   []*sink
}

func newFixture(t *testing.T, nSinks int) *fixture {
	t.Helper()
	st, err := sqlstore.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "latchkey.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := &fixture{clock: testclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)), store: st, holder: &config.Holder{}}
	f.project = &config.Project{Key: "team/demo", Namespace: "team", Name: "demo", Issuer: "https://auth.example.test/team/demo"}
	for i := range nSinks {
		s := &sink{received: map[string]int{}, key: []byte("key-" + string(rune('a'+i)))}
		srv := httptest.NewServer(s)
		t.Cleanup(srv.Close)
		f.sinks = append(f.sinks, s)
		f.project.EventSinks = append(f.project.EventSinks, config.EventSink{Name: "sink-" + string(rune('a'+i)), URL: srv.URL, HMACKey: s.key})
	}
	f.holder.Store(&config.Snapshot{Projects: map[string]*config.Project{f.project.Key: f.project}})
	f.emitter, err = events.NewEmitter(events.EmitterOptions{Store: st, Config: f.holder, Now: f.clock.Now, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// relay moves the appended records into the outbox, as a deliverer does each round.
func (f *fixture) relay(t *testing.T) {
	t.Helper()
	if _, err := f.deliverer().Relay(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) deliverer() *events.Deliverer {
	return &events.Deliverer{
		Store: f.store, Config: f.holder, Now: f.clock.Now, Registerer: prometheus.NewRegistry(),
		MinBackoff: time.Second, MaxBackoff: time.Minute, Batch: 4,
		Jitter: func() float64 { return 0.5 }, // no spread: retries are due exactly at the backoff
	}
}

func counter(t *testing.T, e *events.Emitter, typ string) float64 {
	t.Helper()
	var m dto.Metric
	if err := e.Counter().WithLabelValues(typ).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func depth(t *testing.T, st store.Store) int64 {
	t.Helper()
	n, err := st.OutboxDepth(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestEmitWritesAuditCounterAndOutbox(t *testing.T) {
	f := newFixture(t, 2)
	ctx := context.Background()
	err := f.emitter.Emit(ctx, f.project, events.Event{
		Type: events.LinkWrongPerson, Actor: "alice", Subject: "mallory", Details: map[string]string{"link_id": "l1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := f.store.ListAudit(ctx, f.project.Key, 10)
	if err != nil || len(recs) != 1 || recs[0].Action != events.LinkWrongPerson || recs[0].Actor != "alice" ||
		recs[0].Target != "mallory" || recs[0].Details["link_id"] != "l1" {
		t.Fatalf("audit %+v, %v", recs, err)
	}
	if got := counter(t, f.emitter, events.LinkWrongPerson); got != 1 {
		t.Fatalf("counter %v", got)
	}
	if err := f.emitter.Emit(ctx, f.project, events.Event{Type: "made.up"}); err == nil {
		t.Fatal("an unknown event type was emitted")
	}
	if got := counter(t, f.emitter, events.RefreshReuse); got != 0 {
		t.Fatalf("other type counted: %v", got)
	}
	if got := depth(t, f.store); got != 0 {
		t.Fatalf("outbox depth %d before the relay", got)
	}
	f.relay(t)
	if got := depth(t, f.store); got != 2 {
		t.Fatalf("outbox depth %d, want one row per sink", got)
	}
	if _, err := f.deliverer().DeliverDue(ctx); err != nil {
		t.Fatal(err)
	}
	a, b := f.sinks[0].bodies, f.sinks[1].bodies
	if len(a) != 1 || len(b) != 1 || a[0].ID != b[0].ID {
		t.Fatalf("sinks got %+v and %+v, want the same event", a, b)
	}
	ev := a[0]
	if ev.SpecVersion != "1.0" || ev.Type != "dev.latchkey.link.wrong_person" || ev.Source != f.project.Issuer ||
		ev.DataContentType != "application/json" || ev.Time != "2026-11-30T12:00:00Z" ||
		ev.Data.Actor != "alice" || ev.Data.Subject != "mallory" || ev.Data.Project != "team/demo" {
		t.Fatalf("event %+v", ev)
	}
}

// Every audit record reaches the sinks, whoever appended it (a flow through Record, or the
// admin API straight into the store); Recorded only counts security events.
func TestEveryRecordIsRelayedOnce(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	appendRec := func(r store.AuditRecord) {
		t.Helper()
		r.Time = f.clock.Now()
		if err := f.store.AppendAudit(ctx, r); err != nil {
			t.Fatal(err)
		}
		f.emitter.Recorded(ctx, r)
	}
	appendRec(store.AuditRecord{Project: f.project.Key, Action: "connection.saved", Actor: "alice", Details: map[string]string{"connector": "team/github"}})
	appendRec(store.AuditRecord{Project: f.project.Key, Action: events.RefreshReuse, Actor: "client:c1", Target: "alice"})
	// The callback's own audit action for its confirmation page reports callback.confirmation.
	appendRec(store.AuditRecord{Project: f.project.Key, Action: "connection.confirmation_shown", Actor: "alice"})
	appendRec(store.AuditRecord{Project: f.project.Key, Action: "admin.revoke_grant", Actor: "kubernetes:jane", Target: "alice"})
	appendRec(store.AuditRecord{Project: "gone/project", Action: events.CallbackConfirmation})
	if counter(t, f.emitter, events.RefreshReuse) != 1 || counter(t, f.emitter, events.CallbackConfirmation) != 2 {
		t.Fatal("security events not counted")
	}
	if depth(t, f.store) != 0 {
		t.Fatal("queued before the relay")
	}
	d := f.deliverer()
	if n, err := d.Relay(ctx); err != nil || n != 5 {
		t.Fatalf("relayed %d, %v", n, err)
	}
	if n, err := d.Relay(ctx); err != nil || n != 0 {
		t.Fatalf("relayed again: %d, %v", n, err)
	}
	evs, err := f.store.ClaimEvents(ctx, f.clock.Now(), time.Minute, 10)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range evs {
		types = append(types, e.Type)
	}
	want := []string{"dev.latchkey.connection.saved", "dev.latchkey.refresh.reuse", "dev.latchkey.callback.confirmation", "dev.latchkey.admin.revoke_grant"}
	if !slices.Equal(types, want) {
		t.Fatalf("queued %v, want %v (the gone project's record is relayed to nobody)", types, want)
	}
	var ev events.CloudEvent
	if err := json.Unmarshal(evs[0].Data, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Data.Connector != "team/github" || ev.Data.Outcome != store.OutcomeSuccess || ev.Data.Action != "connection.saved" || ev.Data.AuditID == 0 {
		t.Fatalf("event data %+v", ev.Data)
	}
	for typ, want := range map[[2]string]float64{
		{"connection.saved", "success"}: 1, {"refresh.reuse", "refused"}: 1, {"callback.confirmation", "refused"}: 2,
		{"admin.other", "unknown"}: 1,
	} {
		var m dto.Metric
		if err := d.Records().WithLabelValues(typ[0], typ[1]).Write(&m); err != nil || m.GetCounter().GetValue() != want {
			t.Errorf("latchkey_audit_records_total%v = %v, want %v", typ, m.GetCounter().GetValue(), want)
		}
	}
}

// The sink is down for a while: every event arrives once it is back, exactly once per id.
func TestSinkDownThenUp(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	s := f.sinks[0]
	s.setDown(true)
	const n = 10
	for i := range n {
		if err := f.emitter.Emit(ctx, f.project, events.Event{Type: events.RefreshReuse, Actor: "client:c", Subject: string(rune('a' + i))}); err != nil {
			t.Fatal(err)
		}
	}
	d := f.deliverer()
	// Ten minutes of outage: retries back off (1s, 2s, 4s, … capped at a minute).
	for range 600 {
		if _, err := d.DeliverDue(ctx); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(time.Second)
	}
	refusedDuringOutage := s.refused
	if depth(t, f.store) != n || len(s.received) != 0 {
		t.Fatalf("during the outage: depth %d, received %d", depth(t, f.store), len(s.received))
	}
	// With backoff, ten minutes cost far fewer attempts than one per second per event.
	if refusedDuringOutage < n*5 || refusedDuringOutage > n*20 {
		t.Fatalf("%d attempts during the outage", refusedDuringOutage)
	}

	s.setDown(false)
	for range 120 {
		if _, err := d.DeliverDue(ctx); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(time.Second)
	}
	if len(s.received) != n || len(s.bad) != 0 {
		t.Fatalf("received %d distinct events (%v), bad %v", len(s.received), s.received, s.bad)
	}
	for id, times := range s.received {
		if times != 1 {
			t.Errorf("event %s received %d times", id, times)
		}
	}
	if depth(t, f.store) != 0 {
		t.Fatalf("outbox not drained")
	}
}

// An event claimed by a replica that then died is sent again after the lease, with the same id.
func TestLeaseExpiryRedelivers(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	if err := f.emitter.Emit(ctx, f.project, events.Event{Type: events.LinkWrongPerson}); err != nil {
		t.Fatal(err)
	}
	f.relay(t)
	claimed, err := f.store.ClaimEvents(ctx, f.clock.Now(), time.Minute, 10)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v %v", claimed, err)
	}
	d := f.deliverer()
	if got, _ := d.DeliverDue(ctx); got != 0 {
		t.Fatalf("a leased event was claimed again")
	}
	f.clock.Advance(time.Minute)
	if got, err := d.DeliverDue(ctx); got != 1 || err != nil {
		t.Fatalf("after the lease: %d %v", got, err)
	}
	if f.sinks[0].received[claimed[0].ID] != 1 {
		t.Fatalf("sink: %v", f.sinks[0].received)
	}
}

func TestUnconfiguredSinkIsKeptThenDropped(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	if err := f.emitter.Emit(ctx, f.project, events.Event{Type: events.LinkWrongPerson}); err != nil {
		t.Fatal(err)
	}
	f.relay(t)
	// The sink disappears from the configuration (a Secret being replaced, say).
	f.holder.Store(&config.Snapshot{Projects: map[string]*config.Project{}})
	d := f.deliverer()
	d.UnconfiguredMaxAge = time.Hour
	for range 30 {
		if _, err := d.DeliverDue(ctx); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(time.Minute)
	}
	if depth(t, f.store) != 1 {
		t.Fatalf("dropped too early")
	}
	f.clock.Advance(time.Hour)
	for range 3 {
		if _, err := d.DeliverDue(ctx); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(time.Minute)
	}
	if depth(t, f.store) != 0 {
		t.Fatalf("kept forever")
	}
}

// A sink whose HMAC key Secret is broken is left out of delivery while the others deliver, and
// its events wait (past UnconfiguredMaxAge) until the Secret is fixed: none is lost.
func TestUnavailableSinkWaits(t *testing.T) {
	f := newFixture(t, 2)
	ctx := context.Background()
	broken := *f.project
	broken.EventSinks = slices.Clone(f.project.EventSinks)
	broken.EventSinks[1].HMACKey, broken.EventSinks[1].Unavailable = nil, true
	f.holder.Store(&config.Snapshot{Projects: map[string]*config.Project{broken.Key: &broken}})
	if err := f.emitter.Emit(ctx, &broken, events.Event{Type: events.LinkWrongPerson}); err != nil {
		t.Fatal(err)
	}
	d := f.deliverer()
	d.UnconfiguredMaxAge = time.Hour
	for range 120 {
		if _, err := d.DeliverDue(ctx); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(time.Minute)
	}
	if len(f.sinks[0].received) != 1 {
		t.Fatalf("the working sink received %v", f.sinks[0].received)
	}
	if len(f.sinks[1].received) != 0 || f.sinks[1].refused != 0 || len(f.sinks[1].bad) != 0 {
		t.Fatalf("the unavailable sink was sent something: %+v", f.sinks[1])
	}
	if depth(t, f.store) != 1 {
		t.Fatalf("outbox depth %d: the unavailable sink's event must wait", depth(t, f.store))
	}

	f.holder.Store(&config.Snapshot{Projects: map[string]*config.Project{f.project.Key: f.project}})
	for range 3 {
		if _, err := d.DeliverDue(ctx); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(time.Minute)
	}
	if len(f.sinks[1].received) != 1 || len(f.sinks[1].bad) != 0 || depth(t, f.store) != 0 {
		t.Fatalf("after the fix: received %v, bad %v, depth %d", f.sinks[1].received, f.sinks[1].bad, depth(t, f.store))
	}
}

func TestBackoffGrowsAndIsCapped(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	f.sinks[0].setDown(true)
	if err := f.emitter.Emit(ctx, f.project, events.Event{Type: events.LinkWrongPerson}); err != nil {
		t.Fatal(err)
	}
	d := f.deliverer()
	start := f.clock.Now()
	var gaps []time.Duration
	last := start
	for f.clock.Now().Sub(start) < 10*time.Minute {
		before := f.sinks[0].refused
		if _, err := d.DeliverDue(ctx); err != nil {
			t.Fatal(err)
		}
		if f.sinks[0].refused > before {
			gaps = append(gaps, f.clock.Now().Sub(last))
			last = f.clock.Now()
		}
		f.clock.Advance(100 * time.Millisecond)
	}
	want := []time.Duration{0, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute}
	for i, w := range want {
		if i >= len(gaps) || gaps[i] < w || gaps[i] > w+100*time.Millisecond {
			t.Fatalf("gaps between attempts %v, want %v then a minute each", gaps, want)
		}
	}
}

func TestSignature(t *testing.T) {
	body := []byte(`{"id":"1"}`)
	got := events.Sign([]byte("k"), body, time.Unix(1700000000, 0))
	m := hmac.New(sha256.New, []byte("k"))
	m.Write([]byte("1700000000." + string(body)))
	if want := "t=1700000000,v1=" + hex.EncodeToString(m.Sum(nil)); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	if !verify([]byte("k"), body, got) || verify([]byte("other"), body, got) || verify([]byte("k"), []byte(`{"id":"2"}`), got) {
		t.Fatal("verification does not depend on key and body")
	}
}

func TestTailSumsUpNewSecurityEvents(t *testing.T) {
	f := newFixture(t, 0)
	ctx := context.Background()
	old := store.AuditRecord{Project: "team/demo", Time: f.clock.Now().Add(-time.Hour), Actor: "x", Action: events.LinkWrongPerson}
	if err := f.store.AppendAudit(ctx, old); err != nil {
		t.Fatal(err)
	}
	tail := &events.Tail{Store: f.store, Lookback: 10 * time.Minute, Page: 2}
	emit := func(project, typ, actor string) {
		t.Helper()
		if err := f.store.AppendAudit(ctx, store.AuditRecord{Project: project, Time: f.clock.Now(), Actor: actor, Action: typ}); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(time.Second)
	}
	if got, err := tail.Next(ctx, f.clock.Now()); err != nil || len(got) != 0 {
		t.Fatalf("history older than the lookback reported: %+v %v", got, err)
	}
	emit("team/demo", events.LinkWrongPerson, "alice")
	emit("team/demo", "connection.saved", "alice")
	emit("team/demo", events.LinkWrongPerson, "bob")
	emit("team/other", events.RefreshReuse, "client:c")
	emit("team/demo", events.LinkWrongPerson, "carol")
	got, err := tail.Next(ctx, f.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Project != "team/demo" || got[0].Type != events.LinkWrongPerson || got[0].Count != 3 ||
		got[0].LastActor != "carol" || got[1].Project != "team/other" || got[1].Count != 1 {
		t.Fatalf("summaries %+v", got)
	}
	if got, _ := tail.Next(ctx, f.clock.Now()); len(got) != 0 {
		t.Fatalf("counted again: %+v", got)
	}
	emit("team/demo", events.ConsentRefusedByPolicy, "dave")
	if got, _ := tail.Next(ctx, f.clock.Now()); len(got) != 1 || got[0].Type != events.ConsentRefusedByPolicy {
		t.Fatalf("next round: %+v", got)
	}
}

// A sink with types receives only those types and families; one without receives everything.
func TestSinkTypesFilter(t *testing.T) {
	f := newFixture(t, 2)
	f.project.EventSinks[0].Types = []string{"signin.*", events.RefreshReuse}
	f.holder.Store(&config.Snapshot{Projects: map[string]*config.Project{f.project.Key: f.project}})
	ctx := context.Background()
	for _, a := range []string{events.SignInFailed, events.TokenIssued, events.RefreshReuse, events.SignInSucceeded, "admin.revoke_grant"} {
		if err := f.store.AppendAudit(ctx, store.AuditRecord{Project: f.project.Key, Time: f.clock.Now(), Actor: "a", Action: a}); err != nil {
			t.Fatal(err)
		}
	}
	d := f.deliverer()
	for range 3 {
		if _, err := d.DeliverDue(ctx); err != nil {
			t.Fatal(err)
		}
	}
	types := func(s *sink) []string {
		var out []string
		for _, b := range s.bodies {
			out = append(out, b.Data.Action)
		}
		return out
	}
	// A batch is sent concurrently: compare what arrived, not in which order.
	got, want := types(f.sinks[0]), []string{events.RefreshReuse, events.SignInFailed, events.SignInSucceeded}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("filtered sink got %v, want %v", got, want)
	}
	if got := types(f.sinks[1]); len(got) != 5 {
		t.Errorf("unfiltered sink got %v", got)
	}
}

// A tenant's sink receives its own Project's records and never another Project's: the admin of
// team-b's sink learns nothing of who signs in to team-a.
func TestSinksReceiveOnlyTheirProject(t *testing.T) {
	f := newFixture(t, 1)
	other := &sink{received: map[string]int{}, key: []byte("key-other")}
	srv := httptest.NewServer(other)
	t.Cleanup(srv.Close)
	b := &config.Project{Key: "team-b/main", Namespace: "team-b", Name: "main", Issuer: "https://auth.example.test/team-b/main",
		EventSinks: []config.EventSink{{Name: f.project.EventSinks[0].Name, URL: srv.URL, HMACKey: other.key}}}
	f.holder.Store(&config.Snapshot{Projects: map[string]*config.Project{f.project.Key: f.project, b.Key: b}})
	ctx := context.Background()
	for _, p := range []string{f.project.Key, b.Key, f.project.Key} {
		if err := f.store.AppendAudit(ctx, store.AuditRecord{Project: p, Time: f.clock.Now(), Actor: "alice", Action: events.SignInSucceeded}); err != nil {
			t.Fatal(err)
		}
	}
	d := f.deliverer()
	for range 3 {
		if _, err := d.DeliverDue(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range f.sinks[0].bodies {
		if e.Data.Project != f.project.Key || e.Source != f.project.Issuer {
			t.Errorf("team/demo's sink received %+v", e)
		}
	}
	for _, e := range other.bodies {
		if e.Data.Project != b.Key || e.Source != b.Issuer {
			t.Errorf("team-b's sink received %+v", e)
		}
	}
	if len(f.sinks[0].bodies) != 2 || len(other.bodies) != 1 {
		t.Fatalf("received %d and %d", len(f.sinks[0].bodies), len(other.bodies))
	}
}

// A sink's URL can carry its credential in the path or query (a Slack or Teams incoming
// webhook, "?token=…"). A failed delivery is logged with the sink's scheme and host only:
// whoever reads the logs must not be able to post to the sink.
func TestFailedDeliveryLogsNoSinkPathOrQuery(t *testing.T) {
	const secretPath, secretQuery = "/services/T000/B000/path-credential", "token=query-credential"
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close() // connection refused
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.String(), http.StatusFound) // to itself, with the credential
	}))
	t.Cleanup(redirecting.Close)
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusForbidden) }))
	t.Cleanup(refusing.Close)
	for _, tc := range []struct{ name, base string }{
		{"connection refused", closed.URL},
		{"redirected", redirecting.URL},
		{"refused", refusing.URL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 0)
			f.project.EventSinks = []config.EventSink{{Name: "slack", URL: tc.base + secretPath + "?" + secretQuery, HMACKey: []byte("k")}}
			if err := f.emitter.Emit(context.Background(), f.project, events.Event{Type: events.RefreshReuse, Actor: "client:c", Subject: "alice"}); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var lines []string
			d := f.deliverer()
			d.Logger = funcr.New(func(prefix, args string) {
				mu.Lock()
				lines = append(lines, args)
				mu.Unlock()
			}, funcr.Options{Verbosity: 9})
			if _, err := d.DeliverDue(context.Background()); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			logged := strings.Join(lines, "\n")
			if !strings.Contains(logged, "will retry") {
				t.Fatalf("the failure was not logged: %s", logged)
			}
			for _, s := range []string{"path-credential", "query-credential", "T000", "/services"} {
				if strings.Contains(logged, s) {
					t.Errorf("the log shows %q of the sink's URL: %s", s, logged)
				}
			}
			u, _ := url.Parse(tc.base)
			if tc.name == "connection refused" && !strings.Contains(logged, u.Scheme+"://"+u.Host) {
				t.Errorf("the log does not say which host failed: %s", logged)
			}
		})
	}
}

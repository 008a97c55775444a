// Package audittest reads an audit trail back the two ways an operator can: from the audit log
// in the store, and from an event sink that receives the deliveries, verifying each delivery's
// Standard Webhooks signature with a verifier written from the specification
// (https://www.standardwebhooks.com), not with Latchkey's signing code.
package audittest

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
)

// SinkName is the sink a test project lists.
const SinkName = "audit"

// Secret is the sink's Standard Webhooks secret: whsec_ + base64 of a 32-byte key.
var Secret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("audittest-key-0123456789abcdefgh"))

// Delivery is one POST the sink accepted.
type Delivery struct {
	Header http.Header
	Body   []byte
	Event  events.CloudEvent
	// Verified: the Standard Webhooks signature verified with Secret at the time received.
	Verified error
}

// Sink is an event sink that records every delivery.
type Sink struct {
	URL string
	now func() time.Time

	mu  sync.Mutex
	got []Delivery
}

// NewSink starts a sink that checks timestamps against now; it stops when the test ends.
func NewSink(t testing.TB, now func() time.Time) *Sink {
	s := &Sink{now: now}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.URL = srv.URL + "/audit"
	return s
}

// Config is the sink as a project lists it.
func (s *Sink) Config() config.EventSink {
	keys, err := events.ParseSinkSecret([]byte(Secret))
	if err != nil {
		panic(err)
	}
	return config.EventSink{Name: SinkName, URL: s.URL, HMACKey: keys[0], Keys: keys}
}

func (s *Sink) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	d := Delivery{Header: r.Header.Clone(), Body: body}
	d.Verified = Verify(Secret, r.Header, body, s.now(), 5*time.Minute)
	if err := json.Unmarshal(body, &d.Event); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.got = append(s.got, d)
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// Deliveries returns what the sink accepted, in order.
func (s *Sink) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Delivery(nil), s.got...)
}

// Verify is a receiver's check from the Standard Webhooks specification: the secret is
// "whsec_" + base64(key); the signed content is webhook-id + "." + webhook-timestamp + "." +
// body; webhook-signature holds space-separated "v1,<base64 HMAC-SHA256>" values, any of which
// may match (compared in constant time); a timestamp more than tolerance from now is refused.
func Verify(secret string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return err
	}
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errors.New("webhook-timestamp is not a number")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return errors.New("webhook-timestamp is too far from now")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, s := range strings.Fields(sigs) {
		v, sig, ok := strings.Cut(s, ",")
		if !ok || v != "v1" {
			continue
		}
		if got, err := base64.StdEncoding.DecodeString(sig); err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("no signature matches")
}

// Store is what Trail reads and relays through.
type Store interface {
	events.OutboxStore
	ListAudit(ctx context.Context, project string, limit int) ([]store.AuditRecord, error)
}

// Trail delivers everything pending (relay and send, as a deliverer's round does) and checks
// that each action was recorded in the project's audit log and received by the sink as a
// verified delivery of the same record. It returns the newest record of each action.
func Trail(t testing.TB, st Store, holder *config.Holder, now func() time.Time, sink *Sink, project string, actions ...string) map[string]store.AuditRecord {
	t.Helper()
	ctx := context.Background()
	d := &events.Deliverer{Store: st, Config: holder, Now: now, Registerer: prometheus.NewRegistry(), Jitter: func() float64 { return 0.5 },
		Client: loopbackOnly}
	for range 100 {
		n, err := d.DeliverDue(ctx)
		if err != nil {
			t.Fatalf("delivering: %v", err)
		}
		if n == 0 {
			break
		}
	}
	recs, err := st.ListAudit(ctx, project, 10000)
	if err != nil {
		t.Fatal(err)
	}
	got := sink.Deliveries()
	out := map[string]store.AuditRecord{}
	for _, action := range actions {
		var rec *store.AuditRecord
		for i := range recs {
			if recs[i].Action == action {
				rec = &recs[i]
				break
			}
		}
		if rec == nil {
			t.Errorf("audit log has no %s record (it has %s)", action, actionsOf(recs))
			continue
		}
		out[action] = *rec
		var del *Delivery
		for i := range got {
			if got[i].Event.Data.AuditID == rec.ID {
				del = &got[i]
			}
		}
		switch {
		case del == nil:
			t.Errorf("the sink received no delivery of %s record %d", action, rec.ID)
		case del.Verified != nil:
			t.Errorf("the delivery of %s does not verify as a Standard Webhook: %v", action, del.Verified)
		case del.Event.Type != events.CloudEventType(events.AuditType(action)) || del.Event.Data.Action != action ||
			del.Event.Data.Actor != rec.Actor || del.Event.Data.Subject != rec.Target || del.Event.Data.Outcome != rec.Outcome ||
			del.Event.Data.Reason != rec.Reason || del.Event.Data.Client != rec.ClientID || del.Event.Data.Connector != rec.Connector:
			t.Errorf("the delivery of %s does not match its record:\n  %s\n  %+v", action, del.Body, *rec)
		case del.Header.Get("webhook-id") != del.Event.ID:
			t.Errorf("webhook-id %q is not the event id %q", del.Header.Get("webhook-id"), del.Event.ID)
		}
		if rec.Outcome == "" {
			t.Errorf("%s record has no outcome", action)
		}
	}
	return out
}

// loopbackOnly sends to test sinks and refuses any other address at once: a store shared by
// several tests may hold events for sinks that name real hosts.
var loopbackOnly = &http.Client{
	Timeout: 10 * time.Second,
	Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		if h := r.URL.Hostname(); h != "127.0.0.1" && h != "localhost" && h != "::1" {
			return nil, errors.New("audittest: not a test sink")
		}
		return http.DefaultTransport.RoundTrip(r)
	}),
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Contains reports whether any audit record of the project or any delivery holds s, for
// checks that a secret was never written down.
func Contains(t testing.TB, st Store, sink *Sink, project, s string) bool {
	t.Helper()
	recs, err := st.ListAudit(context.Background(), project, 10000)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(recs)
	if bytes.Contains(b, []byte(s)) {
		return true
	}
	for _, d := range sink.Deliveries() {
		if bytes.Contains(d.Body, []byte(s)) {
			return true
		}
	}
	return false
}

func actionsOf(recs []store.AuditRecord) string {
	var a []string
	for _, r := range recs {
		a = append(a, r.Action)
	}
	return strings.Join(a, ", ")
}

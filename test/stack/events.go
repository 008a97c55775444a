package stack

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
)

// The "ops" event sink of Options.Links; SinkKey signs what it receives.
const (
	SinkName = "ops"
	SinkKey  = "sink-hmac-key-for-tests"
)

// emitter is the one security-event emitter of the installation, made with the first replica's
// store and configuration (every replica's server reports to it, as one scrape adds them up).
func (s *Stack) emitter(st store.Store, holder *config.Holder) *events.Emitter {
	if s.Emitter != nil {
		return s.Emitter
	}
	em, err := events.NewEmitter(events.EmitterOptions{Store: st, Config: holder, Now: s.Clock.Now, Registerer: s.Registry})
	if err != nil {
		s.T.Fatal(err)
	}
	s.Emitter = em
	return em
}

// Deliverer returns a deliverer for the stack's database, configuration and clock, with
// deterministic backoff (no jitter).
func (s *Stack) Deliverer() *events.Deliverer {
	return &events.Deliverer{
		Store: s.Store(), Config: s.Holder(), Now: s.Clock.Now, Registerer: prometheus.NewRegistry(),
		Jitter: func() float64 { return 0.5 },
	}
}

// SecurityEvents reads latchkey_security_events_total for a type (Options.Links).
func (s *Stack) SecurityEvents(typ string) float64 {
	s.T.Helper()
	if s.Emitter == nil {
		s.T.Fatal("stack: SecurityEvents needs Options.Links")
	}
	var m dto.Metric
	if err := s.Emitter.Counter().WithLabelValues(typ).Write(&m); err != nil {
		s.T.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// Received is one POST the sink accepted.
type Received struct {
	Event     events.CloudEvent
	Signature string
	// Valid says the signature verified with SinkKey.
	Valid bool
	// Traceparent is the W3C trace context header the delivery carried ("" when none).
	Traceparent string
}

// Sink is an event sink: it answers 503 while down and records what it accepts.
type Sink struct {
	URL string

	mu       sync.Mutex
	down     bool
	refused  int
	received []Received
}

// NewSink starts a sink; it stops when the test ends.
func NewSink(t testing.TB) *Sink {
	s := &Sink{}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.URL = srv.URL + "/hooks/latchkey"
	return s
}

// SetDown makes the sink refuse (503) or accept.
func (s *Sink) SetDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

// Refused counts POSTs answered with 503.
func (s *Sink) Refused() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused
}

// Received returns what the sink accepted, in order.
func (s *Sink) Received() []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Received(nil), s.received...)
}

func (s *Sink) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		s.refused++
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	var ev events.CloudEvent
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != events.ContentType || json.Unmarshal(body, &ev) != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	sig := r.Header.Get(events.SignatureHeader)
	s.received = append(s.received, Received{
		Event: ev, Signature: sig, Valid: Verify([]byte(SinkKey), body, sig), Traceparent: r.Header.Get("Traceparent"),
	})
	w.WriteHeader(http.StatusNoContent)
}

// Verify checks a Latchkey-Signature header as a sink would.
func Verify(key, body []byte, header string) bool {
	var ts, v1 string
	for part := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			v1 = v
		}
	}
	got, err := hex.DecodeString(v1)
	if ts == "" || err != nil {
		return false
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(ts + "."))
	m.Write(body)
	return hmac.Equal(m.Sum(nil), got)
}

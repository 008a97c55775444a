package events

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/tracing"
)

// SignatureHeader carries "t=<unix seconds>,v1=<hex HMAC-SHA256(key, t + "." + body)>". A sink
// recomputes the HMAC over the raw body with its key, compares in constant time, and rejects
// timestamps too far from its own clock to limit replays.
const SignatureHeader = "Latchkey-Signature"

// ContentType is CloudEvents' structured mode over HTTP.
const ContentType = "application/cloudevents+json; charset=utf-8"

// Sign returns the SignatureHeader value for body sent at t.
func Sign(key, body []byte, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	m := hmac.New(sha256.New, key)
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

// OutboxStore is the part of the store the Deliverer works the outbox through.
type OutboxStore interface {
	ClaimEvents(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]store.Event, error)
	MarkDelivered(ctx context.Context, id, sink string, now time.Time) error
	MarkFailed(ctx context.Context, id, sink string, next time.Time) error
}

// Deliverer sends queued events to the project's sinks. Run it on every replica: ClaimEvents
// leases rows, so replicas share the work without sending an event twice at the same time.
//
// A sink that is down only delays its events: every failed attempt is recorded and retried with
// exponential backoff and jitter, without limit, until the sink answers 2xx. A sink whose HMAC
// key Secret is broken (config.EventSink.Unavailable) is treated like one that is down: its
// events wait, however long, and leave when the Secret is fixed. Events for a sink that is no
// longer configured (removed from the Project, or the Project is gone) are kept for
// UnconfiguredMaxAge and then dropped with a log line.
type Deliverer struct {
	Store  OutboxStore
	Config *config.Holder
	// Client sends the POSTs; nil uses a client with Timeout and no redirects.
	Client *http.Client
	// Now is the injected clock; time.Now when nil.
	Now    func() time.Time
	Logger logr.Logger

	// Poll is how often due events are looked for; default 2s.
	Poll time.Duration
	// Batch is how many events one round claims; default 32. They are sent concurrently.
	Batch int
	// Timeout bounds one POST; default 10s.
	Timeout time.Duration
	// Lease is how long claimed events are hidden from other replicas; default 4×Timeout.
	Lease time.Duration
	// MinBackoff and MaxBackoff bound the wait before a retry; defaults 2s and 10m.
	MinBackoff, MaxBackoff time.Duration
	// UnconfiguredMaxAge: see the type's comment; default 24h.
	UnconfiguredMaxAge time.Duration
	// Jitter returns a number in [0, 1); math/rand/v2 when nil.
	Jitter func() float64
	// Registerer receives latchkey_event_deliveries_total{result}; DefaultRegisterer when nil.
	Registerer prometheus.Registerer

	once       sync.Once
	deliveries *prometheus.CounterVec
}

func (d *Deliverer) init() {
	d.once.Do(func() {
		if d.Now == nil {
			d.Now = time.Now
		}
		if d.Poll <= 0 {
			d.Poll = 2 * time.Second
		}
		if d.Batch <= 0 {
			d.Batch = 32
		}
		if d.Timeout <= 0 {
			d.Timeout = 10 * time.Second
		}
		if d.Lease <= 0 {
			d.Lease = 4 * d.Timeout
		}
		if d.MinBackoff <= 0 {
			d.MinBackoff = 2 * time.Second
		}
		if d.MaxBackoff <= 0 {
			d.MaxBackoff = 10 * time.Minute
		}
		if d.UnconfiguredMaxAge <= 0 {
			d.UnconfiguredMaxAge = 24 * time.Hour
		}
		if d.Jitter == nil {
			d.Jitter = rand.Float64
		}
		if d.Client == nil {
			d.Client = &http.Client{
				Timeout:   d.Timeout,
				Transport: tracing.Transport("event sink", nil),
				// A sink that redirects is misconfigured; following it would send signed
				// events to an address nobody configured.
				CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
			}
		}
		reg := d.Registerer
		if reg == nil {
			reg = prometheus.DefaultRegisterer
		}
		c := prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "latchkey_event_deliveries_total",
			Help: "Attempts to deliver security events to event sinks, by result (delivered, failed, dropped).",
		}, []string{"result"})
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
					c = existing
				}
			}
		}
		d.deliveries = c
	})
}

// NeedLeaderElection is false: every replica delivers (controller-runtime manager.Runnable).
func (d *Deliverer) NeedLeaderElection() bool { return false }

// Start delivers until ctx ends.
func (d *Deliverer) Start(ctx context.Context) error {
	d.init()
	t := time.NewTicker(d.Poll)
	defer t.Stop()
	for {
		// Keep going while there is a backlog, so a sink that comes back drains at once.
		for {
			n, err := d.DeliverDue(ctx)
			if err != nil && ctx.Err() == nil {
				d.Logger.Error(err, "event delivery round failed")
			}
			if err != nil || n < d.Batch {
				break
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// DeliverDue claims one batch of due events, sends them, and records each outcome. It returns
// how many events it claimed.
func (d *Deliverer) DeliverDue(ctx context.Context) (int, error) {
	d.init()
	snap := d.Config.Load()
	if snap == nil {
		// Without a configuration no sink can be found; claiming now would only push events back.
		return 0, nil
	}
	evs, err := d.Store.ClaimEvents(ctx, d.Now(), d.Lease, d.Batch)
	if err != nil {
		return 0, fmt.Errorf("events: claiming: %w", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(evs))
	for i := range evs {
		wg.Go(func() { errs[i] = d.deliver(ctx, snap, evs[i]) })
	}
	wg.Wait()
	return len(evs), errors.Join(errs...)
}

func (d *Deliverer) deliver(ctx context.Context, snap *config.Snapshot, e store.Event) error {
	sink := findSink(snap.Project(e.Project), e.Sink)
	if sink == nil {
		if d.Now().Sub(e.CreatedAt) > d.UnconfiguredMaxAge {
			d.Logger.Info("dropping a security event: its sink is no longer configured",
				"project", e.Project, "sink", e.Sink, "id", e.ID, "type", e.Type)
			d.deliveries.WithLabelValues("dropped").Inc()
			return d.mark(ctx, d.Store.MarkDelivered(ctx, e.ID, e.Sink, d.Now()))
		}
		return d.mark(ctx, d.Store.MarkFailed(ctx, e.ID, e.Sink, d.next(e)))
	}
	if sink.Unavailable {
		// No key to sign with. The administrator means to keep the sink (it is still in the
		// spec), so its events wait as for a sink that is down, never dropped.
		return d.mark(ctx, d.Store.MarkFailed(ctx, e.ID, e.Sink, d.next(e)))
	}
	err := d.traced(ctx, sink, e)
	if err != nil {
		d.deliveries.WithLabelValues("failed").Inc()
		d.Logger.V(1).Info("event sink refused or failed; will retry", "project", e.Project, "sink", e.Sink,
			"id", e.ID, "attempts", e.Attempts+1, "reason", err.Error())
		return d.mark(ctx, d.Store.MarkFailed(ctx, e.ID, e.Sink, d.next(e)))
	}
	d.deliveries.WithLabelValues("delivered").Inc()
	return d.mark(ctx, d.Store.MarkDelivered(ctx, e.ID, e.Sink, d.Now()))
}

// mark ignores ErrNotFound: another replica finished the event after our lease ran out.
func (d *Deliverer) mark(_ context.Context, err error) error {
	if err == nil || errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return fmt.Errorf("events: recording a delivery outcome: %w", err)
}

func findSink(p *config.Project, name string) *config.EventSink {
	if p == nil {
		return nil
	}
	for i := range p.EventSinks {
		if p.EventSinks[i].Name == name {
			return &p.EventSinks[i]
		}
	}
	return nil
}

// traced posts e as a span of its own (a trace of its own: deliveries run in the background),
// which names the project, the sink and the event, never the sink's URL.
func (d *Deliverer) traced(ctx context.Context, sink *config.EventSink, e store.Event) error {
	ctx, span := tracing.Start(ctx, "event delivery", trace.WithAttributes(
		attribute.String("latchkey.project", e.Project), attribute.String("latchkey.sink", sink.Name),
		attribute.String("latchkey.event.id", e.ID), attribute.String("latchkey.event.type", e.Type),
		attribute.Int("latchkey.event.attempts", e.Attempts+1),
	))
	defer span.End()
	err := d.post(ctx, sink, e)
	if err != nil {
		tracing.Fail(span, "not delivered")
	}
	return err
}

func (d *Deliverer) post(ctx context.Context, sink *config.EventSink, e store.Event) error {
	ctx, cancel := context.WithTimeout(ctx, d.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, sink.URL, bytes.NewReader(e.Data))
	if err != nil {
		return err
	}
	h := req.Header
	h.Set("Content-Type", ContentType)
	h.Set("User-Agent", "Latchkey")
	h.Set(SignatureHeader, Sign(sink.HMACKey, e.Data, d.Now()))
	if tracing.Enabled() {
		// A client of the caller's own may not be traced; the sink still gets the delivery's
		// trace context (a traced client replaces it with its own span's).
		tracing.Propagator.Inject(ctx, propagation.HeaderCarrier(h))
	}
	resp, err := d.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	// Draining lets the connection be reused; a failed drain costs only that.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("sink answered %d", resp.StatusCode)
	}
	return nil
}

// next is when to try again after e's attempt failed: MinBackoff doubled per earlier attempt,
// capped at MaxBackoff, then spread over [½, 1½) of that so replicas and sinks recovering
// together do not see every event at once.
func (d *Deliverer) next(e store.Event) time.Time {
	wait := d.MinBackoff
	for i := 0; i < e.Attempts && wait < d.MaxBackoff; i++ {
		wait *= 2
	}
	wait = min(wait, d.MaxBackoff)
	wait = time.Duration(float64(wait) * (0.5 + d.Jitter()))
	return d.Now().Add(wait)
}

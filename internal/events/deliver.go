package events

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/tracing"
)

// Standard Webhooks (https://www.standardwebhooks.com) headers on every delivery. A receiver
// verifies with any Standard Webhooks library, or by hand (docs/audit.md): the HMAC-SHA256,
// under the key the sink's "whsec_" secret encodes, of id + "." + timestamp + "." + body,
// base64, compared in constant time against each "v1,"-prefixed signature.
const (
	// IDHeader is the event's id, the same on every attempt: receivers deduplicate by it.
	IDHeader = "webhook-id"
	// TimestampHeader is the attempt's time in Unix seconds; receivers refuse one too far from
	// their clock (Standard Webhooks suggests five minutes) so a captured delivery cannot be
	// replayed later.
	TimestampHeader = "webhook-timestamp"
	// SignaturesHeader holds one "v1,<base64>" per key, separated by spaces: two while a
	// sink's secret is being rotated.
	SignaturesHeader = "webhook-signature"
)

// SignatureHeader is the signature format before Standard Webhooks:
// "t=<unix seconds>,v1=<hex HMAC-SHA256(key, t + "." + body)>", with the first key. It is
// still sent, for receivers written against it, and will be removed in the next minor release
// (docs/decisions/0031).
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

// SignStandard returns the SignaturesHeader value for the delivery of body with id at t: one
// signature per key.
func SignStandard(keys [][]byte, id string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	sigs := make([]string, 0, len(keys))
	for _, k := range keys {
		m := hmac.New(sha256.New, k)
		m.Write([]byte(id))
		m.Write([]byte("."))
		m.Write([]byte(ts))
		m.Write([]byte("."))
		m.Write(body)
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(m.Sum(nil)))
	}
	return strings.Join(sigs, " ")
}

// SecretPrefix starts a Standard Webhooks secret: "whsec_" + base64 of the key.
const SecretPrefix = "whsec_"

// ParseSinkSecret reads the keys of an event sink from its Secret's value. The value is
// either one or more Standard Webhooks secrets separated by white space — the first signs
// the legacy header, every one signs webhook-signature, so a receiver can move to a new secret
// while the old one still verifies — or, as before Standard Webhooks, the raw key itself
// (whose secret is "whsec_" + base64 of the value). A whsec key must decode to at least 24
// bytes, a raw key be at least 32; at most 4 keys.
func ParseSinkSecret(v []byte) ([][]byte, error) {
	text := strings.TrimSpace(string(v))
	if !strings.HasPrefix(text, SecretPrefix) {
		if len(v) < 32 {
			return nil, errors.New("must hold at least 32 bytes, or whsec_ secrets")
		}
		return [][]byte{v}, nil
	}
	fields := strings.Fields(text)
	if len(fields) > 4 {
		return nil, errors.New("holds more than 4 whsec_ secrets")
	}
	keys := make([][]byte, 0, len(fields))
	for i, f := range fields {
		b64, ok := strings.CutPrefix(f, SecretPrefix)
		if !ok {
			return nil, fmt.Errorf("secret %d does not start with %s", i+1, SecretPrefix)
		}
		k, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, fmt.Errorf("secret %d is not %s followed by base64", i+1, SecretPrefix)
		}
		if len(k) < 24 {
			return nil, fmt.Errorf("secret %d decodes to %d bytes; at least 24 are needed", i+1, len(k))
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// OutboxStore is the part of the store the Deliverer works the outbox through.
type OutboxStore interface {
	ClaimEvents(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]store.Event, error)
	MarkDelivered(ctx context.Context, id, sink string, now time.Time) error
	MarkFailed(ctx context.Context, id, sink string, next time.Time) error
	RelayAudit(ctx context.Context, limit int, fanOut func([]store.AuditRecord) ([]store.Event, error)) (int, error)
}

// Deliverer relays audit records into the outbox (Relay) and sends queued events to the
// project's sinks. Run it on every replica: RelayAudit hands each record to one replica, and
// ClaimEvents leases rows, so replicas share the work without sending an event twice at the
// same time.
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
	// Registerer receives latchkey_event_deliveries_total{result} and
	// latchkey_audit_records_total{type,outcome}; DefaultRegisterer when nil.
	Registerer prometheus.Registerer
	// RelayBatch is how many audit records one round moves into the outbox; default 256.
	RelayBatch int

	once       sync.Once
	deliveries *prometheus.CounterVec
	records    *prometheus.CounterVec
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
		if d.RelayBatch <= 0 {
			d.RelayBatch = 256
		}
		d.deliveries = counter(reg, prometheus.CounterOpts{
			Name: "latchkey_event_deliveries_total",
			Help: "Attempts to deliver audit events to event sinks, by result (delivered, failed, dropped).",
		}, "result")
		d.records = counter(reg, prometheus.CounterOpts{
			Name: "latchkey_audit_records_total",
			Help: "Audit records by type (docs/audit.md) and outcome (success, refused, failed, unknown), counted once when relayed to the event outbox.",
		}, "type", "outcome")
		// Each type has a series from the start (with its usual outcome), so rate() is 0
		// rather than absent.
		for _, t := range auditTypes {
			d.records.WithLabelValues(t.action, t.outcome)
		}
	})
}

// counter registers a counter vector, or reuses the one already registered under its name.
func counter(reg prometheus.Registerer, o prometheus.CounterOpts, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(o, labels)
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				c = existing
			}
		}
	}
	return c
}

// Records is latchkey_audit_records_total, for tests and dashboards.
func (d *Deliverer) Records() *prometheus.CounterVec {
	d.init()
	return d.records
}

// Relay moves audit records not yet relayed into the outbox, one outbox row per sink of their
// project, until none is left or ctx ends (store.Audit RelayAudit; every replica may run it).
// It returns how many records it moved. Records of a project no longer configured, or without
// sinks, are moved with no rows: nobody was subscribed when they were relayed.
func (d *Deliverer) Relay(ctx context.Context) (int, error) {
	d.init()
	snap := d.Config.Load()
	if snap == nil {
		// Without the configuration the sinks are unknown; relaying now would lose the records.
		return 0, nil
	}
	total := 0
	for ctx.Err() == nil {
		type count struct{ typ, outcome string }
		var counts []count
		n, err := d.Store.RelayAudit(ctx, d.RelayBatch, func(recs []store.AuditRecord) ([]store.Event, error) {
			counts = counts[:0]
			var out []store.Event
			for _, r := range recs {
				Normalize(&r)
				counts = append(counts, count{metricType(r.Action), metricOutcome(r.Outcome)})
				p := snap.Project(r.Project)
				if p == nil || len(p.EventSinks) == 0 {
					continue
				}
				typ := AuditType(r.Action)
				id := secret.NewID()
				body, err := Envelope(id, p, typ, r)
				if err != nil {
					return nil, err
				}
				for _, s := range p.EventSinks {
					if !s.Wants(typ) {
						continue
					}
					out = append(out, store.Event{
						ID: id, Project: p.Key, Sink: s.Name, Type: CloudEventType(typ), Data: body,
						CreatedAt: r.Time, NextAttempt: d.Now(),
					})
				}
			}
			return out, nil
		})
		if err != nil {
			return total, fmt.Errorf("events: relaying audit records: %w", err)
		}
		for _, c := range counts {
			d.records.WithLabelValues(c.typ, c.outcome).Inc()
		}
		total += n
		if n < d.RelayBatch {
			break
		}
	}
	return total, nil
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
	if _, err := d.Relay(ctx); err != nil {
		// The records stay pending for the next round; what is already queued still goes.
		d.Logger.Error(err, "cannot relay audit records to the outbox")
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
		return errors.New("the sink's URL cannot be used") // the parse error would quote it
	}
	h := req.Header
	h.Set("Content-Type", ContentType)
	h.Set("User-Agent", "Latchkey")
	now := d.Now()
	h.Set(IDHeader, e.ID)
	h.Set(TimestampHeader, strconv.FormatInt(now.Unix(), 10))
	h.Set(SignaturesHeader, SignStandard(sink.SigningKeys(), e.ID, now, e.Data))
	h.Set(SignatureHeader, Sign(sink.HMACKey, e.Data, now))
	if tracing.Enabled() {
		// A client of the caller's own may not be traced; the sink still gets the delivery's
		// trace context (a traced client replaces it with its own span's).
		tracing.Propagator.Inject(ctx, propagation.HeaderCarrier(h))
	}
	resp, err := d.Client.Do(req)
	if err != nil {
		return withoutURL(req.URL, err)
	}
	defer resp.Body.Close()
	// Draining lets the connection be reused; a failed drain costs only that.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("sink answered %d", resp.StatusCode)
	}
	return nil
}

// withoutURL is err of a request to u without u's path or query, which may carry the sink's
// credential (an incoming-webhook URL, "?token=…"), and is logged: the client's *url.Error
// quotes the whole URL, and says which address failed with scheme and host alone.
func withoutURL(u *url.URL, err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	inner := ue.Err
	if errors.As(inner, new(*url.Error)) {
		inner = errors.New("the request failed")
	}
	return fmt.Errorf("%s %s://%s: %w", ue.Op, u.Scheme, u.Host, inner)
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

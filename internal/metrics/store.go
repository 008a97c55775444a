package metrics

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/store"
)

// StoreOperation observes one store operation in latchkey_store_operation_duration_seconds
// {operation, result}: operation is the store method's name, result is ok, not_found, conflict
// or error. It has the shape of sqlstore.Observe's function, which calls it once per
// operation.
func (m *Metrics) StoreOperation(op string, took time.Duration, err error) {
	if m == nil {
		return
	}
	m.storeOps.WithLabelValues(op, result(err)).Observe(took.Seconds())
}

func result(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, store.ErrNotFound):
		return "not_found"
	case errors.Is(err, store.ErrConflict):
		return "conflict"
	default:
		return "error"
	}
}

// OutboxDepther is what the outbox collector reads.
type OutboxDepther interface {
	OutboxDepth(ctx context.Context) (int64, error)
}

// Outbox exports the depth of the event outbox (latchkey_event_outbox_depth) and whether the
// store answers (latchkey_store_up), both read from s when Prometheus scrapes, bounded by
// timeout (1s when zero). A scrape while the database is down reports store_up 0 and no depth.
func Outbox(reg prometheus.Registerer, s OutboxDepther, timeout time.Duration) error {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	if timeout <= 0 {
		timeout = time.Second
	}
	return reg.Register(&outbox{s: s, timeout: timeout})
}

var (
	outboxDepthDesc = prometheus.NewDesc("latchkey_event_outbox_depth",
		"Security events waiting in the outbox for delivery to event sinks.", nil, nil)
	storeUpDesc = prometheus.NewDesc("latchkey_store_up",
		"1 when the store answered the last scrape, 0 when it did not.", nil, nil)
)

type outbox struct {
	s       OutboxDepther
	timeout time.Duration
}

func (o *outbox) Describe(ch chan<- *prometheus.Desc) {
	ch <- outboxDepthDesc
	ch <- storeUpDesc
}

func (o *outbox) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	n, err := o.s.OutboxDepth(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(storeUpDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(storeUpDesc, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(outboxDepthDesc, prometheus.GaugeValue, float64(n))
}

// ConnectionCounter is what the connections collector reads.
type ConnectionCounter interface {
	CountConnections(ctx context.Context) ([]store.ConnectionCount, error)
}

// Connections exports latchkey_connections{connector, state}: people's connections by
// Connector and state (docs/connection-health.md), read from s when Prometheus scrapes, bounded
// by timeout (1s when zero). Connector is the key of a Connector some Project of h's
// configuration declares, or "other" (a Connector deleted while connections to it remain), so
// the series are bounded by what administrators declared times the four states. Every
// declared Connector has a series for every state, zero included.
func Connections(reg prometheus.Registerer, s ConnectionCounter, h *config.Holder, timeout time.Duration) error {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	if timeout <= 0 {
		timeout = time.Second
	}
	return reg.Register(&connections{s: s, h: h, timeout: timeout})
}

var connectionsDesc = prometheus.NewDesc("latchkey_connections",
	"People's connected accounts by Connector and state (active, expiring, needs_reconnect, revoked_upstream).",
	[]string{"connector", "state"}, nil)

type connections struct {
	s       ConnectionCounter
	h       *config.Holder
	timeout time.Duration
}

func (c *connections) Describe(ch chan<- *prometheus.Desc) { ch <- connectionsDesc }

func (c *connections) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	counts, err := c.s.CountConnections(ctx)
	if err != nil {
		return // latchkey_store_up says the store did not answer
	}
	declared := map[string]bool{}
	if c.h != nil {
		if snap := c.h.Load(); snap != nil {
			for _, p := range snap.Projects {
				for key := range p.Connectors {
					declared[key] = true
				}
			}
		}
	}
	type key struct{ connector, state string }
	sums := map[key]int64{}
	for k := range declared {
		for _, st := range store.ConnectionStates() {
			sums[key{k, string(st)}] = 0
		}
	}
	for _, n := range counts {
		conn, st := n.Connector, string(n.Status)
		if !declared[conn] {
			conn = "other"
		}
		if !slices.Contains(store.ConnectionStates(), n.Status) {
			st = "other"
		}
		sums[key{conn, st}] += n.Count
	}
	for k, n := range sums {
		ch <- prometheus.MustNewConstMetric(connectionsDesc, prometheus.GaugeValue, float64(n), k.connector, k.state)
	}
}

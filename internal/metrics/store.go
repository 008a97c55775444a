package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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

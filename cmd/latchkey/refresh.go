package main

import (
	"context"
	"flag"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/metrics"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/upstream"
)

// refreshOptions are the flags of the background refresher (docs/connection-health.md).
type refreshOptions struct {
	every, window, usedWithin time.Duration
	workers                   int
}

func (r *refreshOptions) register(fs *flag.FlagSet) {
	fs.DurationVar(&r.every, "connection-refresh-every", upstream.DefaultRefreshEvery,
		"how often (on average, jittered) each replica renews people's connections in use before they expire (0 disables; tokens are then refreshed only when an agent asks)")
	fs.DurationVar(&r.window, "connection-refresh-window", upstream.DefaultRefreshWindow,
		"a connection in use is renewed when its token expires within this")
	fs.DurationVar(&r.usedWithin, "connection-used-within", upstream.DefaultUsedWithin,
		"a connection is in use when an agent received its token this recently")
	fs.IntVar(&r.workers, "connection-refresh-workers", upstream.DefaultRefreshWorkers,
		"how many connections one replica renews at once")
}

type refreshStore interface {
	upstream.RefresherStore
	metrics.ConnectionCounter
	metrics.OutboxDepther
}

// setupRefresher adds the background refresher, and the metrics read from the store at scrape
// time: latchkey_connections, latchkey_event_outbox_depth and latchkey_store_up.
func setupRefresher(h host, o refreshOptions, v *upstream.Vault, st refreshStore, holder *config.Holder, log logr.Logger) error {
	if err := metrics.Outbox(prometheus.DefaultRegisterer, st, time.Second); err != nil {
		return err
	}
	if err := metrics.Connections(prometheus.DefaultRegisterer, st, holder, time.Second); err != nil {
		return err
	}
	if o.every <= 0 {
		return nil
	}
	return h.Add(&upstream.Refresher{Vault: v, Store: st, Config: holder, Every: o.every, Window: o.window,
		UsedWithin: o.usedWithin, Workers: o.workers, Log: log})
}

// auditRecorder appends the vault's records of connections changing state to the audit log,
// whence the relay hands them to the Project's event sinks.
func auditRecorder(st interface {
	AppendAudit(ctx context.Context, r store.AuditRecord) error
}, log logr.Logger) func(context.Context, store.AuditRecord) {
	return func(ctx context.Context, r store.AuditRecord) {
		events.Normalize(&r)
		if err := st.AppendAudit(ctx, r); err != nil {
			log.Error(err, "cannot append the audit record of a connection's state", "project", r.Project, "action", r.Action)
		}
	}
}

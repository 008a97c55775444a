package sqlstore_test

import (
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/metrics"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/webhook"
)

// Each consumer declares the part of the store it uses beside itself; the SQL store serves
// every one of them. (The controllers' Store is checked where cmd/latchkey passes the store
// in, to keep controller-runtime out of this package's tests.)
var (
	_ webhook.Store            = (*sqlstore.Store)(nil)
	_ upstream.ConnectionStore = (*sqlstore.Store)(nil)
	_ events.OutboxStore       = (*sqlstore.Store)(nil)
	_ events.EmitterStore      = (*sqlstore.Store)(nil)
	_ events.AuditReader       = (*sqlstore.Store)(nil)
	_ metrics.OutboxDepther    = (*sqlstore.Store)(nil)
)

package site

import (
	"context"

	"latchkey.dev/latchkey/internal/store"
)

// EnvStore is the part of the store Env's own methods use: Client reads registered clients,
// Record appends audit records (or queues the ones every token request writes). Env keeps it
// unexported, so no flow reaches the store through Env: each flow package declares the part it
// uses as its own Store interface and is constructed with it (docs/decisions/0070).
type EnvStore interface {
	GetClient(ctx context.Context, project, id string) (store.Client, error)
	AppendAudit(ctx context.Context, r store.AuditRecord) error
	QueueAudit(ctx context.Context, r store.AuditRecord) error
	AppendAuditBatched(ctx context.Context, r store.AuditRecord) error
}

// NewEnv returns e with the store its own methods use; the server calls it once, while it is
// built.
func NewEnv(s EnvStore, e *Env) *Env {
	e.store = s
	return e
}

package register

import (
	"context"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// Store is what dynamic client registration uses (RFC 7591 and RFC 7592): the clients it
// registers, reads, updates and deletes.
type Store interface {
	CreateClient(ctx context.Context, c store.Client) error
	GetClient(ctx context.Context, project, id string) (store.Client, error)
	UpdateClient(ctx context.Context, project, id string, fn func(store.Client) (store.Client, error)) (store.Client, error)
	DeleteClient(ctx context.Context, project, id string, now time.Time) error
}

package apikey

import (
	"context"
	"time"

	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/webhook/signin"
)

// Store is what pasting an API key uses: the signed-in person, the vault that seals the key,
// and the connection it saves (FinishConnection checks the person in the same transaction).
type Store interface {
	signin.SessionStore
	upstream.ConnectionStore
	FinishConnection(ctx context.Context, c store.Connection, since time.Time, check func(store.Person) error) (store.Connection, error)
}

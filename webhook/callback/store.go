package callback

import (
	"context"
	"time"

	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/webhook/signin"
)

// BeginStore is what starting a connection attempt stores (Begin): the callback state the
// service's redirect comes back to. The account page starts attempts with it.
type BeginStore interface {
	CreateCallbackState(ctx context.Context, s store.CallbackState) error
}

// SignOutStore is what ending a person's pending attempts on sign-out takes (EndOnSignOut).
type SignOutStore interface {
	EndCallbackStates(ctx context.Context, project, subject string) (int64, error)
}

// Store is what the upstream OAuth callback uses: the signed-in person, callback state from
// start to finish, the person it was started for, the connection it saves, and the vault that
// seals its tokens. Organisation-shared connections (docs/shared-connections.md) take their
// start codes and save through SaveSharedConnection.
type Store interface {
	signin.SessionStore
	upstream.ConnectionStore
	BeginStore
	GetCallbackState(ctx context.Context, stateHash []byte, now time.Time) (store.CallbackState, error)
	SetConfirmHash(ctx context.Context, stateHash, confirmHash []byte, now time.Time) error
	ConsumeCallbackState(ctx context.Context, stateHash []byte, now time.Time, check func(store.CallbackState) error) (store.CallbackState, error)
	FinishConnection(ctx context.Context, c store.Connection, since time.Time, check func(store.Person) error) (store.Connection, error)
	TakeSharedStart(ctx context.Context, codeHash []byte, now time.Time) (store.SharedStart, error)
	SaveSharedConnection(ctx context.Context, c store.Connection) (store.Connection, []store.Connection, error)
}

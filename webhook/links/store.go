package links

import (
	"context"
	"time"

	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/apikey"
	"latchkey.dev/latchkey/webhook/callback"
	"latchkey.dev/latchkey/webhook/signin"
)

// OpenStore is what opening a link for token exchange takes (Open).
type OpenStore interface {
	OpenLink(ctx context.Context, l store.Link, now time.Time) (store.Link, bool, error)
}

// HookStore is what finishing a link when its connection is saved takes (Hook).
type HookStore interface {
	GetLink(ctx context.Context, id string) (store.Link, error)
	CloseLink(ctx context.Context, id string, state store.LinkState, now time.Time) error
	AllowAgent(ctx context.Context, p store.AgentPermission) error
}

// Store is what the link page uses: the signed-in person, the link behind a code, the person's
// connections the agent could be allowed, the connection attempts and pasted keys it starts,
// and finishing the link.
type Store interface {
	signin.SessionStore
	callback.BeginStore
	apikey.Store
	HookStore
	GetLinkByCode(ctx context.Context, codeHash []byte, now time.Time) (store.Link, error)
	ListConnections(ctx context.Context, project, subject string) ([]store.Connection, error)
	FindPermission(ctx context.Context, project, subject, connector, clientID string) (store.AgentPermission, error)
}

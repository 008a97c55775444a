package exchange

import (
	"context"

	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/webhook/links"
)

// Store is what token exchange uses (RFC 8693): the subject token, the person's connections the
// agent may use, the vault that hands out their upstream tokens, and the connect links it opens
// when it refuses.
type Store interface {
	upstream.ConnectionStore
	links.OpenStore
	// GetToken reads an actor token; RecordConnectionActor remembers who acted with a
	// connection (docs/delegation.md).
	GetToken(ctx context.Context, hash []byte) (store.Token, error)
	RecordConnectionActor(ctx context.Context, a store.ConnectionActor) error
	SubjectAccess(ctx context.Context, hash []byte, connector string) (store.Token, store.AgentAccess, error)
	AgentAccess(ctx context.Context, project, subject, connector, clientID string) (store.AgentAccess, error)
	// ListConnections with store.SharedSubject reads an Organisation connector's shared
	// connection (docs/shared-connections.md).
	ListConnections(ctx context.Context, project, subject string) ([]store.Connection, error)
}

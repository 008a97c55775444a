package exchange

import (
	"context"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/webhook/site"

	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/webhook/links"
)

// Approvals starts an approval request when an exchange asks for authorization_details the
// subject token does not carry (ciba.Approvals, docs/approvals.md#from-a-token-exchange).
type Approvals interface {
	// Asks reports whether client may have approvals started (ciba.Declared).
	Asks(p *config.Project, client *site.Client) bool
	// StartForExchange asks the person subject and returns the refusal to send:
	// approval_required with its auth_req_id, or why none was started.
	StartForExchange(ctx context.Context, p *config.Project, client *site.Client, subject string, scopes []string, details string, now time.Time) error
}

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
	// GetPerson reads the person's email for the project's AccessPolicies, only when it has any.
	GetPerson(ctx context.Context, project, id string) (store.Person, error)
}

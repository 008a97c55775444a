package account

import (
	"context"
	"time"

	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/webhook/callback"
	"latchkey.dev/latchkey/webhook/signin"
)

// Store is what the account page uses: the signed-in person; their connections, agent
// permissions and consents with the clients they name; the vault that revokes upstream tokens
// on disconnect; connection attempts it starts; and the person's passkeys with the ceremony
// that enrols one (docs/passkeys.md).
type Store interface {
	signin.SessionStore
	signin.CeremonyStore
	upstream.ConnectionStore
	callback.BeginStore
	GetClient(ctx context.Context, project, id string) (store.Client, error)
	ListConnections(ctx context.Context, project, subject string) ([]store.Connection, error)
	DeleteConnection(ctx context.Context, project, id string) error
	ListPermissions(ctx context.Context, project, subject string) ([]store.AgentPermission, error)
	DeletePermission(ctx context.Context, project, subject, connector, clientID string) error
	// Several accounts per connector (docs/several-accounts.md).
	SetDefaultConnection(ctx context.Context, project, subject, id string) error
	DisallowAgent(ctx context.Context, project, subject, connectionID, clientID string) error
	ListGrants(ctx context.Context, project, subject string) ([]store.Grant, error)
	// RevokeApp ends the person's consent to an app, its tokens and its permissions at once.
	RevokeApp(ctx context.Context, project, subject, clientID string, now time.Time) error
	AddPasskey(ctx context.Context, k store.Passkey) error
	ListPasskeys(ctx context.Context, project, subject string) ([]store.Passkey, error)
	DeletePasskey(ctx context.Context, project, subject string, credentialID []byte) error
	// ListApprovals counts the requests waiting for the person (docs/approvals.md).
	ListApprovals(ctx context.Context, project, subject string, now time.Time) ([]store.Approval, error)
}

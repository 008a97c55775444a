package consent

import (
	"context"
	"time"

	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/oauth"
	"latchkey.dev/latchkey/webhook/signin"
)

// Store is what the authorization endpoint uses: the signed-in person, the person's consent and
// the code it issues, and pushed authorization requests (RFC 9126) with the client
// authentication and DPoP proofs that come with them.
type Store interface {
	signin.SessionStore
	oauth.ReplayStore
	GetGrant(ctx context.Context, project, subject, clientID string) (store.Grant, error)
	UpsertGrant(ctx context.Context, g store.Grant) error
	CreateAuthCode(ctx context.Context, c store.AuthCode) error
	CreatePushedRequest(ctx context.Context, p store.PushedRequest) error
	ConsumePushedRequest(ctx context.Context, hash []byte, now time.Time, check func(store.PushedRequest) error) (store.PushedRequest, error)
}

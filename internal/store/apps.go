package store

import (
	"context"
	"time"
)

// Apps ends a person's use of an app as one change: what the account page's Revoke and the
// admin API's grant deletion do.
type Apps interface {
	// RevokeApp withdraws the person's consent to the client, revokes every token the client
	// holds for the person, and deletes every permission the client had to use the person's
	// connected accounts (an app authorised again must be allowed again), in one transaction:
	// nothing of it is left half-done. It returns ErrNotFound, having changed nothing, when
	// there was no grant, no live token and no permission.
	RevokeApp(ctx context.Context, project, subject, clientID string, now time.Time) error
}

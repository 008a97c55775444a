package proxy

import (
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/exchange"
	"latchkey.dev/latchkey/webhook/oauth"
)

// Store is what the token proxy uses: the agent's access token and its DPoP proof's jti
// (oauth.ResourceStore), and everything token exchange reads to decide a use of a person's
// connection (exchange.Store), since the proxy decides through it; and the store's revision,
// which ends the decisions it keeps.
type Store interface {
	oauth.ResourceStore
	exchange.Store
	// Revision ends the decisions the proxy keeps (cache.go).
	store.Revisions
}

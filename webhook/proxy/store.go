package proxy

import (
	"latchkey.dev/latchkey/webhook/exchange"
	"latchkey.dev/latchkey/webhook/oauth"
)

// Store is what the token proxy uses: the agent's access token and its DPoP proof's jti
// (oauth.ResourceStore), and everything token exchange reads to decide a use of a person's
// connection (exchange.Store), since the proxy decides through it.
type Store interface {
	oauth.ResourceStore
	exchange.Store
}

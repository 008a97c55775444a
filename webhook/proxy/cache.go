package proxy

import (
	"crypto/sha256"
	"sync"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/store"
)

// The decision cache (docs/decisions/0082). Deciding a call reads the agent's access token,
// its client, the person with their connections to the service and the agent's permission, and
// opens the person's sealed upstream token: most of what a proxied call costs Latchkey beyond
// forwarding. An agent calling a service many times a minute gets the same answer each time
// until something changes, so the answer is kept, and kept exact:
//
//   - it is kept with the store's revision read before deciding (store.Revisions), which every
//     write that could withdraw a permission moves after it commits, on every replica: a
//     revoked token, grant or permission, a connection disconnected, replaced or found broken,
//     a client removed, a person signed out everywhere or removed all move it, and the next
//     call decides afresh;
//   - it is kept for one compiled Project: a config reload (Connector rules, clients, sign-in
//     methods) compiles a new one, and the next call decides afresh;
//   - it ends when the access token expires, and when the upstream token is due for refresh
//     (the vault's expirySkew before it expires), so the refresh runs through token exchange
//     exactly as without the cache;
//   - a Project with AccessPolicies is never cached: a policy sees each call's time;
//   - how the call presents the token (Bearer, or DPoP with a fresh proof of the bound key for
//     this call, whose jti is recorded) is checked on every call, cached or not, and so are the
//     Connector's rules for the call's method and path.
//
// Only allowed calls are kept: a refusal always runs the whole decision, and is audited.

// maxCached bounds the cache; past it, an arbitrary tenth of it is dropped.
const maxCached = 10000

// refreshAhead matches the vault's expirySkew: an upstream token that expires within it is
// refreshed when used, so a cached decision ends then.
const refreshAhead = 30 * time.Second

type cacheKey struct {
	project   *config.Project
	connector string
	token     [sha256.Size]byte
}

type cached struct {
	revision int64
	until    time.Time // zero: only the revision and the project end it
	token    store.Token
	pass     Pass // Path unset: it is the call's
}

type decisionCache struct {
	mu sync.RWMutex
	m  map[cacheKey]cached
}

// get returns the decision kept for k if it was made at revision and has not ended at now.
func (c *decisionCache) get(k cacheKey, revision int64, now time.Time) (cached, bool) {
	c.mu.RLock()
	e, ok := c.m[k]
	c.mu.RUnlock()
	if !ok || e.revision != revision || (!e.until.IsZero() && !now.Before(e.until)) {
		return cached{}, false
	}
	return e, true
}

func (c *decisionCache) put(k cacheKey, e cached) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[cacheKey]cached{}
	}
	if len(c.m) >= maxCached {
		n := 0
		for old := range c.m {
			delete(c.m, old)
			if n++; n >= maxCached/10 {
				break
			}
		}
	}
	c.m[k] = e
}

// until is when a decision on tok handing out an upstream token expiring at upstream ends.
func until(tok store.Token, upstream time.Time) time.Time {
	u := tok.ExpiresAt
	if !upstream.IsZero() {
		if due := upstream.Add(-refreshAhead); u.IsZero() || due.Before(u) {
			u = due
		}
	}
	return u
}

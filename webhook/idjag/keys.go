package idjag

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/jwks"
)

// Key fetching bounds. A trusted issuer's keys are kept keysTTL; an assertion signed with a key
// id the cached set lacks (the issuer rotated) fetches again, at most once per refetchEvery per
// issuer, so a stream of made-up key ids cannot turn the token endpoint into a request pump.
const (
	keysTTL      = 15 * time.Minute
	refetchEvery = time.Minute
	fetchTimeout = 5 * time.Second
	maxJWKSBytes = 256 << 10
)

var errNoKey = errors.New("no key of the issuer matches the assertion's key id")

// Keys hands out the verification keys of trusted issuers: the inline set, or the jwksURI's,
// fetched and cached by internal/jwks through the address guard with the Project's allowed
// networks.
type Keys struct {
	now      func() time.Time
	mu       sync.Mutex
	fetchers map[string]*jwks.Fetcher // by allowed networks
}

// NewKeys returns an empty cache on the clock now.
func NewKeys(now func() time.Time) *Keys {
	return &Keys{now: now, fetchers: map[string]*jwks.Fetcher{}}
}

// Key returns the issuer's key with the key id (any key with the algorithm when kid is empty
// and the set holds exactly one such key).
func (k *Keys) Key(ctx context.Context, iss *config.AssertionIssuer, kid, alg string) (*jose.JSONWebKey, error) {
	if iss.JWKS != nil {
		return pick(iss.JWKS, kid, alg)
	}
	f := k.fetcher(iss)
	set, err := f.Get(ctx, iss.JWKSURI)
	if err != nil {
		return nil, fmt.Errorf("the keys of %s: %w", iss.Issuer, err)
	}
	key, err := pick(set, kid, alg)
	if errors.Is(err, errNoKey) {
		if set, ferr := f.Refresh(ctx, iss.JWKSURI); ferr == nil {
			key, err = pick(set, kid, alg)
		}
	}
	return key, err
}

// fetcher is the cache for the issuer's allowed networks: a set fetched under one Project's
// networks is never handed to another Project whose guard would not have reached it.
func (k *Keys) fetcher(iss *config.AssertionIssuer) *jwks.Fetcher {
	id := fmt.Sprint(iss.AllowedNetworks)
	k.mu.Lock()
	defer k.mu.Unlock()
	f := k.fetchers[id]
	if f == nil {
		f = jwks.New(jwks.Options{
			Timeout: fetchTimeout, MaxBytes: maxJWKSBytes, TTL: keysTTL, MinRefresh: refetchEvery,
			Allowed: iss.AllowedNetworks, AllowHTTP: true, Now: k.now,
		})
		k.fetchers[id] = f
	}
	return f
}

// pick finds the one public verification key for kid and alg (jwks.Select).
func pick(set *jose.JSONWebKeySet, kid, alg string) (*jose.JSONWebKey, error) {
	found := jwks.Select(set, kid, alg)
	if len(found) != 1 {
		return nil, errNoKey
	}
	return &found[0], nil
}

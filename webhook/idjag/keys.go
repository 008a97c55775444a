package idjag

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/netguard"
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
// fetched through the address guard and cached.
type Keys struct {
	now     func() time.Time
	client  func(allowed netguard.Allowed) *http.Client
	mu      sync.Mutex
	entries map[string]*keyEntry // by jwksURI + allowed networks
}

type keyEntry struct {
	mu      sync.Mutex // held while fetching, so concurrent misses fetch once
	set     *jose.JSONWebKeySet
	fetched time.Time
	tried   time.Time
}

// NewKeys returns an empty cache on the clock now.
func NewKeys(now func() time.Time) *Keys {
	return &Keys{now: now, client: guardedClient, entries: map[string]*keyEntry{}}
}

// guardedClient dials only what allowed permits, never through a proxy, and keeps no idle
// connection: a key set is fetched at most once a minute per issuer, and a client made per
// fetch must not leave connections behind.
func guardedClient(allowed netguard.Allowed) *http.Client {
	return &http.Client{
		Timeout: fetchTimeout,
		Transport: &http.Transport{
			DialContext:         netguard.Dialer(fetchTimeout, allowed).DialContext,
			TLSHandshakeTimeout: fetchTimeout,
			DisableKeepAlives:   true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Key returns the issuer's key with the key id (any key with the algorithm when kid is empty
// and the set holds exactly one such key).
func (k *Keys) Key(ctx context.Context, iss *config.AssertionIssuer, kid, alg string) (*jose.JSONWebKey, error) {
	if iss.JWKS != nil {
		return pick(iss.JWKS, kid, alg)
	}
	e := k.entry(iss)
	e.mu.Lock()
	defer e.mu.Unlock()
	now := k.now()
	if e.set == nil || now.Sub(e.fetched) > keysTTL {
		if err := k.fetch(ctx, iss, e, now); err != nil && e.set == nil {
			return nil, err
		}
	}
	key, err := pick(e.set, kid, alg)
	if errors.Is(err, errNoKey) && now.Sub(e.tried) >= refetchEvery {
		if ferr := k.fetch(ctx, iss, e, now); ferr != nil {
			return nil, err
		}
		key, err = pick(e.set, kid, alg)
	}
	return key, err
}

func (k *Keys) entry(iss *config.AssertionIssuer) *keyEntry {
	id := iss.JWKSURI + " " + fmt.Sprint(iss.AllowedNetworks)
	k.mu.Lock()
	defer k.mu.Unlock()
	e := k.entries[id]
	if e == nil {
		e = &keyEntry{}
		k.entries[id] = e
	}
	return e
}

// fetch reads the issuer's JWKS into e; a failure keeps the set it had.
func (k *Keys) fetch(ctx context.Context, iss *config.AssertionIssuer, e *keyEntry, now time.Time) error {
	e.tried = now
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, iss.JWKSURI, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := k.client(netguard.Allowed(iss.AllowedNetworks)).Do(req)
	if err != nil {
		return fmt.Errorf("fetching the keys of %s: %w", iss.Issuer, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetching the keys of %s: %s answered %d", iss.Issuer, iss.JWKSURI, resp.StatusCode)
	}
	body, err := netguard.ReadAtMost(resp.Body, maxJWKSBytes)
	if errors.Is(err, netguard.ErrTooLarge) {
		return fmt.Errorf("the keys of %s exceed %d bytes", iss.Issuer, maxJWKSBytes)
	}
	if err != nil {
		return fmt.Errorf("fetching the keys of %s: %w", iss.Issuer, err)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(body, &set); err != nil {
		return fmt.Errorf("the keys of %s do not parse: %w", iss.Issuer, err)
	}
	e.set, e.fetched = &set, now
	return nil
}

// pick finds the public verification key for kid and alg. Private keys in a set are ignored,
// and a key that names another algorithm is not used for this one.
func pick(set *jose.JSONWebKeySet, kid, alg string) (*jose.JSONWebKey, error) {
	var found []*jose.JSONWebKey
	for i := range set.Keys {
		key := &set.Keys[i]
		if !key.Valid() || !key.IsPublic() || (key.Use != "" && key.Use != "sig") || (key.Algorithm != "" && key.Algorithm != alg) {
			continue
		}
		if kid != "" && key.KeyID != kid {
			continue
		}
		found = append(found, key)
	}
	if len(found) != 1 {
		return nil, errNoKey
	}
	return found[0], nil
}

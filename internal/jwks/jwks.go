// Package jwks fetches, keeps and picks from the JSON Web Key Sets whose keys verify what others
// sign for Latchkey: the keys clients publish at a jwks_uri for private_key_jwt client
// authentication (RFC 7523 §2.2), a trusted identity provider's keys for ID-JAGs, and the
// sign-in provider's keys for ID tokens and logout tokens. It is the one place that does so
// (docs/decisions/0071-one-jose-stack.md).
//
// A client's URL is the client's choice (a tenant's OAuthClient, or a client ID metadata
// document anyone can write), so by default every fetch goes through the address guard
// (internal/netguard): public addresses only (Options.Allowed adds the Project's own networks),
// no proxy, no redirects, a size and time limit, https only.
//
// Sets are cached for TTL. A signer rotates keys by publishing the new one and signing with it:
// a JWS naming a key id the cached set lacks makes the caller ask for Refresh, which fetches
// again at most once per MinRefresh per URL, so JWSs with made-up key ids cannot turn the server
// into a request generator.
package jwks

import (
	"cmp"
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"golang.org/x/sync/singleflight"

	"latchkey.dev/latchkey/internal/netguard"
	"latchkey.dev/latchkey/internal/trust"
)

// Defaults of Options.
const (
	DefaultTimeout    = 5 * time.Second
	DefaultMaxBytes   = 64 << 10
	DefaultTTL        = 5 * time.Minute
	DefaultMinRefresh = time.Minute
	DefaultMaxEntries = 10000
	// MaxKeys bounds a set: each key may be tried against an assertion without a kid.
	MaxKeys = 16
)

// Options configure a Fetcher; the zero value is ready for production.
type Options struct {
	Timeout    time.Duration
	MaxBytes   int64
	TTL        time.Duration
	MinRefresh time.Duration
	MaxEntries int
	// MaxKeys bounds the usable keys of a set; zero means MaxKeys.
	MaxKeys int
	// AllowLoopback lets tests serve sets on 127.0.0.1; never in production.
	AllowLoopback bool
	// Allowed are networks the guard lets fetches reach besides public addresses: a Project's
	// spec.upstreamNetwork.allowedCIDRs for the keys of an issuer it trusts.
	Allowed netguard.Allowed
	// AllowHTTP accepts http URLs: for URLs an administrator wrote, which the CRDs allow over
	// http only to a loopback host. Never for a client's URL.
	AllowHTTP bool
	// Client, when set, fetches instead of the guarded client: for the sign-in provider, whose
	// discovery document the administrator named and which is reached like the rest of it.
	Client *http.Client
	// RootCAs, when set, replaces the trusted roots (tests trust their own server); otherwise
	// they are trust.Roots: the system's, plus the operator's --ca-bundle.
	RootCAs *x509.CertPool
	Now     func() time.Time
}

// Error is a problem with a client's key set: the client's mistake. Reason is safe to show.
type Error struct{ Reason string }

func (e *Error) Error() string { return "client key set: " + e.Reason }

func problem(format string, args ...any) *Error { return &Error{Reason: fmt.Sprintf(format, args...)} }

// Fetcher fetches and caches key sets by URL. It is safe for concurrent use.
type Fetcher struct {
	o      Options
	client *http.Client
	flight singleflight.Group

	mu    sync.Mutex
	cache map[string]entry
}

type entry struct {
	set     *jose.JSONWebKeySet
	err     error
	fetched time.Time
	expires time.Time
}

// New returns a Fetcher.
func New(o Options) *Fetcher {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	set(&o.Timeout, DefaultTimeout)
	set(&o.TTL, DefaultTTL)
	set(&o.MinRefresh, DefaultMinRefresh)
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = MaxKeys
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	client := o.Client
	if client == nil {
		allowed := slices.Clone(o.Allowed)
		if o.AllowLoopback {
			allowed = append(allowed, netguard.Loopback...)
		}
		// Key sets are fetched like client metadata documents: guarded, and trusting the
		// operator's --ca-bundle besides the system's roots (internal/trust).
		client = netguard.Client(o.Timeout, allowed, cmp.Or(o.RootCAs, trust.Roots()))
	}
	return &Fetcher{o: o, client: client, cache: map[string]entry{}}
}

// Get returns the set at uri, cached for TTL (a failure for MinRefresh).
func (f *Fetcher) Get(ctx context.Context, uri string) (*jose.JSONWebKeySet, error) {
	if e, ok := f.cached(uri); ok && f.o.Now().Before(e.expires) {
		return e.set, e.err
	}
	return f.fetchShared(ctx, uri)
}

// Refresh fetches the set at uri again, unless it was fetched less than MinRefresh ago, and
// returns what it then holds. Callers ask when an assertion names a key id the set lacks.
func (f *Fetcher) Refresh(ctx context.Context, uri string) (*jose.JSONWebKeySet, error) {
	if e, ok := f.cached(uri); ok && f.o.Now().Before(e.fetched.Add(f.o.MinRefresh)) {
		return e.set, e.err
	}
	return f.fetchShared(ctx, uri)
}

func (f *Fetcher) cached(uri string) (entry, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.cache[uri]
	return e, ok
}

func (f *Fetcher) fetchShared(ctx context.Context, uri string) (*jose.JSONWebKeySet, error) {
	ch := f.flight.DoChan(uri, func() (any, error) {
		set, err := f.fetch(context.WithoutCancel(ctx), uri)
		now := f.o.Now()
		e := entry{set: set, err: err, fetched: now, expires: now.Add(f.o.TTL)}
		if err != nil {
			e.expires = now.Add(f.o.MinRefresh)
			if old, ok := f.cached(uri); ok && old.err == nil && now.Before(old.expires) {
				// A failed refresh keeps the set that still holds.
				e.set, e.err, e.expires = old.set, nil, old.expires
			}
		}
		f.store(uri, e)
		return e, nil
	})
	select {
	case r := <-ch:
		e := r.Val.(entry)
		return e.set, e.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *Fetcher) store(uri string, e entry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.cache[uri]; !ok && len(f.cache) >= f.o.MaxEntries {
		for k := range f.cache {
			delete(f.cache, k)
			if len(f.cache) < f.o.MaxEntries {
				break
			}
		}
	}
	f.cache[uri] = e
}

func (f *Fetcher) fetch(ctx context.Context, uri string) (*jose.JSONWebKeySet, error) {
	if !strings.HasPrefix(uri, "https://") && !(f.o.AllowHTTP && strings.HasPrefix(uri, "http://")) &&
		!(f.o.AllowLoopback && strings.HasPrefix(uri, "http://127.0.0.1")) {
		return nil, problem("jwks_uri must be an https URL")
	}
	ctx, cancel := context.WithTimeout(ctx, f.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, uri, nil)
	if err != nil {
		return nil, problem("jwks_uri is not a URL that can be fetched")
	}
	req.Header.Set("Accept", "application/json, application/jwk-set+json")
	resp, err := f.client.Do(req)
	if err != nil {
		if errors.Is(err, netguard.ErrNotPublic) {
			return nil, problem("jwks_uri's host does not resolve to a public address")
		}
		return nil, problem("the key set could not be fetched")
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, problem("fetching the key set answered HTTP %d, not 200", resp.StatusCode)
	}
	body, err := netguard.ReadAtMost(resp.Body, f.o.MaxBytes)
	if errors.Is(err, netguard.ErrTooLarge) {
		return nil, problem("the key set is larger than %d bytes", f.o.MaxBytes)
	}
	if err != nil {
		return nil, problem("the key set could not be read")
	}
	return parse(body, f.o.MaxKeys)
}

// Parse reads a JSON Web Key Set and keeps what can verify a client assertion: public signing
// keys (EC, RSA of 2048 bits or more, Ed25519). A set holding private key material is refused
// whole: whoever published it has leaked it.
func Parse(raw []byte) (*jose.JSONWebKeySet, error) {
	return parse(raw, MaxKeys)
}

func parse(raw []byte, maxKeys int) (*jose.JSONWebKeySet, error) {
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(raw, &set); err != nil {
		return nil, problem("the key set is not a JSON Web Key Set")
	}
	out := &jose.JSONWebKeySet{}
	for _, k := range set.Keys {
		if !k.IsPublic() {
			return nil, problem("the key set holds private key material")
		}
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		if !k.Valid() {
			continue
		}
		if pub, ok := k.Key.(*rsa.PublicKey); ok && pub.N.BitLen() < 2048 {
			continue
		}
		out.Keys = append(out.Keys, k)
	}
	if len(out.Keys) == 0 {
		return nil, problem("the key set holds no usable signing key")
	}
	if len(out.Keys) > maxKeys {
		return nil, problem("the key set holds more than %d keys", maxKeys)
	}
	return out, nil
}

// Select returns the keys of set that may verify a JWS whose header names kid and alg: valid
// public keys for signatures (use "sig" or none) that declare alg or no algorithm, with key id
// kid, or every such key when kid is "". A key never verifies for an algorithm other than the
// one it declares (RFC 7517 §4.4), and private key material is never used.
func Select(set *jose.JSONWebKeySet, kid, alg string) []jose.JSONWebKey {
	if set == nil {
		return nil
	}
	var out []jose.JSONWebKey
	for _, k := range set.Keys {
		if !k.Valid() || !k.IsPublic() || (k.Use != "" && k.Use != "sig") || (k.Algorithm != "" && k.Algorithm != alg) {
			continue
		}
		if kid != "" && k.KeyID != kid {
			continue
		}
		out = append(out, k)
	}
	return out
}

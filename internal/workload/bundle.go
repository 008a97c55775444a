package workload

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/spiffe/go-spiffe/v2/bundle/jwtbundle"
	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"golang.org/x/sync/singleflight"

	"latchkey.dev/latchkey/internal/netguard"
	"latchkey.dev/latchkey/internal/trust"
)

// Bounds on fetching a SPIFFE bundle endpoint (https_web profile). The endpoint's
// spiffe_refresh_hint says how often to fetch again; it is kept between MinRefresh (a hint of
// seconds would turn every replica into a request generator) and MaxRefresh (a hint of days
// would keep a removed key trusted for days), and DefaultRefresh applies without one.
const (
	DefaultBundleTimeout = 5 * time.Second
	MaxBundleBytes       = 64 << 10
	MinRefresh           = time.Minute
	MaxRefresh           = time.Hour
	DefaultRefresh       = 5 * time.Minute
	// RetryAfter is how soon a failed fetch is tried again.
	RetryAfter = time.Minute
	// MaxStale is how long the last good bundle outlives failed refreshes: an endpoint made
	// unreachable must not keep a key trusted for ever after its trust domain removed it.
	MaxStale = 24 * time.Hour
	// MaxJWTKeys bounds the JWT-SVID keys of a bundle; a trust domain rotating keys holds two
	// or three.
	MaxJWTKeys = 32
)

// BundleError is a problem with a trust bundle or fetching it: what the OAuthClient's
// conditions say. It names no address the guard refused beyond the URL its owner wrote.
type BundleError struct{ Reason string }

func (e *BundleError) Error() string { return e.Reason }

func bundleErr(format string, args ...any) *BundleError {
	return &BundleError{Reason: fmt.Sprintf(format, args...)}
}

// ParseBundle reads a SPIFFE bundle of trust domain td and returns its JWT-SVID keys (those
// with "use": "jwt-svid") and the bundle's spiffe_refresh_hint (0 without one). A bundle
// without a JWT-SVID key, with more than MaxJWTKeys, or holding a key that is not a public EC,
// Ed25519 or RSA (2048 bits or more) key is refused whole: a private key published as a trust
// anchor has leaked.
func ParseBundle(td spiffeid.TrustDomain, raw []byte) (*jwtbundle.Bundle, time.Duration, error) {
	b, err := spiffebundle.Parse(td, raw)
	if err != nil {
		return nil, 0, bundleErr("%v", err)
	}
	jb := b.JWTBundle()
	keys := jb.JWTAuthorities()
	if len(keys) == 0 {
		return nil, 0, bundleErr("the bundle holds no JWT-SVID key (a key with \"use\": \"jwt-svid\")")
	}
	if len(keys) > MaxJWTKeys {
		return nil, 0, bundleErr("the bundle holds more than %d JWT-SVID keys", MaxJWTKeys)
	}
	for kid, k := range keys {
		switch pub := k.(type) {
		case *ecdsa.PublicKey, ed25519.PublicKey:
		case *rsa.PublicKey:
			if pub.N.BitLen() < 2048 {
				return nil, 0, bundleErr("key %q is RSA of fewer than 2048 bits", kid)
			}
		default:
			return nil, 0, bundleErr("key %q is not a public EC, RSA or Ed25519 key", kid)
		}
	}
	hint, _ := b.RefreshHint()
	return jb, hint, nil
}

// BundleOptions configure Bundles; the zero value is ready for production.
type BundleOptions struct {
	Timeout  time.Duration
	MaxBytes int64
	// AllowLoopback lets tests serve bundles on 127.0.0.1; never in production.
	AllowLoopback bool
	// RootCAs, when set, replaces the trusted roots (tests trust their own server); otherwise
	// trust.Roots: the system's, plus the operator's --ca-bundle.
	RootCAs *x509.CertPool
	Now     func() time.Time
	Log     logr.Logger
}

// BundleState is what is known of one bundle endpoint.
type BundleState struct {
	// Bundle is the last good bundle; nil when none was fetched, or it is older than MaxStale.
	Bundle *jwtbundle.Bundle
	// Fetched is when Bundle was fetched.
	Fetched time.Time
	// Next is when the endpoint is fetched again.
	Next time.Time
	// Err is why the last fetch failed; nil when it succeeded. With a Bundle, that bundle is
	// stale: kept, and said so.
	Err error
}

// Bundles fetches SPIFFE bundle endpoints for the controllers, which compile the keys into the
// configuration: handlers never fetch. Every fetch goes through the address guard
// (internal/netguard): public addresses, or the networks the caller allows (the Project's
// spec.upstreamNetwork.allowedCIDRs), no proxy, no redirect, https only, with a timeout and a
// size limit. It is safe for concurrent use.
type Bundles struct {
	o      BundleOptions
	flight singleflight.Group

	mu    sync.Mutex
	cache map[string]*bundleEntry
}

type bundleEntry struct {
	state BundleState
	used  time.Time
}

// NewBundles returns Bundles with o's defaults filled in.
func NewBundles(o BundleOptions) *Bundles {
	if o.Timeout <= 0 {
		o.Timeout = DefaultBundleTimeout
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = MaxBundleBytes
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
	}
	return &Bundles{o: o, cache: map[string]*bundleEntry{}}
}

func bundleKey(url string, td spiffeid.TrustDomain, allowed netguard.Allowed) string {
	parts := []string{url, td.Name()}
	for _, p := range allowed {
		parts = append(parts, p.String())
	}
	return strings.Join(parts, " ")
}

// Get returns the state of the endpoint at url for trust domain td, fetching it first when it
// is due (never fetched, or past its Next). Concurrent callers share one fetch.
func (b *Bundles) Get(ctx context.Context, url string, td spiffeid.TrustDomain, allowed netguard.Allowed) BundleState {
	key := bundleKey(url, td, allowed)
	now := b.o.Now()
	b.mu.Lock()
	e, ok := b.cache[key]
	if ok {
		e.used = now
	}
	b.mu.Unlock()
	if ok && now.Before(e.state.Next) {
		return e.state
	}
	v, _, _ := b.flight.Do(key, func() (any, error) {
		return b.refresh(context.WithoutCancel(ctx), key, url, td, allowed), nil
	})
	return v.(BundleState)
}

// Until is how long until t on the fetcher's clock: when a BundleState's Next comes.
func (b *Bundles) Until(t time.Time) time.Duration { return t.Sub(b.o.Now()) }

// Due reports whether an endpoint asked for within the last MaxRefresh is due for a fetch:
// the compiler then compiles again, which fetches it. Endpoints nobody asked for since are
// forgotten.
func (b *Bundles) Due() bool {
	now := b.o.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	due := false
	for k, e := range b.cache {
		if now.Sub(e.used) > 2*MaxRefresh {
			delete(b.cache, k)
			continue
		}
		due = due || !now.Before(e.state.Next)
	}
	return due
}

func (b *Bundles) refresh(ctx context.Context, key, url string, td spiffeid.TrustDomain, allowed netguard.Allowed) BundleState {
	jb, hint, err := b.fetch(ctx, url, td, allowed)
	now := b.o.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	var st BundleState
	if old, ok := b.cache[key]; ok {
		st = old.state
	}
	if err == nil {
		st = BundleState{Bundle: jb, Fetched: now, Next: now.Add(clampRefresh(hint))}
	} else {
		st.Err, st.Next = err, now.Add(RetryAfter)
		if st.Bundle != nil && now.Sub(st.Fetched) > MaxStale {
			st.Bundle = nil
		}
		b.o.Log.Info("fetching a SPIFFE bundle endpoint failed", "url", url, "trustDomain", td.Name(),
			"error", err.Error(), "keptBundleFrom", st.Fetched, "kept", st.Bundle != nil)
	}
	b.cache[key] = &bundleEntry{state: st, used: now}
	return st
}

func clampRefresh(hint time.Duration) time.Duration {
	if hint <= 0 {
		return DefaultRefresh
	}
	return min(max(hint, MinRefresh), MaxRefresh)
}

func (b *Bundles) fetch(ctx context.Context, url string, td spiffeid.TrustDomain, allowed netguard.Allowed) (*jwtbundle.Bundle, time.Duration, error) {
	if !strings.HasPrefix(url, "https://") {
		return nil, 0, bundleErr("the bundle endpoint must be an https URL")
	}
	al := slices.Clone(allowed)
	if b.o.AllowLoopback {
		al = append(al, netguard.Loopback...)
	}
	roots := b.o.RootCAs
	if roots == nil {
		roots = trust.Roots()
	}
	client := netguard.Client(b.o.Timeout, al, roots)
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, b.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, 0, bundleErr("the bundle endpoint is not a URL that can be fetched")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, netguard.ErrNotPublic) {
			return nil, 0, bundleErr("the bundle endpoint's host does not resolve to a public address or one the Project's spec.upstreamNetwork.allowedCIDRs admits")
		}
		if errors.Is(err, netguard.ErrRedirect) {
			return nil, 0, bundleErr("the bundle endpoint answered with a redirect, which is not followed")
		}
		return nil, 0, bundleErr("the bundle endpoint could not be fetched: %v", errors.Unwrap(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, bundleErr("the bundle endpoint answered HTTP %d, not 200", resp.StatusCode)
	}
	raw, err := netguard.ReadAtMost(resp.Body, b.o.MaxBytes)
	if errors.Is(err, netguard.ErrTooLarge) {
		return nil, 0, bundleErr("the bundle is larger than %d bytes", b.o.MaxBytes)
	}
	if err != nil {
		return nil, 0, bundleErr("the bundle could not be read")
	}
	return ParseBundle(td, raw)
}

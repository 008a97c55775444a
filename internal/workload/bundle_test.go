package workload_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/workload"
)

const (
	spiffeID = "spiffe://example.org/ns/agents/sa/repo-helper"
	audience = "https://auth.example.com/agents/demo"
)

var td = spiffeid.RequireTrustDomainFromString("example.org")

// bundleEndpoint is a trust domain's SPIFFE bundle endpoint (https_web profile): a JWKS with
// spiffe_refresh_hint over Web PKI TLS, whose key and answer the test changes.
type bundleEndpoint struct {
	*httptest.Server
	mu      sync.Mutex
	key     *ecdsa.PrivateKey
	kid     string
	hint    int
	body    []byte // when set, served instead of the bundle
	fetches atomic.Int32
}

func newEndpoint(t testing.TB) *bundleEndpoint {
	t.Helper()
	e := &bundleEndpoint{hint: 300}
	e.rotate(t, "k1")
	e.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		e.fetches.Add(1)
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.body != nil {
			w.Write(e.body)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{
			"spiffe_refresh_hint": e.hint,
			"keys":                []jose.JSONWebKey{{Key: e.key.Public(), KeyID: e.kid, Use: "jwt-svid"}},
		})
	}))
	t.Cleanup(e.Close)
	return e
}

// rotate replaces the endpoint's key, as the trust domain does when it rotates.
func (e *bundleEndpoint) rotate(t testing.TB, kid string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.key, e.kid, e.body = key, kid, nil
}

func (e *bundleEndpoint) serve(body []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.body = body
}

// svid signs a JWT-SVID for spiffeID with the endpoint's current key, as the workload's SPIRE
// agent would.
func (e *bundleEndpoint) svid(t *testing.T, now time.Time) string {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: e.key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", e.kid))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jwt.Signed(sig).Claims(jwt.Claims{Subject: spiffeID, Audience: jwt.Audience{audience},
		Expiry: jwt.NewNumericDate(now.Add(5 * time.Minute)), IssuedAt: jwt.NewNumericDate(now)}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newBundles(e *bundleEndpoint, c *clock) *workload.Bundles {
	return workload.NewBundles(workload.BundleOptions{AllowLoopback: true, RootCAs: e.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs, Now: c.Now})
}

func verify(st workload.BundleState, raw string) error {
	_, err := workload.VerifySVID(raw, &config.Workload{SPIFFEID: spiffeID, SPIFFEBundle: st.Bundle}, audience, time.Now())
	return err
}

// TestBundleEndpointRotation: a JWT-SVID signed with the endpoint's key is accepted; once the
// trust domain rotates its key and the refresh hint has passed, the old key's JWT-SVID is
// refused and the new one's accepted. Before the hint passes nothing is fetched again.
func TestBundleEndpointRotation(t *testing.T) {
	e := newEndpoint(t)
	c := &clock{now: time.Now()}
	b := newBundles(e, c)
	ctx := context.Background()

	st := b.Get(ctx, e.URL, td, nil)
	if st.Err != nil || st.Bundle == nil {
		t.Fatalf("first fetch: %+v", st)
	}
	old := e.svid(t, time.Now())
	if err := verify(st, old); err != nil {
		t.Fatalf("a JWT-SVID signed with the bundle's key is refused: %v", err)
	}
	if want := c.Now().Add(5 * time.Minute); !st.Next.Equal(want) {
		t.Errorf("next fetch %v, want the refresh hint's %v", st.Next, want)
	}

	e.rotate(t, "k2")
	c.add(4 * time.Minute)
	if st := b.Get(ctx, e.URL, td, nil); e.fetches.Load() != 1 || !st.Bundle.HasJWTAuthority("k1") || b.Due() {
		t.Fatalf("fetched again before the refresh hint passed (%d fetches)", e.fetches.Load())
	}
	c.add(time.Minute)
	if !b.Due() {
		t.Fatal("the refresh hint passed but the endpoint is not due")
	}
	st = b.Get(ctx, e.URL, td, nil)
	if e.fetches.Load() != 2 || st.Err != nil {
		t.Fatalf("not refreshed: %d fetches, %v", e.fetches.Load(), st.Err)
	}
	if err := verify(st, old); err == nil {
		t.Error("the rotated-out key's JWT-SVID is still accepted")
	}
	if err := verify(st, e.svid(t, time.Now())); err != nil {
		t.Errorf("the new key's JWT-SVID is refused: %v", err)
	}
}

// TestBundleRefreshHintBounds: spiffe_refresh_hint is honoured between a minute and an hour.
func TestBundleRefreshHintBounds(t *testing.T) {
	for hint, want := range map[int]time.Duration{1: time.Minute, 600: 10 * time.Minute, 86400: time.Hour} {
		e := newEndpoint(t)
		e.hint = hint
		c := &clock{now: time.Now()}
		if st := newBundles(e, c).Get(context.Background(), e.URL, td, nil); st.Next.Sub(c.Now()) != want {
			t.Errorf("hint %ds: next fetch in %v, want %v", hint, st.Next.Sub(c.Now()), want)
		}
	}
}

// TestBundleEndpointGuarded: an endpoint on an address the guard refuses (loopback, without
// the tests' exception) is never reached, and a plain http URL is not fetched.
func TestBundleEndpointGuarded(t *testing.T) {
	e := newEndpoint(t)
	b := workload.NewBundles(workload.BundleOptions{RootCAs: e.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs})
	st := b.Get(context.Background(), e.URL, td, nil)
	if st.Bundle != nil || st.Err == nil || !strings.Contains(st.Err.Error(), "public address") {
		t.Fatalf("state %+v, want refused for its address", st)
	}
	plain := httptest.NewServer(e.Config.Handler)
	defer plain.Close()
	if st := newBundles(e, &clock{now: time.Now()}).Get(context.Background(), plain.URL, td, nil); st.Bundle != nil || st.Err == nil {
		t.Fatalf("an http endpoint was used: %+v", st)
	}
	if n := e.fetches.Load(); n != 0 {
		t.Errorf("the endpoint was reached %d times", n)
	}
}

// TestBundleBadRefreshKeepsLastGood: a refresh that answers a malformed bundle, an oversized
// one, one without a JWT-SVID key or one publishing a private key keeps the last good bundle
// and says why; after MaxStale of failures the bundle is dropped.
func TestBundleBadRefreshKeepsLastGood(t *testing.T) {
	priv, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	privJWKS, _ := json.Marshal(map[string]any{"keys": []jose.JSONWebKey{{Key: priv, KeyID: "leaked", Use: "jwt-svid"}}})
	bad := map[string][]byte{
		"malformed":   []byte(`{"keys": [`),
		"oversized":   []byte(`{"keys": [], "pad": "` + strings.Repeat("x", workload.MaxBundleBytes) + `"}`),
		"no jwt-svid": []byte(`{"keys": []}`),
		"private key": privJWKS,
	}
	for name, body := range bad {
		t.Run(name, func(t *testing.T) {
			e := newEndpoint(t)
			c := &clock{now: time.Now()}
			b := newBundles(e, c)
			good := b.Get(context.Background(), e.URL, td, nil)
			svid := e.svid(t, time.Now())
			e.serve(body)
			c.add(5 * time.Minute)
			st := b.Get(context.Background(), e.URL, td, nil)
			if st.Err == nil || st.Bundle != good.Bundle || !st.Fetched.Equal(good.Fetched) {
				t.Fatalf("state %+v, want the last good bundle kept with an error", st)
			}
			if err := verify(st, svid); err != nil {
				t.Errorf("the kept bundle refuses its key's JWT-SVID: %v", err)
			}
			if want := c.Now().Add(workload.RetryAfter); !st.Next.Equal(want) {
				t.Errorf("retry at %v, want %v", st.Next, want)
			}
			c.add(workload.MaxStale)
			if st := b.Get(context.Background(), e.URL, td, nil); st.Bundle != nil || st.Err == nil {
				t.Errorf("a bundle %v past its last good fetch is still used", workload.MaxStale)
			}
		})
	}
}

// BenchmarkBundlesGetCached is what each compilation pays per endpoint client between
// refreshes: a map lookup, no fetch.
func BenchmarkBundlesGetCached(b *testing.B) {
	e := newEndpoint(b)
	c := &clock{now: time.Now()}
	bs := newBundles(e, c)
	ctx := context.Background()
	if st := bs.Get(ctx, e.URL, td, nil); st.Bundle == nil {
		b.Fatal(st.Err)
	}
	b.ReportAllocs()
	for b.Loop() {
		bs.Get(ctx, e.URL, td, nil)
	}
	if n := e.fetches.Load(); n != 1 {
		b.Fatalf("%d fetches", n)
	}
}

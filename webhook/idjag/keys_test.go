package idjag

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/netguard"
	"latchkey.dev/latchkey/internal/testclock"
)

// Assertions naming key ids the trusted issuer never published cannot make Latchkey fetch the
// issuer's keys per request: 100 of them cause one fetch besides the first, and the issuer's
// real rotation is picked up once the interval has passed.
func TestUnknownKeyIDsFetchIssuerKeysRarely(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	next, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	var fetches atomic.Int64
	var rotated atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: key.Public(), KeyID: "k1", Algorithm: "ES256", Use: "sig"}}}
		if rotated.Load() {
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: next.Public(), KeyID: "k2", Algorithm: "ES256", Use: "sig"})
		}
		_ = json.NewEncoder(w).Encode(set)
	}))
	t.Cleanup(srv.Close)
	clock := testclock.New(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	k := NewKeys(clock.Now)
	iss := &config.AssertionIssuer{Issuer: "https://idp.example", JWKSURI: srv.URL, AllowedNetworks: netguard.Loopback}

	if _, err := k.Key(t.Context(), iss, "k1", "ES256"); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := k.Key(t.Context(), iss, fmt.Sprintf("made-up-%d", i), "ES256"); err == nil {
			t.Fatalf("made-up key id %d found a key", i)
		}
	}
	if n := fetches.Load(); n > 2 {
		t.Errorf("100 made-up key ids: %d fetches in all, want at most 2", n)
	}
	rotated.Store(true)
	clock.Advance(refetchEvery)
	if _, err := k.Key(t.Context(), iss, "k2", "ES256"); err != nil {
		t.Errorf("the issuer's next key, after the interval: %v", err)
	}
}

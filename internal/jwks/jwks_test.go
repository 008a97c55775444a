package jwks_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"latchkey.dev/latchkey/internal/jwks"
)

func set(t *testing.T, keys ...jose.JSONWebKey) []byte {
	t.Helper()
	b, err := json.Marshal(jose.JSONWebKeySet{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParse(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	if s, err := jwks.Parse(set(t, jose.JSONWebKey{Key: ec.Public(), KeyID: "a"})); err != nil || len(s.Keys) != 1 {
		t.Fatalf("a public EC key: %v", err)
	}
	var bad *jwks.Error
	if _, err := jwks.Parse(set(t, jose.JSONWebKey{Key: ec, KeyID: "a"})); !errors.As(err, &bad) || !strings.Contains(bad.Reason, "private") {
		t.Errorf("a private key: %v", err)
	}
	if _, err := jwks.Parse(set(t, jose.JSONWebKey{Key: small.Public(), KeyID: "a"})); !errors.As(err, &bad) {
		t.Errorf("a 1024-bit RSA key only: %v", err)
	}
	if _, err := jwks.Parse(set(t, jose.JSONWebKey{Key: ec.Public(), KeyID: "a", Use: "enc"})); !errors.As(err, &bad) {
		t.Errorf("an encryption key only: %v", err)
	}
	if _, err := jwks.Parse([]byte(`not json`)); !errors.As(err, &bad) {
		t.Errorf("not JSON: %v", err)
	}
}

// The fetcher dials public addresses only, and a refresh fetches again at most once per
// MinRefresh.
func TestFetcher(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	body := set(t, jose.JSONWebKey{Key: ec.Public(), KeyID: "a"})
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write(body)
	}))
	defer srv.Close()
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }

	var bad *jwks.Error
	if _, err := jwks.New(jwks.Options{Now: clock}).Get(t.Context(), "https://"+strings.TrimPrefix(srv.URL, "http://")); !errors.As(err, &bad) || !strings.Contains(bad.Reason, "public address") {
		t.Errorf("loopback without AllowLoopback: %v", err)
	}
	f := jwks.New(jwks.Options{AllowLoopback: true, Now: clock})
	for range 3 {
		if _, err := f.Get(t.Context(), srv.URL); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Refresh(t.Context(), srv.URL); err != nil {
			t.Fatal(err)
		}
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("fetched %d times within MinRefresh, want 1", n)
	}
	now = now.Add(jwks.DefaultMinRefresh + time.Second)
	f.Refresh(t.Context(), srv.URL)
	if n := hits.Load(); n != 2 {
		t.Errorf("a refresh after MinRefresh: %d fetches, want 2", n)
	}
}

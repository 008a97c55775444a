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
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"latchkey.dev/latchkey/internal/jwks"
	"latchkey.dev/latchkey/internal/netguard"
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

// Select is how every verifier of the server picks keys from a set: a key is used only for the
// algorithm it declares, only for signatures, and never when it is private.
func TestSelect(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	set := &jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: ec.Public(), KeyID: "a", Algorithm: "ES256", Use: "sig"},
		{Key: other.Public(), KeyID: "b"},
		{Key: other.Public(), KeyID: "enc", Use: "enc"},
		{Key: ec, KeyID: "private"},
		{Key: ec.Public(), KeyID: "rs", Algorithm: "RS256"},
	}}
	ids := func(keys []jose.JSONWebKey) string {
		var out []string
		for _, k := range keys {
			out = append(out, k.KeyID)
		}
		return strings.Join(out, ",")
	}
	for _, c := range []struct {
		name, kid, alg, want string
	}{
		{"by key id", "a", "ES256", "a"},
		{"no key id: every signing key for the algorithm", "", "ES256", "a,b"},
		{"a key declaring another algorithm", "a", "PS256", ""},
		{"a key declaring no algorithm", "b", "PS256", "b"},
		{"an encryption key", "enc", "ES256", ""},
		{"a private key", "private", "ES256", ""},
		{"an unknown key id", "zzz", "ES256", ""},
		{"a key declaring RS256 for an ES256 token", "rs", "ES256", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := ids(jwks.Select(set, c.kid, c.alg)); got != c.want {
				t.Errorf("Select(%q, %q) = %q, want %q", c.kid, c.alg, got, c.want)
			}
		})
	}
	if got := jwks.Select(nil, "a", "ES256"); got != nil {
		t.Errorf("Select of no set = %v", got)
	}
}

// The options the three kinds of set are fetched with: a client's URL is https and public
// only; an issuer an administrator configured may be reached over http and in the Project's
// allowed networks; the sign-in provider's set goes through the caller's client.
func TestFetcherOptions(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	keys := make([]jose.JSONWebKey, 20)
	for i := range keys {
		keys[i] = jose.JSONWebKey{Key: ec.Public(), KeyID: string(rune('a' + i))}
	}
	one, twenty := set(t, keys[0]), set(t, keys...)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/twenty" {
			w.Write(twenty)
			return
		}
		w.Write(one)
	}))
	defer srv.Close()
	var bad *jwks.Error
	t.Run("a client's http URL", func(t *testing.T) {
		_, err := jwks.New(jwks.Options{}).Get(t.Context(), "http://keys.example/jwks.json")
		if !errors.As(err, &bad) || !strings.Contains(bad.Reason, "https") {
			t.Errorf("err = %v, want the https rule", err)
		}
	})
	t.Run("an issuer in the allowed networks", func(t *testing.T) {
		if _, err := jwks.New(jwks.Options{AllowHTTP: true}).Get(t.Context(), srv.URL); !errors.As(err, &bad) || !strings.Contains(bad.Reason, "public address") {
			t.Errorf("loopback without it in Allowed: %v", err)
		}
		allowed := netguard.Allowed{netip.MustParsePrefix("127.0.0.0/8")}
		if s, err := jwks.New(jwks.Options{AllowHTTP: true, Allowed: allowed}).Get(t.Context(), srv.URL); err != nil || len(s.Keys) != 1 {
			t.Errorf("loopback in Allowed: %v", err)
		}
	})
	t.Run("the caller's client and MaxKeys", func(t *testing.T) {
		var used atomic.Bool
		client := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
			used.Store(true)
			return http.DefaultTransport.RoundTrip(r)
		})}
		f := jwks.New(jwks.Options{Client: client, AllowHTTP: true, MaxKeys: 64})
		if s, err := f.Get(t.Context(), srv.URL+"/twenty"); err != nil || len(s.Keys) != 20 || !used.Load() {
			t.Errorf("twenty keys through the caller's client: %v (used %v)", err, used.Load())
		}
		if _, err := jwks.New(jwks.Options{Client: client, AllowHTTP: true}).Get(t.Context(), srv.URL+"/twenty"); !errors.As(err, &bad) {
			t.Errorf("twenty keys over the default MaxKeys: %v", err)
		}
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

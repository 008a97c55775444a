package upstream_test

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/netguard"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/upstream"
)

const goodKey = "lk_demo_0123456789abcdef"

// keyService answers a check call: 200 with the account for goodKey in X-Api-Key, 401 for any
// other key, and whatever status the path asks for under /status/.
func keyService(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch {
		case r.URL.Path == "/status/500":
			w.WriteHeader(http.StatusInternalServerError)
			w.Write([]byte(`{"error":"` + r.Header.Get("X-Api-Key") + `"}`))
		case r.URL.Path == "/redirect":
			http.Redirect(w, r, "http://127.0.0.1:1/elsewhere", http.StatusFound)
		case r.Header.Get("X-Api-Key") == "Key "+goodKey || r.Header.Get("Authorization") == "Bearer "+goodKey:
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"data":{"user":{"id":4711,"handle":"alice-keys"}}}`))
		default:
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"message":"bad key ` + r.Header.Get("X-Api-Key") + `"}`))
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func keyConnector(checkURL string, allowed bool) *config.Connector {
	c := &config.Connector{Key: "team/keys", APIKey: &config.APIKey{
		CheckURL: checkURL, Method: http.MethodGet, Header: "X-Api-Key", Format: "Key {key}",
		IDField: "data.user.id", NameField: "data.user.handle",
	}}
	if allowed {
		c.AllowedNetworks = netguard.Loopback
	}
	return c
}

// The one check call: the key in the declared header and format, the account read from the
// declared paths; a wrong key, a failing service, an address the Project does not allow and a
// redirect each end in their own error, and no error's text carries the key.
func TestCheckAPIKey(t *testing.T) {
	srv, hits := keyService(t)
	bearer := keyConnector(srv.URL+"/me", true)
	bearer.APIKey.Header, bearer.APIKey.Format = "Authorization", "Bearer {key}"
	tests := []struct {
		name     string
		c        *config.Connector
		key      string
		want     error
		wantHits int64
	}{
		{"good key in a header of the service's own", keyConnector(srv.URL+"/me", true), goodKey, nil, 1},
		{"good key as a bearer token", bearer, goodKey, nil, 1},
		{"wrong key", keyConnector(srv.URL+"/me", true), "lk_wrong", upstream.ErrKeyRejected, 1},
		{"the service fails", keyConnector(srv.URL+"/status/500", true), goodKey, upstream.ErrService, 1},
		// A check URL on loopback (or any private range) is refused at dial time unless the
		// Project's upstreamNetwork allows it for the Connector; nothing reaches it.
		{"loopback not allowed", keyConnector(srv.URL+"/me", false), goodKey, upstream.ErrNotAllowed, 0},
		{"cloud metadata", keyConnector("http://169.254.169.254/latest/meta-data/", true), goodKey, upstream.ErrNotAllowed, 0},
		// A redirect would carry X-Api-Key to wherever it points: it is not followed.
		{"redirect", keyConnector(srv.URL+"/redirect", true), goodKey, upstream.ErrService, 1},
		// A pasted line break must not become a header of its own: refused before any call.
		{"line break in the key", keyConnector(srv.URL+"/me", true), goodKey + "\r\nX-Evil: 1", upstream.ErrKeyRejected, 0},
		{"empty key", keyConnector(srv.URL+"/me", true), "", upstream.ErrKeyRejected, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hits.Store(0)
			acct, err := upstream.CheckAPIKey(t.Context(), nil, tc.c, tc.key)
			if tc.want == nil {
				if err != nil || acct.ID != "4711" || acct.Name != "alice-keys" {
					t.Fatalf("CheckAPIKey = %+v, %v; want account 4711 alice-keys", acct, err)
				}
			} else if !errors.Is(err, tc.want) {
				t.Fatalf("CheckAPIKey error = %v, want %v", err, tc.want)
			}
			if err != nil && tc.key != "" && strings.Contains(err.Error(), tc.key) {
				t.Errorf("the error's text carries the key: %v", err)
			}
			if got := hits.Load(); got != tc.wantHits {
				t.Errorf("the service was called %d times, want %d", got, tc.wantHits)
			}
		})
	}
}

// A key is sealed as a token without refresh token or expiry, handed out without a call to the
// service, and is a Bearer token only when it is sent as one (RFC 8693's N_A otherwise).
func TestSealAPIKey(t *testing.T) {
	v := &upstream.Vault{Keyring: secret.NewRandomKeyring()}
	for _, tc := range []struct {
		header, format, want string
	}{
		{"Authorization", "Bearer {key}", "Bearer"},
		{"Authorization", "token {key}", "N_A"},
		{"X-Api-Key", "{key}", "N_A"},
	} {
		c := keyConnector("https://api.example.com/me", false)
		c.APIKey.Header, c.APIKey.Format = tc.header, tc.format
		conn := store.Connection{Project: "p", Subject: "alice", Connector: c.Key, AccountID: "1"}
		v.SealAPIKey(&conn, c, goodKey)
		if conn.TokenType != tc.want || conn.Expiry != nil || conn.RefreshToken != nil || bytes.Contains(conn.AccessToken, []byte(goodKey)) {
			t.Errorf("%s %q: sealed %+v", tc.header, tc.format, conn)
		}
		conn.ID, conn.Status = "c1", store.ConnectionActive
		tok, err := v.TokenFor(t.Context(), c, conn)
		if err != nil || tok.AccessToken != goodKey {
			t.Errorf("TokenFor = %v, %v", tok, err)
		}
	}
}

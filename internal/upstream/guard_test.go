package upstream_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/netguard"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/testclock"
	"latchkey.dev/latchkey/internal/upstream"
)

// counting is a service on 127.0.0.1 that counts what reaches it: the guard must refuse before
// anything is sent.
func counting(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"access_token":"at","token_type":"Bearer","refresh_token":"rt","id_token":"x.y.z"}`))
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// A tenant points a Connector's endpoints at what only the server can reach: its own loopback,
// a cluster address, the cloud metadata service. Every call the server would make for the
// connector — code exchange, userinfo, OIDC discovery, refresh, revocation — is refused at dial
// time, and nothing reaches the address. The same connector with the Project's explicit
// allowance works, except for link-local addresses, which no allowance opens.
func TestConnectorEndpointsOnPrivateAddressesAreNotDialled(t *testing.T) {
	srv, hits := counting(t)
	const metadata = "http://169.254.169.254/latest/meta-data/iam/security-credentials/"
	cases := []struct {
		name string
		c    config.Connector
	}{
		{"token URL on loopback", config.Connector{TokenURL: srv.URL + "/token", UserInfoURL: "https://api.github.com/user"}},
		{"token URL on cloud metadata", config.Connector{TokenURL: metadata, UserInfoURL: srv.URL + "/user"}},
		{"cloud metadata, link-local allowed by the Project", config.Connector{TokenURL: metadata, UserInfoURL: metadata,
			AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("10.0.0.0/8")}}},
		// The token endpoint (the counting server) is allowed here; what comes after it is not.
		{"userinfo on cloud metadata", config.Connector{TokenURL: srv.URL, UserInfoURL: metadata, AllowedNetworks: netguard.Loopback}},
		{"OIDC issuer on cloud metadata", config.Connector{TokenURL: srv.URL, OIDCIssuer: "http://169.254.169.254", AllowedNetworks: netguard.Loopback}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			c.Key, c.ClientID, c.ClientSecret, c.CallbackURL = "tenant/evil", "c", "s", callbackURL
			_, _, err := upstream.Exchange(t.Context(), nil, &c, "code", "v")
			if !errors.Is(err, upstream.ErrNotAllowed) {
				t.Fatalf("Exchange = %v, want ErrNotAllowed", err)
			}
			if err := upstream.CheckIssuer(t.Context(), nil, &c, "", false); c.OIDCIssuer != "" && !errors.Is(err, upstream.ErrNotAllowed) {
				t.Fatalf("CheckIssuer = %v, want ErrNotAllowed", err)
			}
		})
	}

	// Refresh and revocation of a connection the vault holds.
	clk := testclock.New(time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC))
	st := openSQLite(t)
	v := &upstream.Vault{Store: st, Keyring: keyring(t, "a", "a"), Now: clk.Now}
	c := &config.Connector{Key: "tenant/evil", ClientID: "c", ClientSecret: "s", TokenURL: srv.URL, RevocationURL: srv.URL}
	conn := store.Connection{ID: "c1", Project: project, Subject: "p", Connector: c.Key, AccountID: "1", CreatedAt: clk.Now()}
	v.Seal(&conn, &oauth2.Token{AccessToken: "at", RefreshToken: "rt", ExpiresIn: 60})
	if _, err := st.SaveConnection(t.Context(), conn); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	if _, err := v.Token(t.Context(), c, project, "c1"); !errors.Is(err, upstream.ErrNotAllowed) {
		t.Fatalf("refresh = %v, want ErrNotAllowed", err)
	}
	if err := v.Revoke(t.Context(), c, conn); !errors.Is(err, upstream.ErrNotAllowed) {
		t.Fatalf("revoke = %v, want ErrNotAllowed", err)
	}
	// A caller's own http.Client does not get around the guard.
	if _, _, err := upstream.Exchange(t.Context(), srv.Client(), c, "code", "v"); !errors.Is(err, upstream.ErrNotAllowed) {
		t.Fatalf("Exchange with the caller's client = %v, want ErrNotAllowed", err)
	}
	// Only the two allowed token requests reached the loopback server.
	if n := hits.Load(); n != 2 {
		t.Fatalf("the loopback address received %d requests, want the 2 allowed ones", n)
	}
	hits.Store(0)

	// The Project's explicit allowance of the range opens it.
	c.AllowedNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	if err := v.Revoke(t.Context(), c, conn); err != nil || hits.Load() != 2 {
		t.Fatalf("allowed revocation = %v after %d requests", err, hits.Load())
	}
}

// What a service sends when it refuses — the body, the error_description — never reaches an
// error's text, which ends up in logs: a service that echoes the client secret or a token back
// must not have it logged. The status and the OAuth error code are kept.
func TestErrorsNeverCarryWhatTheServiceSent(t *testing.T) {
	const leak = "SECRET-d7c1e0"
	for _, body := range []string{
		`{"error":"invalid_grant","error_description":"client_secret ` + leak + ` is wrong","error_uri":"https://x/` + leak + `"}`,
		`<html>` + leak + `</html>`,
		`{"error":"` + leak + `"}`,
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(body))
		}))
		c := &config.Connector{AllowedNetworks: netguard.Loopback, ClientID: "c", ClientSecret: "s", CallbackURL: callbackURL,
			TokenURL: srv.URL, UserInfoURL: srv.URL, OIDCIssuer: ""}
		_, _, err := upstream.Exchange(t.Context(), nil, c, "code", "v")
		srv.Close()
		if !errors.Is(err, upstream.ErrService) {
			t.Fatalf("Exchange = %v, want ErrService", err)
		}
		if strings.Contains(err.Error(), leak) {
			t.Errorf("error text carries the body: %q", err.Error())
		}
		status, code := upstream.Status(err)
		if status != http.StatusBadRequest || strings.Contains(code, leak) {
			t.Errorf("Status = %d %q", status, code)
		}
		var re *oauth2.RetrieveError
		if !errors.As(err, &re) {
			t.Errorf("the service's error is not in the chain: %v", err)
		}
	}

	// A refresh and a revocation the service refuses the same way.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"error":"invalid_client","error_description":"` + leak + `"}`))
	}))
	defer srv.Close()
	clk := testclock.New(time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC))
	st := openSQLite(t)
	v := &upstream.Vault{Store: st, Keyring: keyring(t, "a", "a"), Now: clk.Now}
	c := &config.Connector{AllowedNetworks: netguard.Loopback, Key: "default/svc", ClientID: "c", ClientSecret: "s", TokenURL: srv.URL, RevocationURL: srv.URL}
	conn := store.Connection{ID: "c1", Project: project, Subject: "p", Connector: c.Key, AccountID: "1", CreatedAt: clk.Now()}
	v.Seal(&conn, &oauth2.Token{AccessToken: "at", RefreshToken: "rt", ExpiresIn: 60})
	if _, err := st.SaveConnection(t.Context(), conn); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	_, err := v.Token(t.Context(), c, project, "c1")
	if err == nil || strings.Contains(err.Error(), leak) {
		t.Errorf("refresh error %v", err)
	}
	if err := v.Revoke(t.Context(), c, conn); err == nil || strings.Contains(err.Error(), leak) {
		t.Errorf("revocation error %v", err)
	}
}

// RFC 9207: an OIDC connector's callback must name its issuer when it names one, and must name
// one when the service's metadata promises it.
func TestCheckIssuer(t *testing.T) {
	// discovery serves an issuer's metadata and counts the fetches.
	discovery := func(promise bool) (string, *atomic.Int64) {
		var issuer string
		var fetches atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fetches.Add(1)
			json.NewEncoder(w).Encode(map[string]any{"issuer": issuer, "authorization_endpoint": issuer + "/auth",
				"token_endpoint": issuer + "/token", "jwks_uri": issuer + "/jwks",
				"authorization_response_iss_parameter_supported": promise})
		}))
		t.Cleanup(srv.Close)
		issuer = srv.URL
		return issuer, &fetches
	}
	for _, tc := range []struct {
		name    string
		oidc    bool
		iss     string // "{issuer}" is replaced by the connector's issuer
		present bool
		promise bool
		ok      bool
	}{
		{"right issuer", true, "{issuer}", true, true, true},
		{"another issuer", true, "https://honest.example", true, false, false},
		{"trailing slash is another issuer", true, "{issuer}/", true, false, false},
		{"empty iss", true, "", true, false, false},
		{"no iss, none promised", true, "", false, false, true},
		{"no iss, promised", true, "", false, true, false},
		{"no issuer to compare with", false, "https://anything.example", true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			issuer, fetches := discovery(tc.promise)
			c := &config.Connector{AllowedNetworks: netguard.Loopback}
			if tc.oidc {
				c.OIDCIssuer = issuer
			}
			iss := strings.ReplaceAll(tc.iss, "{issuer}", issuer)
			for range 3 {
				err := upstream.CheckIssuer(t.Context(), nil, c, iss, tc.present)
				if tc.ok != (err == nil) || (!tc.ok && !errors.Is(err, upstream.ErrIssuer)) {
					t.Fatalf("CheckIssuer = %v, want ok=%v", err, tc.ok)
				}
			}
			// The metadata is read only for a missing iss, and once for many callbacks.
			if want := map[bool]int64{true: 0, false: 1}[tc.present || !tc.oidc]; fetches.Load() != want {
				t.Errorf("discovery fetched %d times, want %d", fetches.Load(), want)
			}
		})
	}
}

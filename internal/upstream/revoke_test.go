package upstream_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/netguard"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/testclock"
	"latchkey.dev/latchkey/internal/upstream"
)

// TestRevokeRFC7009Answers: a token the service says it no longer knows (Salesforce's 400
// invalid_token, for an access token its refresh token's revocation already ended) counts as
// revoked; any other refusal is still a failure, so Disconnect records it.
func TestRevokeRFC7009Answers(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		ok     bool
	}{
		{"200", http.StatusOK, ``, true},
		{"400 invalid_token", http.StatusBadRequest, `{"error":"invalid_token","error_description":"invalid token"}`, true},
		{"400 unsupported_token_type", http.StatusBadRequest, `{"error":"unsupported_token_type"}`, false},
		{"400 without a JSON body", http.StatusBadRequest, `invalid_token`, false},
		{"401 invalid_token", http.StatusUnauthorized, `{"error":"invalid_token"}`, false},
		{"503", http.StatusServiceUnavailable, ``, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			v := &upstream.Vault{Keyring: keyring(t, "a", "a"), Now: testclock.New(time.Now()).Now}
			c := &config.Connector{AllowedNetworks: netguard.Loopback, Key: "default/svc", ClientID: "c", ClientSecret: "s", RevocationURL: srv.URL}
			conn := store.Connection{ID: "c1", Project: project, Subject: "p", Connector: c.Key, AccountID: "1"}
			v.Seal(&conn, &oauth2.Token{AccessToken: "at"})
			if err := v.Revoke(t.Context(), c, conn); (err == nil) != tt.ok {
				t.Fatalf("Revoke = %v; want success %v", err, tt.ok)
			}
		})
	}
}

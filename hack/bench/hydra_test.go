package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// register speaks Hydra's admin API as documented for "Create OAuth 2.0 Client"
// (https://www.ory.sh/docs/hydra/reference/api#tag/oAuth2/operation/createOAuth2Client):
// POST /admin/clients with the client's metadata, 201 with the client, its generated id and
// its secret (shown this once).
func TestHydraRegister(t *testing.T) {
	var got map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/admin/clients" {
			http.NotFound(w, r)
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"client_id":"0b8e8a3e-6f2c-4a57-9f0e-3c1d2b7a9e11","client_name":"bench","client_secret":"s3cr3t","grant_types":["client_credentials"],"token_endpoint_auth_method":"client_secret_basic"}`))
	}))
	defer srv.Close()

	h := &hydraPeer{}
	if err := h.register(t.Context(), srv.URL); err != nil {
		t.Fatal(err)
	}
	if h.id != "0b8e8a3e-6f2c-4a57-9f0e-3c1d2b7a9e11" || h.secret != "s3cr3t" {
		t.Errorf("client %q / %q, want the id and secret Hydra returned", h.id, h.secret)
	}
	if gt, _ := got["grant_types"].([]any); len(gt) != 1 || gt[0] != "client_credentials" {
		t.Errorf("grant_types sent: %v, want [client_credentials]", got["grant_types"])
	}
	if got["token_endpoint_auth_method"] != "client_secret_basic" {
		t.Errorf("token_endpoint_auth_method sent: %v, want client_secret_basic", got["token_endpoint_auth_method"])
	}

	// Any other answer is an error that says what Hydra said; no client is kept.
	refuse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"error":"invalid_client_metadata"}`, http.StatusBadRequest)
	}))
	defer refuse.Close()
	h = &hydraPeer{}
	err := h.register(t.Context(), refuse.URL)
	if err == nil || !strings.Contains(err.Error(), "invalid_client_metadata") || h.id != "" {
		t.Errorf("register on a refusal: %v (client %q), want the refusal and no client", err, h.id)
	}
}

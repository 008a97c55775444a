package mcp_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"
)

// The runnable examples talk to standIn, a few lines playing the two endpoints of one Latchkey
// project that an MCP server calls: /token (token exchange) and /introspect. It answers in
// process through its Client, so the examples run without a network and print the same
// addresses every time. A real server leaves Exchanger.HTTP and ResourceServer.HTTP nil and
// reaches Latchkey itself.

const (
	exampleIssuer   = "https://auth.example.com/team-a/demo"
	exampleResource = "https://mcp.example.com/mcp"
	exampleLink     = exampleIssuer + "/account/services/link/q3Jx"
)

type standIn struct {
	mu        sync.Mutex
	connected bool // whether Alice has connected GitHub and let the agent use it
}

// Client reaches the stand-in in process, whatever host a request names.
func (s *standIn) Client() *http.Client {
	return &http.Client{Transport: s}
}

// Connect is what Alice does in her browser when she opens the link.
func (s *standIn) Connect() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.connected = true
}

func (s *standIn) RoundTrip(r *http.Request) (*http.Response, error) {
	w := httptest.NewRecorder()
	s.serve(w, r)
	return w.Result(), nil
}

func (s *standIn) serve(w http.ResponseWriter, r *http.Request) {
	if id, _, ok := r.BasicAuth(); !ok || id != "repo-helper-mcp" || r.ParseForm() != nil {
		answer(w, http.StatusUnauthorized, map[string]any{"error": "invalid_client"})
		return
	}
	switch r.URL.String() {
	case exampleIssuer + "/introspect":
		s.introspect(w, r)
	case exampleIssuer + "/token":
		s.exchange(w, r)
	default:
		http.NotFound(w, r)
	}
}

// introspect knows two tokens: Alice's, which the agent got for this MCP server in the
// authorization code flow, and one the service client got for itself with client_credentials.
func (s *standIn) introspect(w http.ResponseWriter, r *http.Request) {
	exp := time.Now().Add(time.Hour).Unix()
	switch r.PostForm.Get("token") {
	case "lk_at_alice":
		answer(w, http.StatusOK, map[string]any{
			"active": true, "sub": "alice", "client_id": "repo-helper-agent", "aud": []string{exampleResource},
			"scope": "repos:read", "token_type": "Bearer", "exp": exp, "iss": exampleIssuer,
			"latchkey_subject_type": "person",
		})
	case "lk_at_service":
		answer(w, http.StatusOK, map[string]any{
			"active": true, "client_id": "nightly-report", "aud": []string{exampleResource},
			"token_type": "Bearer", "exp": exp, "iss": exampleIssuer, "latchkey_subject_type": "client",
		})
	default:
		answer(w, http.StatusOK, map[string]any{"active": false})
	}
}

// exchange gives Alice's GitHub token once she has connected GitHub, and the connect link until
// then.
func (s *standIn) exchange(w http.ResponseWriter, r *http.Request) {
	if r.PostForm.Get("subject_token") != "lk_at_alice" || r.PostForm.Get("audience") != "github" {
		answer(w, http.StatusBadRequest, map[string]any{"error": "invalid_grant"})
		return
	}
	s.mu.Lock()
	connected := s.connected
	s.mu.Unlock()
	if !connected {
		answer(w, http.StatusBadRequest, map[string]any{
			"error":              "invalid_grant",
			"error_description":  "the person has not connected a GitHub account",
			"reason":             "connect_required",
			"connect_uri":        exampleLink,
			"connect_id":         "c6m2",
			"connect_expires_in": 1800,
			"connect_message":    "Open this link to connect your GitHub account and let Repo Helper use it.",
		})
		return
	}
	answer(w, http.StatusOK, map[string]any{
		"access_token":      "gho_alice",
		"issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
		"token_type":        "Bearer",
		"expires_in":        3600,
		"scope":             "repo",
	})
}

func answer(w http.ResponseWriter, status int, body map[string]any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

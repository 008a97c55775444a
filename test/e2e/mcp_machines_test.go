package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/config"
)

// The machine that passes as a person. On a Project with open registration, anyone registers a
// client for client_credentials, asks for a token naming the demo MCP server (Repo Helper) as
// its resource, and calls initialize. Latchkey refuses the token (invalid_target: a client that
// registered itself gets client_credentials tokens for no resource by default); and if an
// administrator does let registered clients have tokens for the MCP server, Repo Helper still
// refuses the client-only token (401 invalid_token), since it acts only for people.
func TestAttackSelfRegisteredMachinePassesAsPerson(t *testing.T) {
	s := newMCPStack(t)
	if s.Project.Registration.Mode != config.RegistrationOpen {
		t.Fatalf("the story needs open registration, have %q", s.Project.Registration.Mode)
	}

	// 1. Register for client_credentials, as anyone on the Internet can.
	resp, err := http.Post(s.Issuer+"/register", "application/json", strings.NewReader(`{"grant_types":["client_credentials"]}`))
	if err != nil {
		t.Fatal(err)
	}
	var reg struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
	}
	err = json.NewDecoder(resp.Body).Decode(&reg)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated || reg.ClientSecret == "" {
		t.Fatalf("registration: %d %v", resp.StatusCode, err)
	}

	// 2. Ask for a token for Repo Helper.
	machineToken := func() (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodPost, s.Issuer+"/token", strings.NewReader(url.Values{
			"grant_type": {"client_credentials"}, "resource": {s.MCPURL},
		}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth(url.QueryEscape(reg.ClientID), url.QueryEscape(reg.ClientSecret))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, body
	}
	status, body := machineToken()
	if status != http.StatusBadRequest || body["error"] != "invalid_target" {
		tok, _ := body["access_token"].(string)
		t.Errorf("client_credentials for the MCP server: %d %v, want 400 invalid_target", status, body)
		if tok != "" {
			initializeRefused(t, s, tok) // and see how far the token gets
		}
		return
	}

	// 3. An administrator lets registered clients have client_credentials tokens for Repo
	// Helper. The token is issued now, and Repo Helper still refuses it.
	p := *s.Project
	p.Registration.ClientCredentialsResources = []string{s.MCPURL}
	s.Project = &p
	s.Holder().Store(&config.Snapshot{Projects: map[string]*config.Project{p.Key: &p}, Version: 3})
	status, body = machineToken()
	tok, _ := body["access_token"].(string)
	if status != http.StatusOK || tok == "" {
		t.Fatalf("client_credentials for a resource the policy lists: %d %v", status, body)
	}
	initializeRefused(t, s, tok)
}

// initializeRefused calls initialize at Repo Helper with token and wants 401 invalid_token
// saying the token names no person.
func initializeRefused(t *testing.T, s *mcpStack, token string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.MCPURL, strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"machine","version":"1.0.0"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	challenge := resp.Header.Get("WWW-Authenticate")
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(challenge, `error="invalid_token"`) ||
		!strings.Contains(challenge, "names no person") {
		t.Errorf("initialize with a client-only token: %d %q %.300s\nwant 401 invalid_token naming no person", resp.StatusCode, challenge, body)
	}
}

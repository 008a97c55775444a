package mcp_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	latchkey "latchkey.dev/latchkey/mcp"
)

func TestExchangeSendsTokenExchange(t *testing.T) {
	var form url.Values
	var user, pass string
	var contentType string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		form, _ = url.ParseQuery(string(body))
		user, pass, _ = r.BasicAuth()
		contentType = r.Header.Get("Content-Type")
		writeJSON(w, http.StatusOK, map[string]any{
			"access_token":      "gho_alice",
			"issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
			"token_type":        "bearer",
			"expires_in":        3600,
			"scope":             "repo read:org",
		})
	}))
	defer srv.Close()

	ex := &latchkey.Exchanger{TokenURL: srv.URL + "/token", ClientID: "mcp server", ClientSecret: "s3cret:+/"}
	before := time.Now()
	tok, err := ex.Exchange(context.Background(), "lk_at_alice", "github")
	if err != nil {
		t.Fatalf("Exchange: %v", err)
	}
	want := url.Values{
		"grant_type":           {"urn:ietf:params:oauth:grant-type:token-exchange"},
		"subject_token":        {"lk_at_alice"},
		"subject_token_type":   {"urn:ietf:params:oauth:token-type:access_token"},
		"requested_token_type": {"urn:ietf:params:oauth:token-type:access_token"},
		"audience":             {"github"},
	}
	if form.Encode() != want.Encode() {
		t.Errorf("form = %v, want %v", form, want)
	}
	// client_secret_basic with form-encoded halves (RFC 6749 §2.3.1).
	if user != "mcp+server" || pass != "s3cret%3A%2B%2F" {
		t.Errorf("basic auth = %q:%q", user, pass)
	}
	if contentType != "application/x-www-form-urlencoded" {
		t.Errorf("Content-Type = %q", contentType)
	}
	if tok.AccessToken != "gho_alice" || tok.TokenType != "bearer" || tok.Scope != "repo read:org" ||
		tok.IssuedTokenType != latchkey.TokenTypeAccessToken {
		t.Errorf("token = %+v", tok)
	}
	if tok.Expiry.Before(before.Add(time.Hour)) || tok.Expiry.After(time.Now().Add(time.Hour)) {
		t.Errorf("Expiry = %v, want about an hour from now", tok.Expiry)
	}
}

func TestExchangeRefusals(t *testing.T) {
	refusal := func(reason string) map[string]any {
		return map[string]any{
			"error":              "invalid_grant",
			"error_description":  "the person has not connected a GitHub account",
			"reason":             reason,
			"connect_uri":        "https://auth.example.com/ns/demo/account/services/link/q3Jx",
			"connect_id":         "c6m2",
			"connect_expires_in": 1800,
			"connect_message":    connectMessage,
		}
	}
	with := func(m map[string]any, k string, v any) map[string]any {
		m[k] = v
		return m
	}
	tests := []struct {
		name    string
		status  int
		ctype   string
		body    any
		connect *latchkey.ConnectRequired
		oauth   *latchkey.OAuthError
	}{
		{name: "connect required", status: 400, body: refusal("connect_required"),
			connect: &latchkey.ConnectRequired{Reason: "connect_required", URI: "https://auth.example.com/ns/demo/account/services/link/q3Jx", ID: "c6m2", ExpiresIn: 30 * time.Minute, Message: connectMessage, Description: "the person has not connected a GitHub account", Audience: "github"}},
		{name: "allow required", status: 400, body: refusal("allow_required"),
			connect: &latchkey.ConnectRequired{Reason: "allow_required", URI: "https://auth.example.com/ns/demo/account/services/link/q3Jx", ID: "c6m2", ExpiresIn: 30 * time.Minute, Message: connectMessage, Description: "the person has not connected a GitHub account", Audience: "github"}},
		{name: "reconnect required", status: 400, body: refusal("reconnect_required"),
			connect: &latchkey.ConnectRequired{Reason: "reconnect_required", URI: "https://auth.example.com/ns/demo/account/services/link/q3Jx", ID: "c6m2", ExpiresIn: 30 * time.Minute, Message: connectMessage, Description: "the person has not connected a GitHub account", Audience: "github"}},
		{name: "invalid target", status: 400, body: map[string]any{"error": "invalid_target", "error_description": "no connector"},
			oauth: &latchkey.OAuthError{StatusCode: 400, Code: "invalid_target", Description: "no connector", Audience: "github"}},
		{name: "invalid grant without a link", status: 400, body: map[string]any{"error": "invalid_grant", "error_description": "subject_token expired"},
			oauth: &latchkey.OAuthError{StatusCode: 400, Code: "invalid_grant", Description: "subject_token expired", Audience: "github"}},
		{name: "unknown reason", status: 400, body: refusal("pay_required"),
			oauth: &latchkey.OAuthError{StatusCode: 400, Code: "invalid_grant", Description: "the person has not connected a GitHub account", Audience: "github"}},
		{name: "invalid client", status: 401, body: map[string]any{"error": "invalid_client"},
			oauth: &latchkey.OAuthError{StatusCode: 401, Code: "invalid_client", Audience: "github"}},
		// A link a client must never be asked to open is not relayed.
		{name: "javascript link", status: 400, body: with(refusal("connect_required"), "connect_uri", "javascript:alert(1)")},
		{name: "link with credentials", status: 400, body: with(refusal("connect_required"), "connect_uri", "https://alice:pw@auth.example.com/link/x")},
		{name: "relative link", status: 400, body: with(refusal("connect_required"), "connect_uri", "/account/services/link/x")},
		{name: "no connect id", status: 400, body: with(refusal("connect_required"), "connect_id", "")},
		{name: "html error page", status: 502, ctype: "text/html", body: "<html>bad gateway</html>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if s, ok := tt.body.(string); ok {
					w.Header().Set("Content-Type", tt.ctype)
					w.WriteHeader(tt.status)
					io.WriteString(w, s)
					return
				}
				writeJSON(w, tt.status, tt.body)
			}))
			defer srv.Close()
			ex := &latchkey.Exchanger{TokenURL: srv.URL, ClientID: "c", ClientSecret: "s"}
			tok, err := ex.Exchange(context.Background(), "lk_at", "github")
			if tok != nil || err == nil {
				t.Fatalf("Exchange = %v, %v; want an error", tok, err)
			}
			var cr *latchkey.ConnectRequired
			var oe *latchkey.OAuthError
			gotConnect, gotOAuth := errors.As(err, &cr), errors.As(err, &oe)
			switch {
			case tt.connect != nil:
				if !gotConnect {
					t.Fatalf("err = %#v, want *ConnectRequired", err)
				}
				if *cr != *tt.connect {
					t.Errorf("ConnectRequired = %+v\nwant %+v", *cr, *tt.connect)
				}
				if !strings.Contains(err.Error(), cr.URI) || !strings.Contains(err.Error(), connectMessage) {
					t.Errorf("Error() = %q, want message and link", err.Error())
				}
			case tt.oauth != nil:
				if !gotOAuth || gotConnect {
					t.Fatalf("err = %#v, want *OAuthError", err)
				}
				if *oe != *tt.oauth {
					t.Errorf("OAuthError = %+v\nwant %+v", *oe, *tt.oauth)
				}
			default:
				if gotConnect {
					t.Fatalf("err = %#v relays a link it must refuse", err)
				}
			}
		})
	}
}

func TestExchangeNeedsInputs(t *testing.T) {
	ex := &latchkey.Exchanger{TokenURL: "http://127.0.0.1:1/token"}
	for _, tc := range []struct{ subject, audience string }{{"", "github"}, {"lk_at", ""}} {
		if _, err := ex.Exchange(context.Background(), tc.subject, tc.audience); err == nil {
			t.Errorf("Exchange(%q, %q) = nil error", tc.subject, tc.audience)
		}
	}
	if _, err := (&latchkey.Exchanger{}).Exchange(context.Background(), "lk_at", "github"); err == nil {
		t.Error("Exchange without TokenURL = nil error")
	}
}

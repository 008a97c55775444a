package mcp_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	latchkey "latchkey.dev/latchkey/mcp"
)

// TestApprovalRefusalsParsed: approval_required becomes an *ApprovalRequired only with an
// auth_req_id and a positive expires_in; an approvals_uri that is not a plain http(s) link is
// dropped rather than shown; the interval defaults to CIBA's 5 seconds.
func TestApprovalRefusalsParsed(t *testing.T) {
	for name, tc := range map[string]struct {
		body     map[string]any
		want     bool
		uri      string
		interval time.Duration
	}{
		"complete":        {map[string]any{"error": "approval_required", "auth_req_id": "lk_ar_1", "interval": 7, "expires_in": 60, "approvals_uri": "https://a.example/account/approvals"}, true, "https://a.example/account/approvals", 7 * time.Second},
		"no interval":     {map[string]any{"error": "approval_required", "auth_req_id": "lk_ar_1", "expires_in": 60}, true, "", 5 * time.Second},
		"javascript link": {map[string]any{"error": "approval_required", "auth_req_id": "lk_ar_1", "expires_in": 60, "approvals_uri": "javascript:alert(1)"}, true, "", 5 * time.Second},
		"no auth_req_id":  {map[string]any{"error": "approval_required", "expires_in": 60}, false, "", 0},
		"no expires_in":   {map[string]any{"error": "approval_required", "auth_req_id": "lk_ar_1"}, false, "", 0},
		"plain refusal":   {map[string]any{"error": "invalid_authorization_details"}, false, "", 0},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 400, tc.body) }))
		ex := &latchkey.Exchanger{TokenURL: srv.URL, ClientID: "c", ClientSecret: "s"}
		_, err := ex.ExchangeDetails(context.Background(), "lk_at_alice", "github", `[{"type":"x"}]`)
		srv.Close()
		var ar *latchkey.ApprovalRequired
		var oe *latchkey.OAuthError
		switch {
		case errors.As(err, &ar) != tc.want:
			t.Errorf("%s: %v, want ApprovalRequired %v", name, err, tc.want)
		case tc.want && (ar.URI != tc.uri || ar.Interval != tc.interval || ar.AuthReqID != "lk_ar_1" || ar.ExpiresIn != time.Minute):
			t.Errorf("%s: %+v", name, ar)
		case !tc.want && !errors.As(err, &oe):
			t.Errorf("%s: %v, want an *OAuthError", name, err)
		}
	}
}

// TestWaitForApprovalEnds: a denial ends the wait with access_denied after one poll, and a
// person who never answers ends it when ctx does.
func TestWaitForApprovalEnds(t *testing.T) {
	polls := 0
	code := "access_denied"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		if r.PostForm.Get("grant_type") != latchkey.GrantTypeCIBA || r.PostForm.Get("auth_req_id") != "lk_ar_1" {
			writeJSON(w, 400, map[string]any{"error": "invalid_grant"})
			return
		}
		polls++
		writeJSON(w, 400, map[string]any{"error": code})
	}))
	defer srv.Close()
	ex := &latchkey.Exchanger{TokenURL: srv.URL, ClientID: "c", ClientSecret: "s",
		Wait: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }}
	a := &latchkey.ApprovalRequired{AuthReqID: "lk_ar_1", Interval: 5 * time.Second, ExpiresIn: time.Minute}
	var oe *latchkey.OAuthError
	if _, err := ex.WaitForApproval(context.Background(), a); !errors.As(err, &oe) || oe.Code != "access_denied" || polls != 1 {
		t.Fatalf("denied: %v after %d polls", err, polls)
	}
	code = "authorization_pending"
	ctx, cancel := context.WithCancel(context.Background())
	ex.Wait = func(ctx context.Context, _ time.Duration) error {
		if polls >= 4 {
			cancel()
		}
		return ctx.Err()
	}
	if _, err := ex.WaitForApproval(ctx, a); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "waiting for approval") {
		t.Fatalf("never answered: %v after %d polls", err, polls)
	}
}

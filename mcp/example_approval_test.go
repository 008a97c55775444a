package mcp_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	latchkey "latchkey.dev/latchkey/mcp"
)

// approvalStandIn plays a Latchkey token endpoint that answers an exchange for details alice's
// token lacks with approval_required, then, polled with the ciba grant, says
// authorization_pending, slow_down (the poll came too soon) and finally gives alice's token
// carrying the approval, which exchanges for her GitHub token.
type approvalStandIn struct {
	mu    sync.Mutex
	polls int
}

func (s *approvalStandIn) RoundTrip(r *http.Request) (*http.Response, error) {
	w := httptest.NewRecorder()
	if id, _, ok := r.BasicAuth(); !ok || id != "repo-helper-mcp" || r.ParseForm() != nil || r.URL.String() != exampleIssuer+"/token" {
		answer(w, http.StatusUnauthorized, map[string]any{"error": "invalid_client"})
		return w.Result(), nil
	}
	f := r.PostForm
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case f.Get("grant_type") == latchkey.GrantTypeCIBA && f.Get("auth_req_id") == "lk_ar_example":
		s.polls++
		switch s.polls {
		case 1:
			answer(w, http.StatusBadRequest, map[string]any{"error": "authorization_pending"})
		case 2:
			answer(w, http.StatusBadRequest, map[string]any{"error": "slow_down"})
		default:
			answer(w, http.StatusOK, map[string]any{"access_token": "lk_at_approved", "token_type": "Bearer", "expires_in": 540})
		}
	case f.Get("subject_token") == "lk_at_approved":
		answer(w, http.StatusOK, map[string]any{
			"access_token": "gho_alice", "token_type": "Bearer", "expires_in": 540,
			"issued_token_type": latchkey.TokenTypeAccessToken,
		})
	case f.Get("subject_token") == "lk_at_alice" && f.Get("authorization_details") != "":
		answer(w, http.StatusBadRequest, map[string]any{
			"error": "approval_required", "error_description": "the person has been asked",
			"auth_req_id": "lk_ar_example", "interval": 5, "expires_in": 600,
			"approvals_uri": exampleIssuer + "/account/approvals",
		})
	default:
		answer(w, http.StatusBadRequest, map[string]any{"error": "invalid_grant"})
	}
	return w.Result(), nil
}

// An agent asks for write access to one repository that alice's token does not carry.
// Latchkey asks alice and refuses with approval_required; the agent tells alice where to
// answer, waits (honouring the interval and slow_down), and exchanges the token her approval
// gave it for her GitHub token.
func ExampleExchanger_WaitForApproval() {
	ex := &latchkey.Exchanger{
		TokenURL: exampleIssuer + "/token", ClientID: "repo-helper-mcp", ClientSecret: "example-secret",
		HTTP: &http.Client{Transport: &approvalStandIn{}},
		// Here the pauses are only printed; leave Wait nil to really wait.
		Wait: func(_ context.Context, d time.Duration) error { fmt.Println("wait", d); return nil },
	}
	ctx := context.Background()
	details := `[{"type":"github_repository","actions":["write"],"locations":["https://api.github.com/repos/acme/api"]}]`
	_, err := ex.ExchangeDetails(ctx, "lk_at_alice", "github", details)
	var approval *latchkey.ApprovalRequired
	if !errors.As(err, &approval) {
		log.Fatal(err)
	}
	fmt.Println("ask alice at", approval.URI, "within", approval.ExpiresIn)
	approved, err := ex.WaitForApproval(ctx, approval)
	if err != nil {
		log.Fatal(err)
	}
	tok, err := ex.ExchangeDetails(ctx, approved.AccessToken, "github", details)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("GitHub token:", tok.AccessToken)
	// Output:
	// ask alice at https://auth.example.com/team-a/demo/account/approvals within 10m0s
	// wait 5s
	// wait 5s
	// wait 10s
	// GitHub token: gho_alice
}

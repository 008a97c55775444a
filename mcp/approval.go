package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Identifiers of an approval an exchange started (Latchkey's docs/approvals.md).
const (
	// CodeApprovalRequired is the token exchange refusal that started an approval request.
	CodeApprovalRequired = "approval_required"
	// GrantTypeCIBA polls for the person's answer (OpenID CIBA Core §10.1).
	GrantTypeCIBA = "urn:openid:params:grant-type:ciba"
)

// Polling defaults of CIBA Core §7.3 and the step slow_down adds (RFC 8628 §3.5).
const (
	defaultInterval = 5 * time.Second
	slowDownStep    = 5 * time.Second
)

// ApprovalRequired is Latchkey's refusal of an exchange that asked for authorization_details
// the subject token lacks, after it asked the person to approve them. Tell the person (URI is
// their "Waiting for you" page), then WaitForApproval.
type ApprovalRequired struct {
	// AuthReqID is the request's auth_req_id: a bearer secret, kept by the server only.
	AuthReqID string
	// Interval is the least time between polls; ExpiresIn how long the request waits.
	Interval, ExpiresIn time.Duration
	// URI is the person's approvals page (approvals_uri), "" when Latchkey sent none.
	URI string
	// Description is error_description, for logs.
	Description string
	// Audience is the connected service the exchange asked for.
	Audience string
}

func (e *ApprovalRequired) Error() string {
	s := "latchkey: the person must approve this first"
	if e.URI != "" {
		s += " at " + e.URI
	}
	return s
}

func parseApproval(status int, body []byte, description, audience string) error {
	var ar struct {
		AuthReqID    string      `json:"auth_req_id"`
		Interval     json.Number `json:"interval"`
		ExpiresIn    json.Number `json:"expires_in"`
		ApprovalsURI string      `json:"approvals_uri"`
	}
	oe := &OAuthError{StatusCode: status, Code: CodeApprovalRequired, Description: description, Audience: audience}
	if json.Unmarshal(body, &ar) != nil || ar.AuthReqID == "" {
		oe.Description += " (no auth_req_id)"
		return oe
	}
	a := &ApprovalRequired{AuthReqID: ar.AuthReqID, Interval: defaultInterval, Description: description, Audience: audience}
	if n, err := ar.Interval.Int64(); err == nil && n > 0 {
		a.Interval = time.Duration(n) * time.Second
	}
	n, err := ar.ExpiresIn.Int64()
	if err != nil || n <= 0 {
		oe.Description += " (bad expires_in)"
		return oe
	}
	a.ExpiresIn = time.Duration(n) * time.Second
	if ar.ApprovalsURI != "" && checkLink(ar.ApprovalsURI) == nil {
		a.URI = ar.ApprovalsURI
	}
	return a
}

// WaitForApproval polls the token endpoint with the CIBA grant until the person answers the
// request a refused exchange started: it waits Interval before each poll, five seconds more
// after every slow_down, and gives up when the request expires or ctx ends. The token it
// returns is the person's Latchkey access token carrying what they approved: exchange it
// again (ExchangeDetails) for the upstream token. A denial is an *OAuthError with Code
// "access_denied"; an expired request "expired_token".
func (e *Exchanger) WaitForApproval(ctx context.Context, a *ApprovalRequired) (*Token, error) {
	if e == nil || e.TokenURL == "" {
		return nil, errors.New("latchkey: Exchanger.TokenURL is not set")
	}
	if a == nil || a.AuthReqID == "" {
		return nil, errors.New("latchkey: no approval request to wait for")
	}
	ctx, cancel := context.WithTimeout(ctx, a.ExpiresIn+time.Second)
	defer cancel()
	interval := max(a.Interval, time.Second)
	form := url.Values{"grant_type": {GrantTypeCIBA}, "auth_req_id": {a.AuthReqID}}
	for {
		if err := e.wait(ctx, interval); err != nil {
			return nil, fmt.Errorf("latchkey: waiting for approval: %w", err)
		}
		status, body, err := postForm(ctx, e.HTTP, e.TokenURL, e.ClientID, e.ClientSecret, form)
		if err != nil {
			return nil, fmt.Errorf("latchkey: polling for approval: %w", err)
		}
		if status == http.StatusOK {
			return parseToken(body)
		}
		refusal := parseRefusal(status, body, a.Audience)
		var oe *OAuthError
		switch {
		case !errors.As(refusal, &oe):
			return nil, refusal
		case oe.Code == "authorization_pending":
		case oe.Code == "slow_down":
			interval += slowDownStep
		default:
			return nil, refusal
		}
	}
}

func (e *Exchanger) wait(ctx context.Context, d time.Duration) error {
	if e.Wait != nil {
		return e.Wait(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

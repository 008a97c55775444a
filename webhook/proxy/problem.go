package proxy

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"latchkey.dev/latchkey/webhook/exchange"
	"latchkey.dev/latchkey/webhook/oauth"
)

// ProblemTypePrefix starts the type of every problem the proxy answers with (RFC 9457 §3.1.1);
// the rest is the problem's code (docs/token-proxy.md, "Refusals").
const ProblemTypePrefix = "urn:latchkey:problem:"

// Problem is a refusal, written as RFC 9457 problem details (application/problem+json). The
// three refusals that come with a connect link carry token exchange's own members (reason,
// connect_uri, connect_id, connect_expires_in, connect_message) as extension members.
type Problem struct {
	Code   string
	Status int
	Title  string
	Detail string
	// Extra are extension members; they never replace type, title, status or detail.
	Extra map[string]any
	// Challenge, when set, is the WWW-Authenticate header of a 401.
	Challenge string
}

func (p *Problem) Error() string { return p.Code + ": " + p.Detail }

func problem(status int, code, title, detail string) *Problem {
	return &Problem{Code: code, Status: status, Title: title, Detail: detail}
}

// Body is the problem as its JSON document.
func (p *Problem) Body() []byte {
	m := make(map[string]any, len(p.Extra)+4)
	for k, v := range p.Extra {
		m[k] = v
	}
	m["type"] = ProblemTypePrefix + p.Code
	m["title"] = p.Title
	m["status"] = p.Status
	if p.Detail != "" {
		m["detail"] = p.Detail
	}
	b, _ := json.Marshal(m)
	return b
}

// Write answers w with the problem. Refusals are never cached.
func (p *Problem) Write(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	if p.Challenge != "" {
		h.Set("WWW-Authenticate", p.Challenge)
	}
	if p.Status == http.StatusServiceUnavailable {
		h.Set("Retry-After", "5")
	}
	b := p.Body()
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(p.Status)
	_, _ = w.Write(b)
}

// asProblem turns what the token checks and token exchange answered into a problem: the
// connect link refusals keep exchange's members, the rest keep its OAuth error code.
func asProblem(err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	e := oauth.AsError(err)
	reason, _ := e.Extra["reason"].(string)
	switch {
	case reason == exchange.ReasonConnectRequired || reason == exchange.ReasonAllowRequired || reason == exchange.ReasonReconnectRequired:
		pr := problem(http.StatusForbidden, reason, "The person must act before the agent can use this service", e.Description)
		pr.Extra = e.Extra
		return pr
	case e.Code == oauth.ErrInvalidToken.Code || e.Code == oauth.ErrInvalidDPoPProof.Code:
		return problem(http.StatusUnauthorized, e.Code, "The access token was refused", e.Description)
	case e.Code == oauth.ErrUseDPoPNonce.Code:
		return problem(http.StatusUnauthorized, e.Code, "Sign the DPoP proof with the server's nonce", e.Description)
	case e.Code == oauth.ErrTemporarilyUnavailable.Code:
		return problem(http.StatusServiceUnavailable, e.Code, "The service cannot be reached now", e.Description)
	case e.Status >= 500:
		return problem(http.StatusInternalServerError, "server_error", "Latchkey failed", "")
	default:
		// unauthorized_client (the agent may not use this service), invalid_grant (the person
		// can no longer sign in, the redirect policy refuses the agent, …).
		return problem(http.StatusForbidden, e.Code, "The agent may not use this service for the person", e.Description)
	}
}

package webhook

import (
	"context"
	"net/http"
	"time"

	"latchkey.dev/latchkey/internal/metrics"
	"latchkey.dev/latchkey/internal/tracing"
	"latchkey.dev/latchkey/webhook/exchange"
	"latchkey.dev/latchkey/webhook/oauth"
)

// countedGrant counts what a grant handler answers: issuance by grant type, errors by code,
// and for token exchange the outcome and the refusal's reason.
type countedGrant struct {
	grantType string
	next      oauth.GrantHandler
	m         *metrics.Metrics
}

func (g countedGrant) Grant(ctx context.Context, req *oauth.TokenRequest) (*oauth.TokenResponse, error) {
	resp, err := g.next.Grant(ctx, req)
	var project string
	if req.Project != nil {
		project = req.Project.Key
	}
	if err == nil {
		g.m.TokenIssued(project, g.grantType)
	} else {
		g.m.TokenError(project, g.grantType, oauth.AsError(err).Code)
	}
	if g.grantType == exchange.GrantType {
		outcome, reason := exchangeOutcome(err)
		g.m.Exchange(project, outcome, reason)
	}
	return resp, err
}

func exchangeOutcome(err error) (outcome, reason string) {
	if err == nil {
		return metrics.ExchangeIssued, ""
	}
	e := oauth.AsError(err)
	if r, ok := e.Extra["reason"].(string); ok && r != "" {
		return metrics.ExchangeRefused, r
	}
	switch {
	case e.Code == oauth.ErrTemporarilyUnavailable.Code:
		return metrics.ExchangeUnavailable, ""
	case e.Code == oauth.ErrServerError.Code || e.Status >= 500:
		return metrics.ExchangeError, ""
	}
	return metrics.ExchangeInvalid, ""
}

// spanName names a request's server span: method and route pattern, never the path.
func spanName(r *http.Request) string {
	return metrics.Method(r.Method) + " " + metrics.Route(r.Pattern)
}

// done runs once a request is answered: its server span gets the route pattern, and the access
// log its line.
func (s *Server) done(r *http.Request, route string, status int, elapsed time.Duration) {
	if tracing.Enabled() {
		tracing.Route(r.Context(), metrics.Method(r.Method)+" "+route, route, s.env.Addresses.Address(r))
	}
	s.logRequest(r, route, status, elapsed)
}

// logRequest is the access log: route pattern, never the path (a connect link's code is in
// it) or the query (codes, states); at V(1) so production logs stay quiet unless asked. The
// context logger adds the request's id.
func (s *Server) logRequest(r *http.Request, route string, status int, elapsed time.Duration) {
	// The request's logger is the server's with the id added, so the server's says whether
	// the line is wanted; asking it first spares the request's being made for nothing.
	if !s.env.Logger.V(1).Enabled() {
		return
	}
	log := s.env.Log(r.Context()).V(1)
	kv := []any{"method", r.Method, "route", route, "status", status, "ms", float64(elapsed.Microseconds()) / 1000}
	if ns, name := r.PathValue("ns"), r.PathValue("project"); ns != "" && name != "" {
		kv = append(kv, "project", ns+"/"+name)
	}
	log.Info("request", kv...)
}

// Package metrics holds Latchkey's own Prometheus collectors: HTTP requests by route pattern,
// token issuance and errors by grant type, token-exchange outcomes and refusal reasons,
// upstream refreshes, store latency (observed by the SQL store, see sqlstore.Observe) and the
// event outbox depth.
//
// Label values are always drawn from small, fixed sets: route patterns as registered (never a
// request's path, which can carry a connect-link code), OAuth error codes, grant types the
// token endpoint knows, connector keys an administrator declared. Anything else is folded into
// "other", so a client cannot grow the number of series by sending odd values.
package metrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Exchange outcomes (latchkey_token_exchanges_total{outcome}).
const (
	// ExchangeIssued: the person's upstream token was handed out.
	ExchangeIssued = "issued"
	// ExchangeRefused: refused with a connect link (the reason is counted separately).
	ExchangeRefused = "refused"
	// ExchangeUnavailable: the connected service did not answer or refused Latchkey's own
	// request; asking again may work.
	ExchangeUnavailable = "unavailable"
	// ExchangeInvalid: the request was wrong (bad subject token, unknown audience, client not
	// permitted, …).
	ExchangeInvalid = "invalid"
	// ExchangeError: Latchkey failed (server_error).
	ExchangeError = "error"
)

// Refresh results (latchkey_upstream_refreshes_total{result}).
const (
	RefreshOK       = "ok"
	RefreshRejected = "rejected" // the service refused the refresh token: the person must reconnect
	RefreshTimeout  = "timeout"
	RefreshError    = "error"
)

// errorCodes are the OAuth error codes Latchkey answers with; any other value is "other".
var errorCodes = map[string]bool{
	"invalid_request": true, "invalid_client": true, "invalid_grant": true, "unauthorized_client": true,
	"unsupported_grant_type": true, "invalid_scope": true, "invalid_target": true, "access_denied": true,
	"unsupported_token_type": true, "invalid_token": true, "server_error": true,
	"temporarily_unavailable": true, "invalid_redirect_uri": true, "invalid_client_metadata": true,
}

var refusalReasons = map[string]bool{"connect_required": true, "allow_required": true, "reconnect_required": true}

var refreshResults = map[string]bool{RefreshOK: true, RefreshRejected: true, RefreshTimeout: true, RefreshError: true}

var exchangeOutcomes = []string{ExchangeIssued, ExchangeRefused, ExchangeUnavailable, ExchangeInvalid, ExchangeError}

// Metrics is the set of collectors. Its methods are safe for concurrent use; a nil *Metrics
// records nothing, so callers need not check.
type Metrics struct {
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	inflight  prometheus.Gauge
	issued    *prometheus.CounterVec
	tokenErrs *prometheus.CounterVec
	exchanges *prometheus.CounterVec
	refusals  *prometheus.CounterVec
	refreshes *prometheus.CounterVec
	storeOps  *prometheus.HistogramVec
}

// New creates the collectors and registers them with reg (prometheus.DefaultRegisterer when
// nil). Registering on a registry that already holds them reuses the existing collectors, so
// two servers in one process (tests, replicas in one binary) share the series.
func New(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	m := &Metrics{}
	var err error
	register := func(c prometheus.Collector) prometheus.Collector {
		if err != nil {
			return c
		}
		if e := reg.Register(c); e != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(e, &are) {
				return are.ExistingCollector
			}
			err = fmt.Errorf("metrics: %w", e)
		}
		return c
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c, _ := register(prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)).(*prometheus.CounterVec)
		return c
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		h, _ := register(prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)).(*prometheus.HistogramVec)
		return h
	}

	m.requests = counter("latchkey_http_requests_total",
		"HTTP requests by route pattern, method and status class (2xx, 3xx, 4xx, 5xx).", "route", "method", "code")
	m.duration = histogram("latchkey_http_request_duration_seconds",
		"Time to answer HTTP requests, by route pattern and method.", prometheus.DefBuckets, "route", "method")
	inflight, _ := register(prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "latchkey_http_requests_in_flight", Help: "HTTP requests being served now.",
	})).(prometheus.Gauge)
	m.inflight = inflight
	m.issued = counter("latchkey_tokens_issued_total",
		"Successful token endpoint answers, by grant type.", "grant_type")
	m.tokenErrs = counter("latchkey_token_errors_total",
		"Token endpoint errors raised by a grant handler, by grant type and OAuth error code.", "grant_type", "error")
	m.exchanges = counter("latchkey_token_exchanges_total",
		"Token exchange (RFC 8693) answers by outcome: issued, refused (with a connect link), unavailable, invalid, error.", "outcome")
	m.refusals = counter("latchkey_token_exchange_refusals_total",
		"Token exchange refusals by reason: connect_required, allow_required, reconnect_required.", "reason")
	m.refreshes = counter("latchkey_upstream_refreshes_total",
		"Refreshes of people's tokens at connected services, by connector and result (ok, rejected, timeout, error).", "connector", "result")
	m.storeOps = histogram("latchkey_store_operation_duration_seconds",
		"Time spent in store operations, by operation and result (ok, not_found, conflict, error).",
		[]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}, "operation", "result")
	if err != nil {
		return nil, err
	}
	if m.requests == nil || m.duration == nil || m.inflight == nil || m.issued == nil || m.tokenErrs == nil ||
		m.exchanges == nil || m.refusals == nil || m.refreshes == nil || m.storeOps == nil {
		return nil, errors.New("metrics: a latchkey_* metric is already registered as another kind of collector")
	}
	// Series that alerts divide by exist from the start, so a rate() is 0 rather than absent.
	for _, o := range exchangeOutcomes {
		m.exchanges.WithLabelValues(o)
	}
	for r := range refusalReasons {
		m.refusals.WithLabelValues(r)
	}
	return m, nil
}

// TokenIssued counts a successful token endpoint answer for grantType.
func (m *Metrics) TokenIssued(grantType string) {
	if m == nil {
		return
	}
	m.issued.WithLabelValues(grantType).Inc()
}

// TokenError counts an error a grant handler answered with.
func (m *Metrics) TokenError(grantType, code string) {
	if m == nil {
		return
	}
	m.tokenErrs.WithLabelValues(grantType, errorCode(code)).Inc()
}

// Exchange counts one token exchange answer. reason is the refusal's reason when outcome is
// ExchangeRefused, and ignored otherwise.
func (m *Metrics) Exchange(outcome, reason string) {
	if m == nil {
		return
	}
	switch outcome {
	case ExchangeIssued, ExchangeRefused, ExchangeUnavailable, ExchangeInvalid, ExchangeError:
	default:
		outcome = ExchangeError
	}
	m.exchanges.WithLabelValues(outcome).Inc()
	if outcome == ExchangeRefused {
		if !refusalReasons[reason] {
			reason = "other"
		}
		m.refusals.WithLabelValues(reason).Inc()
	}
}

// UpstreamRefresh counts one refresh at a connected service; it has the shape of
// upstream.Vault.OnRefresh.
func (m *Metrics) UpstreamRefresh(connector, result string) {
	if m == nil {
		return
	}
	if !refreshResults[result] {
		result = RefreshError
	}
	m.refreshes.WithLabelValues(connector, result).Inc()
}

func errorCode(code string) string {
	if errorCodes[code] {
		return code
	}
	return "other"
}

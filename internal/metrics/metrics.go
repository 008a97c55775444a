// Package metrics holds Latchkey's own Prometheus collectors: HTTP requests by route pattern,
// token issuance and errors by grant type, token-exchange outcomes and refusal reasons,
// upstream refreshes, store latency (observed by the SQL store, see sqlstore.Observe) and the
// event outbox depth.
//
// Label values are always drawn from small, fixed sets: route patterns as registered (never a
// request's path, which can carry a connect-link code), OAuth error codes, grant types the
// token endpoint knows, connector keys an administrator declared, and project keys
// ("namespace/name") of Projects in the compiled configuration. Anything else is folded into
// "other", so a client cannot grow the number of series by sending odd values.
package metrics

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"latchkey.dev/latchkey/internal/config"
)

// OtherProject is the project label of anything counted for a project that is not in the
// compiled configuration (or when no configuration is known).
const OtherProject = "other"

// Sign-in methods and results (latchkey_sign_ins_total{method, result}).
const (
	SignInPassword = "password"
	SignInOIDC     = "oidc"

	// SignInOK: the person is signed in.
	SignInOK = "ok"
	// SignInRefused: a wrong password or an unknown person (the page does not say which).
	SignInRefused = "refused"
	// SignInLimited: too many attempts from the address or for the account.
	SignInLimited = "limited"
	// SignInFailed: the sign-in provider refused or failed.
	SignInFailed = "failed"
)

var signInMethods = map[string]bool{SignInPassword: true, SignInOIDC: true}

var signInResults = map[string]bool{SignInOK: true, SignInRefused: true, SignInLimited: true, SignInFailed: true}

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
	signIns   *prometheus.CounterVec
	proxied   *prometheus.CounterVec
	proxyTime *prometheus.HistogramVec

	// projects is the compiled configuration the project label is checked against.
	projects atomic.Pointer[config.Holder]
	// started holds the projects whose exchange series have been created at zero.
	started sync.Map
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
		"Successful token endpoint answers, by grant type and project.", "grant_type", "project")
	m.tokenErrs = counter("latchkey_token_errors_total",
		"Token endpoint errors raised by a grant handler, by grant type, OAuth error code and project.", "grant_type", "error", "project")
	m.exchanges = counter("latchkey_token_exchanges_total",
		"Token exchange (RFC 8693) answers by outcome (issued, refused with a connect link, unavailable, invalid, error) and project.", "outcome", "project")
	m.refusals = counter("latchkey_token_exchange_refusals_total",
		"Token exchange refusals by reason (connect_required, allow_required, reconnect_required) and project.", "reason", "project")
	m.signIns = counter("latchkey_sign_ins_total",
		"Sign-ins to a project's own pages by method (password, oidc) and result (ok, refused, limited, failed).", "project", "method", "result")
	m.refreshes = counter("latchkey_upstream_refreshes_total",
		"Refreshes of people's tokens at connected services, by connector and result (ok, rejected, timeout, error).", "connector", "result")
	m.storeOps = histogram("latchkey_store_operation_duration_seconds",
		"Time spent in store operations, by operation and result (ok, not_found, conflict, error).",
		[]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}, "operation", "result")
	m.proxied = counter("latchkey_proxy_requests_total",
		"Calls through the token proxy and Envoy external authorization, by connector and result: the service's status class (2xx … 5xx), "+
			"refused (Latchkey refused the call), error (the service could not be reached) or authorised (allowed by Envoy external authorization).", "connector", "result")
	m.proxyTime = histogram("latchkey_proxy_upstream_duration_seconds",
		"Time from a proxied call's arrival until the service's answer headers, by connector.",
		[]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}, "connector")
	if err != nil {
		return nil, err
	}
	if m.proxied == nil || m.proxyTime == nil {
		return nil, errors.New("metrics: a latchkey_proxy_* metric is already registered as another kind of collector")
	}
	if m.requests == nil || m.duration == nil || m.inflight == nil || m.issued == nil || m.tokenErrs == nil ||
		m.exchanges == nil || m.refusals == nil || m.refreshes == nil || m.storeOps == nil || m.signIns == nil {
		return nil, errors.New("metrics: a latchkey_* metric is already registered as another kind of collector")
	}
	// Sums over every project (what alerts divide by) exist from the start, so a rate() is 0
	// rather than absent; each project's own series start with its first exchange.
	m.startExchanges(OtherProject)
	return m, nil
}

// startExchanges creates project's exchange series at zero, once.
func (m *Metrics) startExchanges(project string) {
	if _, seen := m.started.LoadOrStore(project, true); seen {
		return
	}
	for _, o := range exchangeOutcomes {
		m.exchanges.WithLabelValues(o, project)
	}
	for r := range refusalReasons {
		m.refusals.WithLabelValues(r, project)
	}
}

// Projects has the project label checked against the configuration h holds: a key of a Project
// in the current snapshot is its own value, anything else is OtherProject. Until it is called
// every project counts as OtherProject. The server calls it with its configuration.
func (m *Metrics) Projects(h *config.Holder) {
	if m == nil {
		return
	}
	m.projects.Store(h)
}

// project is the project label for key.
func (m *Metrics) project(key string) string {
	h := m.projects.Load()
	if h == nil {
		return OtherProject
	}
	if snap := h.Load(); snap != nil && snap.Project(key) != nil {
		return key
	}
	return OtherProject
}

// TokenIssued counts a successful token endpoint answer for grantType in project.
func (m *Metrics) TokenIssued(project, grantType string) {
	if m == nil {
		return
	}
	m.issued.WithLabelValues(grantType, m.project(project)).Inc()
}

// TokenError counts an error a grant handler answered with.
func (m *Metrics) TokenError(project, grantType, code string) {
	if m == nil {
		return
	}
	m.tokenErrs.WithLabelValues(grantType, errorCode(code), m.project(project)).Inc()
}

// Exchange counts one token exchange answer in project. reason is the refusal's reason when
// outcome is ExchangeRefused, and ignored otherwise.
func (m *Metrics) Exchange(project, outcome, reason string) {
	if m == nil {
		return
	}
	switch outcome {
	case ExchangeIssued, ExchangeRefused, ExchangeUnavailable, ExchangeInvalid, ExchangeError:
	default:
		outcome = ExchangeError
	}
	project = m.project(project)
	m.startExchanges(project)
	m.exchanges.WithLabelValues(outcome, project).Inc()
	if outcome == ExchangeRefused {
		if !refusalReasons[reason] {
			reason = "other"
		}
		m.refusals.WithLabelValues(reason, project).Inc()
	}
}

// SignIn counts one sign-in attempt at project's own pages: method is SignInPassword or
// SignInOIDC, result one of the SignIn results.
func (m *Metrics) SignIn(project, method, result string) {
	if m == nil {
		return
	}
	if !signInMethods[method] {
		method = "other"
	}
	if !signInResults[result] {
		result = SignInFailed
	}
	m.signIns.WithLabelValues(m.project(project), method, result).Inc()
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

// Proxy results (latchkey_proxy_requests_total{result}) besides the status classes.
const (
	ProxyRefused    = "refused"
	ProxyError      = "error"
	ProxyAuthorised = "authorised"
)

// ProxyRequest counts one call through the token proxy for connector (a declared Connector's
// key): status is the service's answer (0 when there was none, -1 for a call Envoy external
// authorization allowed, whose answer Latchkey never sees), refused says Latchkey refused the
// call itself, and took, when above zero, is the time until the service's answer headers.
func (m *Metrics) ProxyRequest(connector string, status int, refused bool, took time.Duration) {
	if m == nil {
		return
	}
	result := ProxyError
	switch {
	case refused:
		result = ProxyRefused
	case status == -1:
		result = ProxyAuthorised
	case status >= 100 && status < 600:
		result = fmt.Sprintf("%dxx", status/100)
	}
	m.proxied.WithLabelValues(connector, result).Inc()
	if took > 0 {
		m.proxyTime.WithLabelValues(connector).Observe(took.Seconds())
	}
}

func errorCode(code string) string {
	if errorCodes[code] {
		return code
	}
	return "other"
}

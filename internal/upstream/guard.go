package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/netguard"
	"latchkey.dev/latchkey/internal/tracing"
)

// A Connector's endpoints are written by the team that owns it, so every call the server makes
// to them dials through internal/netguard: public addresses only, plus the ranges its Project
// lists in spec.upstreamNetwork.allowedCIDRs (config.Connector.AllowedNetworks). Link-local
// addresses (cloud metadata) are never dialled. See docs/decisions/0021.

// errTransport: the caller's http.Client has a transport the guard cannot wrap.
var errTransport = errors.New("upstream: the HTTP client's transport must be an *http.Transport, so every dial can be checked")

type guardKey struct {
	base  *http.Transport
	allow string
}

// guarded caches one guarded transport per base transport and allowance, so connections to a
// service are reused across calls.
var guarded sync.Map // guardKey -> *http.Transport

// guardedTransport returns base (http.DefaultTransport when nil) changed to dial only what al
// permits, and never through a proxy or a custom dialer, which would dial past the check.
func guardedTransport(base http.RoundTripper, al netguard.Allowed) (*http.Transport, error) {
	if base == nil {
		base = http.DefaultTransport
	}
	t, ok := base.(*http.Transport)
	if !ok {
		return nil, errTransport
	}
	key := guardKey{base: t, allow: fmt.Sprint([]any{al})}
	if v, ok := guarded.Load(key); ok {
		return v.(*http.Transport), nil
	}
	g := t.Clone()
	g.Proxy = nil
	g.DialTLSContext = nil
	g.DialContext = netguard.Dialer(DefaultTimeout, al).DialContext
	v, _ := guarded.LoadOrStore(key, g)
	return v.(*http.Transport), nil
}

// withClient puts a guarded copy of hc (http.DefaultClient when nil) for c's endpoints where
// x/oauth2 and go-oidc look for their HTTP client, and makes every request ask for JSON
// (GitHub's token endpoint answers form-encoded otherwise).
func withClient(ctx context.Context, hc *http.Client, c *config.Connector) (context.Context, error) {
	cp, err := client(hc, c)
	if err != nil {
		return ctx, err
	}
	ctx = context.WithValue(ctx, oauth2.HTTPClient, cp)
	return oidc.ClientContext(ctx, cp), nil
}

// client is hc (http.DefaultClient when nil) with its transport guarded for c, asking for JSON.
func client(hc *http.Client, c *config.Connector) (*http.Client, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	t, err := guardedTransport(hc.Transport, netguard.Allowed(c.AllowedNetworks))
	if err != nil {
		return nil, err
	}
	cp := *hc
	cp.Transport = traced(t)
	if needsDialect(c) {
		cp.Transport = dialect{base: cp.Transport, c: c}
	}
	return &cp, nil
}

// tracedTransports caches one traced transport per guarded transport (see guarded).
var tracedTransports sync.Map // *http.Transport -> http.RoundTripper

// traced is t asking for JSON, each call a client span with the W3C traceparent sent along
// when tracing is on (internal/tracing).
func traced(t *http.Transport) http.RoundTripper {
	if v, ok := tracedTransports.Load(t); ok {
		return v.(http.RoundTripper)
	}
	v, _ := tracedTransports.LoadOrStore(t, tracing.Transport("upstream", acceptJSON{t}))
	return v.(http.RoundTripper)
}

type acceptJSON struct{ base http.RoundTripper }

func (a acceptJSON) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("Accept") == "" {
		r = r.Clone(r.Context())
		r.Header.Set("Accept", "application/json")
	}
	return a.base.RoundTrip(r)
}

// failure is the error every call to a service ends with. Its text is ours alone — which call,
// the HTTP status, the OAuth error code — and never what the service sent: an error body or an
// error_description can carry anything, a token or a secret echoed back included, and error
// texts end up in logs. The service's own error (an *oauth2.RetrieveError, with the body) stays
// in the chain for errors.As.
type failure struct {
	kind  error // ErrService, ErrTimeout or ErrNotAllowed
	what  string
	cause error
}

func (f *failure) Error() string { return f.kind.Error() + ": " + f.what }

func (f *failure) Unwrap() []error {
	if f.cause == nil {
		return []error{f.kind}
	}
	return []error{f.kind, f.cause}
}

func fail(kind error, what string, cause error) error {
	return &failure{kind: kind, what: what, cause: cause}
}

// Status returns what a log line may say about a failed call to a service: the HTTP status of
// the answer (0 when there was none) and the OAuth error code, only if it looks like one.
func Status(err error) (httpStatus int, code string) {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		if re.Response != nil {
			httpStatus = re.Response.StatusCode
		}
		return httpStatus, ErrorCode(re.ErrorCode)
	}
	var f *failure
	if errors.As(err, &f) {
		var st *statusError
		if errors.As(f.cause, &st) {
			return st.status, ""
		}
	}
	return 0, ""
}

// statusError is a non-success answer whose body was not kept.
type statusError struct{ status int }

func (s *statusError) Error() string { return fmt.Sprintf("answered HTTP %d", s.status) }

// ErrorCode keeps an OAuth error code for logs and audit records only if it looks like one
// (lower-case letters and '_', at most 64): anything else the service sent is "other".
func ErrorCode(s string) string {
	if s == "" {
		return ""
	}
	if len(s) > 64 {
		return "other"
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && r != '_' {
			return "other"
		}
	}
	return s
}

// classify turns the error of a call to a service into a failure saying which call (what)
// failed and how, without anything the service sent.
func classify(ctx context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	var f *failure
	if errors.As(err, &f) {
		return err
	}
	if errors.Is(err, netguard.ErrNotPublic) || errors.Is(err, errTransport) {
		return fail(ErrNotAllowed, what+": the address is not public and the Project does not allow it", err)
	}
	if isTimeout(ctx, err) {
		return fail(ErrTimeout, what+": no answer in time", err)
	}
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		msg := what + ": answered"
		if re.Response != nil {
			msg += fmt.Sprintf(" HTTP %d", re.Response.StatusCode)
		}
		if code := ErrorCode(re.ErrorCode); code != "" {
			msg += " " + code
		}
		return fail(ErrService, msg, re)
	}
	var st *statusError
	if errors.As(err, &st) {
		return fail(ErrService, what+": "+st.Error(), err)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		// A transport failure (refused, reset, a certificate problem): nothing the service sent.
		return fail(ErrService, what+": "+ue.Err.Error(), err)
	}
	return fail(ErrService, what+" failed", err)
}

// Transport is the round tripper for calls to c's API on a person's behalf (the token proxy,
// webhook/proxy): every dial checked against c's networks like every other call to c, never
// through a proxy, traced. Connections are reused across calls: unlike the few calls to a
// service's OAuth endpoints, the proxy sends an agent's whole traffic, so its pool keeps enough
// idle connections per service for calls in parallel (proxyBase), and HTTP/2 is used where the
// service offers it. The proxy asks for uncompressed answers itself, and sets Accept when the
// agent did not (the requests are its own, so nothing is cloned here).
func Transport(c *config.Connector) (http.RoundTripper, error) {
	t, err := guardedTransport(proxyBase, netguard.Allowed(c.AllowedNetworks))
	if err != nil {
		return nil, err
	}
	if v, ok := tracedTransports.Load(t); ok {
		return v.(http.RoundTripper), nil
	}
	v, _ := tracedTransports.LoadOrStore(t, tracing.Transport("upstream", t))
	return v.(http.RoundTripper), nil
}

// proxyBase is the token proxy's transport before the guard: http.DefaultTransport's
// timeouts, with idle connections for 64 calls in parallel per service (the default keeps
// two, so a busy agent would open and close a connection on most calls), and no transparent
// decompression (the proxy streams the bytes it gets and asks for them uncompressed).
var proxyBase = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 512
	t.MaxIdleConnsPerHost = 64
	t.ForceAttemptHTTP2 = true
	t.DisableCompression = true
	return t
}()

// Package proxy is the token proxy: an agent calls {issuer}/proxy/{audience}/{path} with its
// own Latchkey access token, and Latchkey forwards the call to the Connector's API with the
// person's upstream token in its place, so the upstream token never reaches the agent
// (docs/token-proxy.md). Whether the call may go is token exchange's decision, made through
// exchange.Grant.Use: the same checks, the same refresh, the same refusals with a connect link,
// answered here as RFC 9457 problem details. The Connector says which methods and paths pass
// (spec.proxy); without it nothing does. Envoy external authorization (webhook/extauthz)
// decides through the same Gate.
package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/webhook/site"
)

// Route is the proxy's pattern under each issuer.
const Route = "/proxy/{connector}/{path...}"

// DefaultHeaderTimeout bounds the wait for a service's answer headers; the body then streams
// for as long as the server's write timeout allows.
const DefaultHeaderTimeout = 30 * time.Second

// Options configure the proxy.
type Options struct {
	// HeaderTimeout bounds the wait for the service's answer headers (DefaultHeaderTimeout
	// when zero); the agent gets 504 after it.
	HeaderTimeout time.Duration
	// Transport returns the round tripper for a connector's API; upstream.Transport (every
	// dial through the address guard) when nil.
	Transport func(*config.Connector) (http.RoundTripper, error)
}

// Handler is the token proxy.
type Handler struct {
	env           *site.Env
	gate          *Gate
	tally         *Tally
	headerTimeout time.Duration
	transport     func(*config.Connector) (http.RoundTripper, error)
	// transports remembers each compiled Connector's round tripper (roundTripper).
	transports  sync.Map // *config.Connector -> http.RoundTripper
	ntransports atomic.Int64
}

// maxTransports bounds the remembered round trippers: every config reload compiles new
// Connectors, so the map is emptied once it holds this many.
const maxTransports = 1024

// roundTripper is c's round tripper, looked up once per compiled Connector rather than on
// every call.
func (h *Handler) roundTripper(c *config.Connector) (http.RoundTripper, error) {
	if v, ok := h.transports.Load(c); ok {
		return v.(http.RoundTripper), nil
	}
	rt, err := h.transport(c)
	if err != nil {
		return nil, err
	}
	if h.ntransports.Add(1) > maxTransports {
		h.transports.Clear()
		h.ntransports.Store(1)
	}
	h.transports.Store(c, rt)
	return rt, nil
}

// New returns the proxy, deciding through use (token exchange).
func New(env *site.Env, st Store, use User, o Options) *Handler {
	h := &Handler{
		env: env, gate: NewGate(env, st, use), tally: NewTally(env),
		headerTimeout: o.HeaderTimeout, transport: o.Transport,
	}
	if h.headerTimeout <= 0 {
		h.headerTimeout = DefaultHeaderTimeout
	}
	if h.transport == nil {
		h.transport = upstream.Transport
	}
	return h
}

// Register mounts the proxy under every issuer.
func Register(rt site.Router, h *Handler) { rt.API(Route, h) }

// Gate is the decision the proxy makes, for Envoy external authorization.
func (h *Handler) Gate() *Gate { return h.gate }

// Tally counts the proxy's calls for the audit log, for Envoy external authorization too.
func (h *Handler) Tally() *Tally { return h.tally }

// ServeHTTP decides the call and forwards it.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	p := site.Project(r)
	ip := site.IssuerPath(p)
	name, path, ok := split(ip, r.URL.EscapedPath())
	label := metricLabel(p, name)
	if !ok {
		h.env.Metrics.ProxyRequest(label, 0, true, 0)
		problem(http.StatusBadRequest, "invalid_path", "The path cannot be forwarded", errPath.Error()).Write(w)
		return
	}
	pass, pr := h.gate.Decide(r.Context(), Call{
		Project: p, Connector: name, Method: r.Method, Path: path,
		HTU: strings.TrimSuffix(p.Issuer, ip) + r.URL.EscapedPath(), Header: r.Header,
	})
	if pr != nil {
		h.env.Metrics.ProxyRequest(label, 0, true, 0)
		pr.Write(w)
		return
	}
	h.forward(w, r, p, pass, start)
}

// split cuts an escaped request path into the connector's audience and the escaped path at
// the service; ok is false when it is not under issuerPath/proxy/.
func split(issuerPath, escaped string) (connector, path string, ok bool) {
	rest, ok := strings.CutPrefix(escaped, issuerPath+"/proxy/")
	if !ok {
		return "", "", false
	}
	seg, tail, _ := strings.Cut(rest, "/")
	connector, err := url.PathUnescape(seg)
	if err != nil || connector == "" {
		return "", "", false
	}
	return connector, "/" + tail, true
}

// metricLabel is the connector's key, or "other" for a name no connector has.
func metricLabel(p *config.Project, audience string) string {
	if c := p.ConnectorsByAudience[audience]; c != nil {
		return c.Key
	}
	return "other"
}

// forward sends the call with the person's token and streams the answer back, keeping the
// token out of it.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, p *config.Project, pass Pass, start time.Time) {
	c := pass.Connector
	target := c.Proxy.BaseURL + pass.Path
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	body := r.Body
	if r.ContentLength == 0 {
		body = http.NoBody
	}
	//nolint:gosec // G704: the address is the Connector's compiled apiBaseURL and a checked path; the dial goes through the address guard
	out, err := http.NewRequestWithContext(ctx, r.Method, target, body)
	if err != nil {
		// The base URL was checked when compiled, and the path is clean.
		h.env.Log(ctx).Error(err, "cannot make the proxied request", "connector", c.Key)
		problem(http.StatusInternalServerError, "server_error", "Latchkey failed", "").Write(w)
		return
	}
	out.ContentLength = r.ContentLength
	requestHeaders(out.Header, r.Header, c)
	out.Header.Set(pass.HeaderName, pass.HeaderValue)
	rt, err := h.roundTripper(c)
	if err != nil {
		h.env.Log(ctx).Error(err, "no transport for the connector", "connector", c.Key)
		problem(http.StatusInternalServerError, "server_error", "Latchkey failed", "").Write(w)
		return
	}
	timer := time.AfterFunc(h.headerTimeout, cancel)
	resp, err := rt.RoundTrip(out)
	inTime := timer.Stop()
	took := time.Since(start)
	if err != nil {
		h.env.Metrics.ProxyRequest(c.Key, 0, false, 0)
		h.tally.Add(ctx, p.Key, pass.Subject, pass.Agent, c.Key, 0, h.env.Clock())
		h.unanswered(w, r, c, err, inTime)
		return
	}
	defer resp.Body.Close()
	h.env.Metrics.ProxyRequest(c.Key, resp.StatusCode, false, took)
	h.tally.Add(ctx, p.Key, pass.Subject, pass.Agent, c.Key, resp.StatusCode, h.env.Clock())
	responseHeaders(w.Header(), resp.Header, pass.Token)
	w.WriteHeader(resp.StatusCode)
	if err := stream(w, resp.Body, resp.ContentLength, pass.Token); err != nil {
		// The answer is cut short: abort the connection, so the agent does not take a
		// truncated body for a whole one.
		panic(http.ErrAbortHandler)
	}
}

// unanswered answers a call the service did not answer: 504 when it took too long, 502 when
// it could not be reached (the address guard refused the dial, the connection failed).
func (h *Handler) unanswered(w http.ResponseWriter, r *http.Request, c *config.Connector, err error, inTime bool) {
	service := c.DisplayName
	if service == "" {
		service = c.Audience
	}
	switch {
	case r.Context().Err() != nil:
		// The agent went away; nobody reads an answer.
		return
	case !inTime || errors.Is(err, context.DeadlineExceeded):
		problem(http.StatusGatewayTimeout, "upstream_timeout", "The service did not answer in time", service+" did not answer in time; try again").Write(w)
	default:
		h.env.Log(r.Context()).Info("proxied call failed", "connector", c.Key, "error", err.Error())
		problem(http.StatusBadGateway, "upstream_unreachable", "The service cannot be reached", service+" could not be reached").Write(w)
	}
}

// hopByHop are the headers of one connection (RFC 9110 §7.6.1), never forwarded either way.
var hopByHop = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// agentOnly are the agent's headers that are Latchkey's, not the service's: its Latchkey
// credentials, its cookies, and where it connected.
var agentOnly = []string{
	"Authorization", "Dpop", "Cookie", "Host", "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto",
}

// requestDrop and responseDrop are the headers never forwarded, canonically spelled.
var requestDrop, responseDrop = set(hopByHop, agentOnly), set(hopByHop, serviceOnly)

func set(lists ...[]string) map[string]bool {
	m := map[string]bool{}
	for _, l := range lists {
		for _, k := range l {
			m[k] = true
		}
	}
	return m
}

// named is the set of headers the Connection header names (RFC 9110 §7.6.1), nil without one:
// most calls have none, and then nothing is allocated.
func named(h http.Header) map[string]bool {
	vs := h["Connection"]
	if len(vs) == 0 {
		return nil
	}
	m := map[string]bool{}
	for _, v := range vs {
		for f := range strings.SplitSeq(v, ",") {
			m[http.CanonicalHeaderKey(strings.TrimSpace(f))] = true
		}
	}
	return m
}

// requestHeaders copies the agent's headers to the service's request, less the hop-by-hop
// ones, those the Connection header names, the agent's own credentials and cookies, and the
// header the person's token goes in; then the Connector's own headers. The answer is asked for
// uncompressed, so the token can be kept out of it (stream), and as JSON when the agent did
// not say (what a service's API answers by default is not always JSON).
func requestHeaders(dst, src http.Header, c *config.Connector) {
	conn := named(src)
	apiKey := ""
	if c.APIKey != nil {
		apiKey = http.CanonicalHeaderKey(c.APIKey.Header)
	}
	for k, vs := range src {
		// The server parsed the request's headers into canonical form already.
		if requestDrop[k] || conn[k] || k == apiKey {
			continue
		}
		dst[k] = append([]string(nil), vs...)
	}
	for k, v := range c.Headers {
		dst.Set(k, v)
	}
	dst["Accept-Encoding"] = []string{"identity"}
	if len(dst["Accept"]) == 0 {
		dst["Accept"] = []string{"application/json"}
	}
}

// serviceOnly are the service's headers the agent never gets: its cookies (a session at the
// service is the person's), credentials it might echo, and caching (every answer carries the
// person's data, so Latchkey's no-store stays).
var serviceOnly = []string{
	"Set-Cookie", "Set-Cookie2", "Authorization", "Authentication-Info", "Cache-Control", "Pragma", "Expires",
}

// responseHeaders copies the service's headers to the agent's answer, less the hop-by-hop
// ones, those the Connection header names, serviceOnly, any whose value holds the person's
// token (a WWW-Authenticate quoting it), and any Latchkey already set (its security headers).
func responseHeaders(dst, src http.Header, token string) {
	conn := named(src)
	for k, vs := range src {
		ck := http.CanonicalHeaderKey(k)
		if responseDrop[ck] || conn[ck] || len(dst[ck]) > 0 {
			continue
		}
		kept := make([]string, 0, len(vs))
		for _, v := range vs {
			if clearOf(v, token) {
				kept = append(kept, v)
			}
		}
		if len(kept) > 0 {
			dst[ck] = kept
		}
	}
}

// streamBuffers are stream's buffers, reused across calls: a read buffer and room for the
// bytes held back.
var streamBuffers = sync.Pool{New: func() any { return new(streamBuffer) }}

type streamBuffer struct {
	read    [32 << 10]byte
	pending []byte
}

// stream copies the service's answer to the agent as it arrives, flushing every read, so a
// large or slow answer is never held whole. Any occurrence of the person's token (a service
// echoing the request's headers) is overwritten with '*' of the same length, so Content-Length
// stays right; to catch one split across reads, the last len(token)-1 bytes wait for the next.
// length is the answer's Content-Length (-1 when unknown): the read that completes it is not
// flushed separately, so a small answer goes out in one write.
func stream(w http.ResponseWriter, body io.Reader, length int64, token string) error {
	rc := http.NewResponseController(w)
	keep := max(len(token)-1, 0)
	sb := streamBuffers.Get().(*streamBuffer)
	defer streamBuffers.Put(sb)
	buf := sb.read[:]
	pending := sb.pending[:0]
	defer func() { sb.pending = pending[:0] }()
	var read int64
	for {
		n, err := body.Read(buf)
		read += int64(n)
		if n > 0 {
			pending = append(pending, buf[:n]...)
			mask(pending, token)
			// The last part waits for the end of the body, and goes out in one write with
			// whatever was held back.
			last := errors.Is(err, io.EOF) || read == length
			if cut := len(pending) - keep; cut > 0 && !last {
				if _, werr := w.Write(pending[:cut]); werr != nil {
					return werr
				}
				pending = append(pending[:0], pending[cut:]...)
				_ = rc.Flush()
			}
		}
		if errors.Is(err, io.EOF) {
			_, werr := w.Write(pending)
			return werr
		}
		if err != nil {
			return err
		}
	}
}

// mask overwrites every occurrence of token in b.
func mask(b []byte, token string) {
	if token == "" {
		return
	}
	t := []byte(token)
	for i := 0; ; {
		j := bytes.Index(b[i:], t)
		if j < 0 {
			return
		}
		for k := range t {
			b[i+j+k] = '*'
		}
		i += j + len(t)
	}
}

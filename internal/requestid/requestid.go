// Package requestid gives every HTTP request an id that a person can quote and an operator can
// find: in the X-Request-Id response header, on every log line of the request, on error pages
// and in OAuth error responses, and (with tracing on) as the request's trace id.
//
// Where the id comes from, in order (docs/decisions/0034-traces-and-request-ids.md):
//  1. with tracing on, the trace id of the request's server span, which continues the caller's
//     W3C traceparent when there is one: the id finds the trace;
//  2. an X-Request-Id set by a trusted proxy (the peers --trusted-proxies lists), when it has
//     the shape of an id (Valid): an ingress controller's id then finds its own log lines too;
//  3. otherwise a new random one, 32 hex digits like a trace id.
//
// An X-Request-Id from anyone else is ignored: it is the client's own text, and it would end up
// in logs and on pages.
package requestid

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace"
)

// Header carries the id in responses (and, from a trusted proxy, in requests).
const Header = "X-Request-Id"

// MaxLen bounds an id taken from a proxy.
const MaxLen = 64

// Valid reports whether s can be used as an id: 1 to MaxLen characters from A-Z, a-z, 0-9 and
// "-", "_", ".". That covers UUIDs, ingress-nginx's hex ids and trace ids, and keeps out
// anything that could break a log line or a page.
func Valid(s string) bool {
	if s == "" || len(s) > MaxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// New returns a new random id.
func New() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

type key struct{}

// entry is what Middleware puts in a request's context: the id, its response header's value
// (so the header costs no slice of its own) and where the request's logger comes from. The
// logger carrying the id is made when something logs (Logger), not for every request: most
// requests log nothing.
type entry struct {
	id     string
	header [1]string
	log    func() logr.Logger
}

// FromContext returns the request's id, or "" outside a request.
func FromContext(ctx context.Context) string {
	if e, _ := ctx.Value(key{}).(*entry); e != nil {
		return e.id
	}
	return ""
}

// Middleware gives each request an id (see the package comment), sets the response header
// before next runs (so pages and errors can read it from the response), and puts the id in the
// request's context, where Logger finds it and adds it as request_id to the request's log
// lines. log returns the logger to add the id to, read when a line is logged (a test may
// replace the server's logger after start). trusted says whether r comes from a proxy whose
// X-Request-Id may be used; nil trusts nobody.
func Middleware(next http.Handler, log func() logr.Logger, trusted func(*http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e := &entry{id: choose(r, trusted), log: log}
		e.header[0] = e.id
		w.Header()[Header] = e.header[:]
		r2 := r.WithContext(context.WithValue(r.Context(), key{}, e))
		next.ServeHTTP(w, r2)
		// The route pattern the server's mux found is on the copy; outer layers (the server
		// span's name) read it from the original.
		r.Pattern = r2.Pattern
	})
}

func choose(r *http.Request, trusted func(*http.Request) bool) string {
	if sc := trace.SpanContextFromContext(r.Context()); sc.IsValid() {
		return sc.TraceID().String()
	}
	if trusted != nil {
		if v := r.Header.Get(Header); Valid(v) && trusted(r) {
			return v
		}
	}
	return New()
}

// Logger returns the request's logger, which adds its id as request_id to every line; outside
// a request, the context logger of ctx (logr.FromContext) or, without one, fallback.
func Logger(ctx context.Context, fallback logr.Logger) logr.Logger {
	if e, _ := ctx.Value(key{}).(*entry); e != nil {
		return WithID(e.log(), e.id)
	}
	if l, err := logr.FromContext(ctx); err == nil {
		return l
	}
	return fallback
}

// WithID is log with request_id added to each line it writes. It adds the pair when a line is
// written rather than with WithValues, which makes the slog handler format it up front on every
// request, most of which log nothing.
func WithID(log logr.Logger, id string) logr.Logger {
	if log.GetSink() == nil || id == "" {
		return log
	}
	return log.WithSink(idSink{LogSink: log.GetSink(), id: id})
}

type idSink struct {
	logr.LogSink
	id string
}

func (s idSink) Info(level int, msg string, kv ...any) {
	s.LogSink.Info(level, msg, append([]any{"request_id", s.id}, kv...)...)
}

func (s idSink) Error(err error, msg string, kv ...any) {
	s.LogSink.Error(err, msg, append([]any{"request_id", s.id}, kv...)...)
}

func (s idSink) WithValues(kv ...any) logr.LogSink {
	return idSink{LogSink: s.LogSink.WithValues(kv...), id: s.id}
}

func (s idSink) WithName(name string) logr.LogSink {
	return idSink{LogSink: s.LogSink.WithName(name), id: s.id}
}

// WithCallDepth keeps the caller's line right for sinks that report it.
func (s idSink) WithCallDepth(depth int) logr.LogSink {
	if cd, ok := s.LogSink.(logr.CallDepthLogSink); ok {
		return idSink{LogSink: cd.WithCallDepth(depth), id: s.id}
	}
	return s
}

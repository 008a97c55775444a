package metrics

import (
	"net/http"
	"strings"
	"time"
)

// Unmatched is the route label of a request no pattern matched (wrong method, a path the
// server redirects to its clean form).
const Unmatched = "unmatched"

// Done is told about each request once it has been answered: its route pattern (never the raw
// path), the status and how long it took. The access log uses it.
type Done func(r *http.Request, route string, status int, elapsed time.Duration)

// Instrument wraps a handler whose routing is done by http.ServeMux: once the request has been
// answered, r.Pattern holds the pattern that matched ("POST /{ns}/{project}/token"), which is
// what the route label shows. The method in a pattern moves to the method label. done may be
// nil; with a nil *Metrics only done is called.
func (m *Metrics) Instrument(next http.Handler, done Done) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		if m != nil {
			m.inflight.Inc()
			defer m.inflight.Dec()
		}
		rw := &recorder{ResponseWriter: w}
		defer func() {
			// A handler that aborts (http.ErrAbortHandler) or panics past the server's own
			// recovery still counts, as the 500 the client sees, or no answer at all.
			if v := recover(); v != nil {
				if !rw.wrote {
					rw.status = http.StatusInternalServerError
				}
				m.observe(r, rw.status, start, done)
				panic(v)
			}
			m.observe(r, rw.status, start, done)
		}()
		next.ServeHTTP(rw, r)
		if !rw.wrote {
			rw.status = http.StatusOK
		}
	})
}

func (m *Metrics) observe(r *http.Request, status int, start time.Time, done Done) {
	elapsed := time.Since(start)
	route := Route(r.Pattern)
	method := Method(r.Method)
	if m != nil {
		m.requests.WithLabelValues(route, method, StatusClass(status)).Inc()
		m.duration.WithLabelValues(route, method).Observe(elapsed.Seconds())
	}
	if done != nil {
		done(r, route, status, elapsed)
	}
}

// Route is the route label of a ServeMux pattern: the pattern without its method.
func Route(pattern string) string {
	if pattern == "" {
		return Unmatched
	}
	if i := strings.IndexAny(pattern, " \t"); i >= 0 {
		pattern = strings.TrimLeft(pattern[i:], " \t")
	}
	return pattern
}

// Method folds a request method into a small set of label values.
func Method(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete,
		http.MethodOptions, http.MethodPatch:
		return m
	}
	return "other"
}

// StatusClass is "2xx" for 200–299 and so on; a status no handler set counts as 2xx.
func StatusClass(status int) string {
	switch {
	case status == 0:
		return "2xx"
	case status < 200:
		return "1xx"
	case status < 300:
		return "2xx"
	case status < 400:
		return "3xx"
	case status < 500:
		return "4xx"
	default:
		return "5xx"
	}
}

// recorder remembers the status a handler answered with.
type recorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *recorder) WriteHeader(code int) {
	if !w.wrote && code >= 200 {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	return w.ResponseWriter.Write(b)
}

// Flush passes through, for handlers that stream.
func (w *recorder) Flush() {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection (deadlines, hijacking).
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

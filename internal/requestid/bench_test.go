package requestid_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-logr/logr"

	"latchkey.dev/latchkey/internal/requestid"
)

// BenchmarkMiddleware is what the request id costs every request: the id, the header, the
// context and the context logger (a JSON slog logger, as in production), the handler logging
// nothing.
func BenchmarkMiddleware(b *testing.B) {
	log := logr.FromSlogHandler(slog.NewJSONHandler(io.Discard, nil)) //nolint:sloglint // the JSON handler, as in production: DiscardHandler would skip the work measured
	h := requestid.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), func() logr.Logger { return log }, nil)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, r)
	}
}

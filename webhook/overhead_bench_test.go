package webhook_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"latchkey.dev/latchkey/internal/tracing"
	"latchkey.dev/latchkey/test/stack"
)

// BenchmarkCheapRequest serves the issuer's metadata document, one request at a time, through
// the whole handler: what every request pays for routing, security headers, metrics, the access
// log and the request id, with almost nothing else on top; "on" adds a server span exported
// (in batches, as in production) to an exporter that drops it.
//
//	go test ./webhook -run '^$' -bench CheapRequest -count 6
func BenchmarkCheapRequest(b *testing.B) {
	h := stack.New(b, stack.Options{})
	req := httptest.NewRequest(http.MethodGet, h.Issuer+"/.well-known/oauth-authorization-server", nil)
	serve := func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			w := httptest.NewRecorder()
			h.Server().ServeHTTP(w, req)
			if w.Code != http.StatusOK {
				b.Fatalf("status %d", w.Code)
			}
		}
	}
	b.Run("off", serve)
	b.Run("on", func(b *testing.B) {
		tp := tracing.NewProvider(tracetest.NewNoopExporter(), false)
		defer tp.Shutdown(context.Background())
		defer tracing.Use(tp)()
		serve(b)
	})
}

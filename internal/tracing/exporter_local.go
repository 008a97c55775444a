//go:build latchkey_local

package tracing

import (
	"context"
	"errors"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// errNoExporter is what Install answers, in the build `make run-local` makes, when an OTLP
// endpoint is configured: that build leaves out the exporter, whose packages link gRPC's
// (docs/decisions/0084-local-build-links-what-it-serves.md).
var errNoExporter = errors.New("tracing: this build of latchkey has no OTLP exporter (it was built for `make run-local`); " +
	"build with `make build` to send traces, or unset --otlp-traces-endpoint and OTEL_EXPORTER_OTLP_*ENDPOINT")

func newExporter(context.Context, string) (sdktrace.SpanExporter, error) {
	return nil, errNoExporter
}

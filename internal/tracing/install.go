package tracing

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Options say where spans go.
type Options struct {
	// Endpoint is the OTLP/HTTP traces URL (https://collector:4318/v1/traces), used as written,
	// like OTEL_EXPORTER_OTLP_TRACES_ENDPOINT. Empty means the standard environment variables
	// decide: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces
	// appended. With neither, tracing stays off.
	Endpoint string
	// Version is the service.version resource attribute.
	Version string
	// Logger receives the SDK's own errors (an unreachable collector).
	Logger logr.Logger
}

// Configured reports whether o (or the environment) names an OTLP endpoint and tracing is not
// turned off with OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none.
func Configured(o Options) bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(os.Getenv("OTEL_TRACES_EXPORTER"), "none") {
		return false
	}
	return o.Endpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// Install turns tracing on when an endpoint is configured (Configured) and returns the function
// that flushes and stops it; when none is, it changes nothing and returns a shutdown that does
// nothing. The other OTEL_* variables the OpenTelemetry SDK knows apply as usual: headers
// (OTEL_EXPORTER_OTLP_HEADERS), a CA (OTEL_EXPORTER_OTLP_CERTIFICATE), the sampler
// (OTEL_TRACES_SAMPLER, parent-based always-on by default), resource attributes
// (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME).
func Install(ctx context.Context, o Options) (shutdown func(context.Context) error, err error) {
	if !Configured(o) {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := newExporter(ctx, o.Endpoint)
	if err != nil {
		return nil, err
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "latchkey"), attribute.String("service.version", o.Version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // last, so OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	otel.SetLogger(o.Logger)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		o.Logger.Error(err, "sending traces failed")
	}))
	tp := NewProvider(exp, false, sdktrace.WithResource(res))
	restore := Use(tp)
	return func(ctx context.Context) error {
		restore()
		return tp.Shutdown(ctx)
	}, nil
}

// NewProvider returns an SDK TracerProvider that hands every finished span to exp after
// Redact: in batches, or one by one when sync is set (tests with an in-memory exporter).
func NewProvider(exp sdktrace.SpanExporter, sync bool, opts ...sdktrace.TracerProviderOption) *sdktrace.TracerProvider {
	r := redacting{exp}
	if sync {
		opts = append(opts, sdktrace.WithSyncer(r))
	} else {
		opts = append(opts, sdktrace.WithBatcher(r))
	}
	return sdktrace.NewTracerProvider(opts...)
}

// Package tracing is Latchkey's OpenTelemetry tracing: off unless an OTLP endpoint is
// configured, and then one span per HTTP request served (named by its route pattern), per
// store operation, per call to a connected service, sign-in provider or client ID metadata
// document, and per event-sink delivery, with W3C trace context sent on every outgoing call.
//
// Everything is wired once, at start-up, to this package's own TracerProvider, which forwards
// to whatever Install (or Use, in tests) put in place and to nothing before that. While no
// provider is installed the instrumented paths cost one atomic load: Enabled is false, Start
// returns a no-op span without touching the context, and Handler and Transport call straight
// through to what they wrap. See docs/decisions/0034-traces-and-request-ids.md.
//
// Spans never carry secrets: attributes are ids, names, route patterns and outcomes chosen
// here, and what the instrumentation libraries record about URLs (the full URL of an outgoing
// call, the path and query of an incoming request, error texts quoting them) is reduced to
// scheme and host, or the route pattern, before any exporter sees it (see redact.go).
package tracing

import (
	"context"
	"net/http"
	"sync/atomic"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of Latchkey's own spans.
const ScopeName = "latchkey.dev/latchkey"

// installed is the provider spans go to; nil while tracing is off.
var installed atomic.Pointer[active]

type active struct {
	tp     trace.TracerProvider
	tracer trace.Tracer
}

// Use makes tp receive every span from now on and returns a function that puts back what was
// there before. Install calls it; tests call it with an SDK provider around an in-memory
// exporter (NewProvider). A nil tp turns tracing off.
func Use(tp trace.TracerProvider) (restore func()) {
	var next *active
	if tp != nil {
		next = &active{tp: tp, tracer: tp.Tracer(ScopeName)}
	}
	prev := installed.Swap(next)
	return func() { installed.Store(prev) }
}

// Enabled reports whether spans are recorded at all.
func Enabled() bool { return installed.Load() != nil }

// Propagator is the only propagation format Latchkey reads and writes: W3C trace context
// (traceparent, tracestate). Baggage is neither read nor sent, so nothing a caller puts there
// reaches a connected service.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// noopSpan is what Start returns while tracing is off.
var noopSpan trace.Span = noop.Span{}

// Start starts a span named name (an operation, never a value from the request) as a child of
// ctx's span. While tracing is off it returns ctx unchanged and a span whose methods do
// nothing.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	a := installed.Load()
	if a == nil {
		return ctx, noopSpan
	}
	return a.tracer.Start(ctx, name, opts...)
}

// Fail marks span as failed with description, which must be Latchkey's own words (a result
// class, a reason constant), never an error text from a database or a service.
func Fail(span trace.Span, description string) {
	span.SetStatus(codes.Error, description)
}

// provider is the TracerProvider every instrumentation is built with: it forwards each span to
// the installed provider at the moment the span starts, so instrumentation built before
// Install, or kept across a test's Use, follows it.
type provider struct{ embedded.TracerProvider }

func (provider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return tracer{name: name, opts: opts}
}

type tracer struct {
	embedded.Tracer
	name string
	opts []trace.TracerOption
}

func (t tracer) Start(ctx context.Context, spanName string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	a := installed.Load()
	if a == nil {
		return ctx, noopSpan
	}
	return a.tp.Tracer(t.name, t.opts...).Start(ctx, spanName, opts...)
}

// Handler traces the requests next serves as server spans: the caller's W3C trace context is
// continued, and the span is named by name(r) once next has routed r (Route renames it).
// While tracing is off next is called directly.
func Handler(next http.Handler, name func(*http.Request) string) http.Handler {
	traced := otelhttp.NewMiddleware("",
		otelhttp.WithTracerProvider(provider{}),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()), // Prometheus has the metrics
		otelhttp.WithPropagators(Propagator),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return name(r) }),
	)(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if Enabled() {
			traced.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Route names the server span of ctx after the route pattern that served it and records the
// pattern as http.route and url.path: the path itself never goes into a span (a connect link's
// code is part of its path). client is the client's address as the server trusts it (the peer,
// or what a trusted proxy says); it replaces the instrumentation's client.address, which
// believes any X-Forwarded-For.
func Route(ctx context.Context, name, route, client string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetName(name)
	span.SetAttributes(attribute.String("http.route", route), attribute.String("url.path", route),
		attribute.String("client.address", client))
}

// Transport traces the calls made through base (http.DefaultTransport when nil) as client
// spans named "<peer> <METHOD>" (peer says what is called: "upstream", "sign-in provider",
// "client metadata", "event sink") and sends the W3C traceparent header with each. While
// tracing is off base is called directly.
func Transport(peer string, base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	if _, ok := base.(*transport); ok {
		return base
	}
	return &transport{
		base: base,
		traced: otelhttp.NewTransport(base,
			otelhttp.WithTracerProvider(provider{}),
			otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
			otelhttp.WithPropagators(Propagator),
			otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return peer + " " + r.Method }),
		),
	}
}

type transport struct {
	base   http.RoundTripper
	traced http.RoundTripper
}

func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	if Enabled() {
		return t.traced.RoundTrip(r)
	}
	return t.base.RoundTrip(r)
}

// Unwrap returns the transport underneath, for code that must inspect it.
func (t *transport) Unwrap() http.RoundTripper { return t.base }

package tracing_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"latchkey.dev/latchkey/internal/tracing"
)

func TestOffByDefault(t *testing.T) {
	if tracing.Enabled() {
		t.Fatal("tracing is on with nothing installed")
	}
	ctx := context.Background()
	got, span := tracing.Start(ctx, "x")
	if got != ctx || span.IsRecording() || span.SpanContext().IsValid() {
		t.Fatalf("Start while off: new context %v, recording %v", got != ctx, span.IsRecording())
	}
	// The transport sends no trace context while off.
	var header string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { header = r.Header.Get("Traceparent") }))
	defer srv.Close()
	resp, err := (&http.Client{Transport: tracing.Transport("test", nil)}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if header != "" {
		t.Errorf("traceparent %q sent while tracing is off", header)
	}
}

// A failed call to a sink whose URL holds a secret: the URL is reduced to scheme and host in
// the attributes, and the error text that quotes it loses the rest.
func TestRedactsURLsInAttributesStatusAndEvents(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := tracing.NewProvider(exp, true)
	defer tp.Shutdown(context.Background())
	restore := tracing.Use(tp)
	defer restore()

	const secretURL = "https://hooks.example.com/services/T000/B000/s3cr3tpath?token=q5ecret"
	_, span := tracing.Start(context.Background(), "event sink POST", trace.WithAttributes(
		attribute.String("url.full", secretURL), attribute.String("url.query", "token=q5ecret"),
	))
	err := errors.New(`Post "` + secretURL + `": dial tcp: connection refused`)
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
	span.End()
	_, plain := tracing.Start(context.Background(), "store GetToken", trace.WithAttributes(attribute.String("db.operation.name", "GetToken")))
	plain.End()

	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	s := spans[0]
	var texts []string
	for _, kv := range s.Attributes {
		texts = append(texts, string(kv.Key)+"="+kv.Value.String())
	}
	texts = append(texts, s.Status.Description)
	for _, ev := range s.Events {
		for _, kv := range ev.Attributes {
			texts = append(texts, kv.Value.String())
		}
	}
	all := strings.Join(texts, "\n")
	for _, secret := range []string{"s3cr3tpath", "q5ecret", "T000"} {
		if strings.Contains(all, secret) {
			t.Errorf("%q survived redaction:\n%s", secret, all)
		}
	}
	if !strings.Contains(all, "url.full=https://hooks.example.com\n") {
		t.Errorf("url.full is not reduced to scheme and host:\n%s", all)
	}
	if len(spans[1].Attributes) != 1 {
		t.Errorf("a span without URLs changed: %v", spans[1].Attributes)
	}
}

// With an endpoint in the environment, Install sends spans there over OTLP/HTTP; without one it
// leaves tracing off.
func TestInstallSendsToTheConfiguredEndpoint(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	stop, err := tracing.Install(context.Background(), tracing.Options{})
	if err != nil || tracing.Enabled() {
		t.Fatalf("without an endpoint: enabled %v, %v", tracing.Enabled(), err)
	}
	_ = stop(context.Background())

	got := make(chan string, 4)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Method + " " + r.URL.Path + " " + r.Header.Get("Content-Type")
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	stop, err = tracing.Install(context.Background(), tracing.Options{})
	if err != nil || !tracing.Enabled() {
		t.Fatalf("with an endpoint: enabled %v, %v", tracing.Enabled(), err)
	}
	_, span := tracing.Start(context.Background(), "test")
	span.End()
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if tracing.Enabled() {
		t.Error("still on after shutdown")
	}
	select {
	case req := <-got:
		if req != "POST /v1/traces application/x-protobuf" {
			t.Errorf("collector received %q", req)
		}
	default:
		t.Fatal("the collector received nothing")
	}
}

// BenchmarkOff is what the instrumentation costs while tracing is off: the server wrapper, a
// store span and a client transport check, per request.
func BenchmarkOff(b *testing.B) {
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	h := tracing.Handler(next, func(*http.Request) string { return "GET /" })
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	w := httptest.NewRecorder()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, r)
		if tracing.Enabled() {
			_, span := tracing.Start(ctx, "store GetToken")
			span.End()
		}
		tracing.Route(ctx, "GET /", "/", "192.0.2.1")
	}
}

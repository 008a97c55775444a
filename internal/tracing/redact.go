package tracing

import (
	"context"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// The HTTP instrumentation records what it sees of a URL: the full URL of an outgoing call
// (an event sink's URL can hold its secret in the path or the query, as chat webhooks do), the
// path and query of an incoming request (a connect link's code is in its path; authorization
// codes and states are in queries), and error texts that quote the URL. redacting rewrites
// those before a span leaves the process:
//   - url.full becomes scheme://host;
//   - url.path becomes the route pattern (http.route), or is dropped when there is none;
//   - url.query, and the older http.url and http.target, are dropped;
//   - the status description and event attributes lose any URL they quote, and any text
//     of the dropped values.
//
// Spans that carry none of these keys pass through untouched, without a copy.

type redacting struct{ sdktrace.SpanExporter }

func (r redacting) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	out := spans
	copied := false
	for i, s := range spans {
		red, ok := Redact(s)
		if !ok {
			continue
		}
		if !copied {
			out = append([]sdktrace.ReadOnlySpan(nil), spans...)
			copied = true
		}
		out[i] = red
	}
	return r.SpanExporter.ExportSpans(ctx, out)
}

// urlKeys are the attributes that hold a URL or part of one.
var urlKeys = map[attribute.Key]bool{
	"url.full": true, "url.path": true, "url.query": true, "http.url": true, "http.target": true,
}

// Redact returns s with the URL parts above reduced, and whether it changed anything.
func Redact(s sdktrace.ReadOnlySpan) (sdktrace.ReadOnlySpan, bool) {
	var hasURL bool
	var route string
	for _, kv := range s.Attributes() {
		if urlKeys[kv.Key] {
			hasURL = true
		}
		if kv.Key == "http.route" {
			route = kv.Value.AsString()
		}
	}
	if !hasURL {
		return s, false
	}
	stub := tracetest.SpanStubFromReadOnlySpan(s)
	// Texts that must not appear anywhere in the span, longest first, each with its replacement.
	var secrets []string
	attrs := make([]attribute.KeyValue, 0, len(stub.Attributes))
	for _, kv := range stub.Attributes {
		if !urlKeys[kv.Key] {
			attrs = append(attrs, kv)
			continue
		}
		v := kv.Value.AsString()
		switch kv.Key {
		case "url.full":
			u, err := url.Parse(v)
			if err == nil && u.Scheme != "" && u.Host != "" {
				attrs = append(attrs, attribute.String("url.full", u.Scheme+"://"+u.Host))
				if rest := strings.TrimPrefix(v, u.Scheme+"://"+u.Host); rest != "" && rest != "/" {
					secrets = append(secrets, rest)
				}
			}
			secrets = append(secrets, v)
		case "url.path":
			if route != "" {
				attrs = append(attrs, attribute.String("url.path", route))
			}
			if v != route && v != "/" {
				secrets = append(secrets, v)
			}
		default:
			if v != "" {
				secrets = append(secrets, v)
			}
		}
	}
	stub.Attributes = attrs
	clean := func(text string) string {
		for _, sec := range secrets {
			if sec != "" && strings.Contains(text, sec) {
				text = strings.ReplaceAll(text, sec, "[redacted]")
			}
		}
		return text
	}
	stub.Status.Description = clean(stub.Status.Description)
	for i := range stub.Events {
		ev := &stub.Events[i]
		ev.Name = clean(ev.Name)
		ea := make([]attribute.KeyValue, len(ev.Attributes))
		for j, kv := range ev.Attributes {
			if kv.Value.Type() == attribute.STRING {
				kv = attribute.String(string(kv.Key), clean(kv.Value.AsString()))
			}
			ea[j] = kv
		}
		ev.Attributes = ea
	}
	return stub.Snapshot(), true
}

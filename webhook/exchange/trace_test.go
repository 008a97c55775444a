package exchange_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/requestid"
	"latchkey.dev/latchkey/internal/tracing"
	"latchkey.dev/latchkey/internal/upstream/fakegithub"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/exchange"
)

// traced turns tracing on for the rest of the test, with every span recorded in memory (after
// the same redaction an OTLP exporter gets).
func traced(t *testing.T) *tracetest.InMemoryExporter {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := tracing.NewProvider(exp, true)
	restore := tracing.Use(tp)
	t.Cleanup(func() {
		restore()
		_ = tp.Shutdown(context.Background())
	})
	return exp
}

// spansOf returns the recorded spans of one trace.
func spansOf(exp *tracetest.InMemoryExporter, id trace.TraceID) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID() == id {
			out = append(out, s)
		}
	}
	return out
}

func named(t *testing.T, spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	t.Helper()
	for _, s := range spans {
		if s.Name == name {
			return s
		}
	}
	var names []string
	for _, s := range spans {
		names = append(names, s.Name)
	}
	t.Fatalf("no span %q in the trace; it has %q", name, names)
	return tracetest.SpanStub{}
}

// One token exchange whose upstream token has expired, called by an agent that sends its own
// W3C trace context: the trace continues the agent's, the server span is named by the route,
// the store operations and the refresh are its children, the refresh's HTTP call is the
// refresh's child, and the fake GitHub received that call's span as its parent. The request id
// is the trace id. No span carries any of the request's secrets.
func TestTraceOfATokenExchange(t *testing.T) {
	exp := traced(t)
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour, AccessTokenTTL: time.Hour})
	b := h.Browser()
	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	b.SignInGitHub(stack.AliceLogin)
	h.GitHub.Approve(stack.AliceLogin, stack.GitHubClientID)
	b.MustFollow(b.PressOnAccount("Connect GitHub"))
	conns := h.Connections(stack.AliceEmail)
	h.Allow(stack.AliceEmail, stack.Agent, conns[0])
	h.Clock.Advance(2 * time.Hour) // GitHub's token has expired: the exchange refreshes it
	subject := h.AccessToken(stack.AliceEmail, stack.Agent)

	callerTrace, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	callerSpan, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	form := url.Values{
		"grant_type":           {exchange.GrantType},
		"subject_token":        {subject},
		"subject_token_type":   {exchange.TokenTypeAccessToken},
		"requested_token_type": {exchange.TokenTypeAccessToken},
		"audience":             {stack.Audience},
	}
	req, _ := http.NewRequest(http.MethodPost, h.Issuer+"/token?probe=query-secret-value", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Traceparent", fmt.Sprintf("00-%s-%s-01", callerTrace, callerSpan))
	req.Header.Set("X-Forwarded-For", "203.0.113.66") // from no trusted proxy: not the client's address
	req.SetBasicAuth(stack.Agent, stack.AgentSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var answer map[string]any
	_ = json.Unmarshal(raw, &answer)
	issued, _ := answer["access_token"].(string)
	if resp.StatusCode != http.StatusOK || issued == "" || h.GitHub.RefreshCalls() != 1 {
		t.Fatalf("exchange: %d %s (refreshes %d)", resp.StatusCode, raw, h.GitHub.RefreshCalls())
	}
	if got := resp.Header.Get(requestid.Header); got != callerTrace.String() {
		t.Errorf("X-Request-Id = %q, want the trace id %s", got, callerTrace)
	}

	spans := spansOf(exp, callerTrace)
	server := named(t, spans, "POST /{ns}/{project}/token")
	if server.SpanKind != trace.SpanKindServer || server.Parent.SpanID() != callerSpan || !server.Parent.IsRemote() {
		t.Errorf("server span: kind %v, parent %v (remote %v); want a server span under the caller's %v",
			server.SpanKind, server.Parent.SpanID(), server.Parent.IsRemote(), callerSpan)
	}
	childOf := func(s, parent tracetest.SpanStub) {
		t.Helper()
		if s.Parent.SpanID() != parent.SpanContext.SpanID() {
			t.Errorf("span %q: parent %v, want %q (%v)", s.Name, s.Parent.SpanID(), parent.Name, parent.SpanContext.SpanID())
		}
	}
	var stores []string
	for _, s := range spans {
		if op, ok := strings.CutPrefix(s.Name, "store "); ok {
			stores = append(stores, op)
			childOf(s, server)
			if s.SpanKind != trace.SpanKindClient || attr(s, "db.operation.name") != op || attr(s, "db.system.name") != "sqlite" {
				t.Errorf("store span %q: kind %v, attributes %v", s.Name, s.SpanKind, s.Attributes)
			}
		}
	}
	for _, want := range []string{"SubjectAccess", "UpdateConnection"} {
		if !strings.Contains(strings.Join(stores, " "), want) {
			t.Errorf("store spans %q: no %s", stores, want)
		}
	}
	refresh := named(t, spans, "upstream refresh")
	childOf(refresh, server)
	if attr(refresh, "latchkey.connector") != h.Connector.Key {
		t.Errorf("refresh span attributes %v: want the connector", refresh.Attributes)
	}
	call := named(t, spans, "upstream POST")
	childOf(call, refresh)
	if call.SpanKind != trace.SpanKindClient || attr(call, "url.full") != strings.TrimSuffix(h.GitHubURL, "/") {
		t.Errorf("upstream call span: kind %v, url.full %q; want the service's scheme and host only (%s)",
			call.SpanKind, attr(call, "url.full"), h.GitHubURL)
	}
	// The fake GitHub saw the upstream call's span as its parent.
	want := fmt.Sprintf("00-%s-%s-01", callerTrace, call.SpanContext.SpanID())
	if got := h.GitHub.Traceparent(fakegithub.TokenPath); got != want {
		t.Errorf("GitHub received traceparent %q, want %q", got, want)
	}
	if attr(server, "http.route") != "/{ns}/{project}/token" || attr(server, "url.path") != "/{ns}/{project}/token" {
		t.Errorf("server span attributes %v: want the route, never the path", server.Attributes)
	}
	if got := attr(server, "client.address"); got != "127.0.0.1" {
		t.Errorf("server span client.address %q, want the peer: X-Forwarded-For came from no trusted proxy", got)
	}

	noSecrets(t, spans, subject, stack.AgentSecret, issued, stack.AliceEmail, stack.AlicePassword, "query-secret-value",
		req.Header.Get("Authorization"), stack.GitHubClientSecret)
}

// A security event delivered to an event sink carries the delivery's trace context: the sink
// receives the HTTP call's span, whose parent is the delivery span naming project and sink.
func TestEventSinkReceivesTraceContext(t *testing.T) {
	exp := traced(t)
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	ctx := context.Background()
	if err := h.Emitter.Emit(ctx, h.Project, events.Event{
		Type: events.LinkWrongPerson, Actor: "p-mallory", Subject: "p-alice",
	}); err != nil {
		t.Fatal(err)
	}
	// Every audit record reaches the sink (the harness's own set-up writes some too); the
	// security event is the one this test follows.
	if n, err := h.Deliverer().DeliverDue(ctx); err != nil || n == 0 {
		t.Fatalf("delivered %d: %v", n, err)
	}
	var ev *stack.Received
	for _, r := range h.Sink.Received() {
		if r.Event.Type == "dev.latchkey."+events.LinkWrongPerson {
			ev = &r
		}
	}
	if ev == nil {
		t.Fatalf("the sink did not receive the %s event: %+v", events.LinkWrongPerson, h.Sink.Received())
	}
	parts := strings.Split(ev.Traceparent, "-")
	if len(parts) != 4 {
		t.Fatalf("sink received traceparent %q", ev.Traceparent)
	}
	id, _ := trace.TraceIDFromHex(parts[1])
	spans := spansOf(exp, id)
	call := named(t, spans, "event sink POST")
	if call.SpanContext.SpanID().String() != parts[2] {
		t.Errorf("sink's parent span %s, want the call's %s", parts[2], call.SpanContext.SpanID())
	}
	delivery := named(t, spans, "event delivery")
	if call.Parent.SpanID() != delivery.SpanContext.SpanID() {
		t.Errorf("call's parent %v, want the delivery span", call.Parent.SpanID())
	}
	if attr(delivery, "latchkey.project") != stack.ProjectKey || attr(delivery, "latchkey.sink") != stack.SinkName {
		t.Errorf("delivery span attributes %v", delivery.Attributes)
	}
	// The sink's URL can hold its secret in the path: only scheme and host are kept.
	if u := attr(call, "url.full"); strings.Contains(u, "/hooks") {
		t.Errorf("sink call span url.full %q keeps the path", u)
	}
	noSecrets(t, spans, stack.SinkKey, "/hooks/latchkey", ev.Signature)
}

// A connect link's code is part of its path. Opening the link, traced, leaves the code in no
// span: the server span has the route pattern where the instrumentation put the path.
func TestLinkCodeStaysOutOfTraces(t *testing.T) {
	exp := traced(t)
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	refusal := h.AgentExchange(h.AccessToken(stack.AliceEmail, stack.Agent))
	link := refusal.Str("connect_uri")
	if refusal.Status != 400 || link == "" {
		t.Fatalf("exchange: %d %s", refusal.Status, refusal.Raw)
	}
	code := link[strings.LastIndex(link, "/")+1:]
	exp.Reset()
	// Nobody is signed in: the link page sends the browser to sign in and come back, with the
	// link's address in the sign-in page's query.
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(u string) *http.Response {
		t.Helper()
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	linkPage := get(link)
	signIn := get(h.Front.URL + linkPage.Header.Get("Location"))
	if !strings.Contains(linkPage.Header.Get("Location"), code) || signIn.StatusCode != http.StatusOK {
		t.Fatalf("link page: %d to %q, then %d", linkPage.StatusCode, linkPage.Header.Get("Location"), signIn.StatusCode)
	}
	for _, route := range []struct {
		resp *http.Response
		name string
	}{
		{linkPage, "GET /{ns}/{project}/account/services/link/{code}"},
		{signIn, "GET /{ns}/{project}/sign-in"},
	} {
		id, err := trace.TraceIDFromHex(route.resp.Header.Get(requestid.Header))
		if err != nil {
			t.Fatalf("X-Request-Id %q is not the trace id: %v", route.resp.Header.Get(requestid.Header), err)
		}
		spans := spansOf(exp, id)
		server := named(t, spans, route.name)
		if want := strings.TrimPrefix(route.name, "GET "); attr(server, "url.path") != want {
			t.Errorf("server span url.path %q, want the route pattern %q", attr(server, "url.path"), want)
		}
		noSecrets(t, spans, code)
	}
}

func attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// noSecrets fails if any span's name, attributes, status or events contain one of secrets.
func noSecrets(t *testing.T, spans tracetest.SpanStubs, secrets ...string) {
	t.Helper()
	for _, s := range spans {
		texts := []string{s.Name, s.Status.Description}
		for _, kv := range s.Attributes {
			texts = append(texts, string(kv.Key)+"="+kv.Value.String())
		}
		for _, ev := range s.Events {
			texts = append(texts, ev.Name)
			for _, kv := range ev.Attributes {
				texts = append(texts, kv.Value.String())
			}
		}
		for _, text := range texts {
			for _, sec := range secrets {
				if sec != "" && strings.Contains(text, sec) {
					t.Errorf("span %q carries a secret value (%.12s…) in %q", s.Name, sec, text)
				}
			}
		}
	}
}

var _ sdktrace.SpanExporter = (*tracetest.InMemoryExporter)(nil)

package webhook_test

import (
	"bytes"
	"encoding/json"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"

	"latchkey.dev/latchkey/internal/requestid"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook"
)

// syncBuffer collects the server's JSON log lines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// lines returns the log lines whose msg is msg.
func (s *syncBuffer) lines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(s.b.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// loggedStack is a stack whose server logs everything as JSON lines into the buffer returned;
// server, when set, changes the server's options.
func loggedStack(t *testing.T, server func(*webhook.Options)) (*stack.Stack, *syncBuffer) {
	t.Helper()
	buf := &syncBuffer{}
	log := logr.FromSlogHandler(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return stack.New(t, stack.Options{Logger: log, Server: server}), buf
}

// Every request's id is in the X-Request-Id header, on the log lines written while it was
// served (the access log and a handler's own), in the JSON of an OAuth error, and on an HTML
// error page for the person to quote.
func TestRequestIDOnHeaderLogsErrorsAndPages(t *testing.T) {
	t.Parallel()
	s, logs := loggedStack(t, nil)

	// A handler's own log line: registration writes an audit line.
	reg := s.Register(`{"redirect_uris":["https://app.example/cb"],"client_name":"Logged"}`)
	id := reg.Header.Get(requestid.Header)
	if reg.Status != 201 || !requestid.Valid(id) {
		t.Fatalf("registration: %d, X-Request-Id %q", reg.Status, id)
	}
	audits := logs.lines(t, "audit")
	if len(audits) != 1 || audits[0]["request_id"] != id {
		t.Errorf("audit log lines %v: want one with request_id %s", audits, id)
	}

	// An OAuth error: the id is an extension member beside error, as in the header.
	bad := s.Token(url.Values{"grant_type": {"password"}}, stack.Web, stack.WebSecret)
	id2 := bad.Header.Get(requestid.Header)
	if bad.Status != 400 || bad.Str("error") != "unsupported_grant_type" || bad.Str("request_id") != id2 || id2 == id {
		t.Errorf("token error: %d %s, header id %q (the registration's was %q)", bad.Status, bad.Raw, id2, id)
	}
	if got := bad.Header.Get("Access-Control-Expose-Headers"); got != requestid.Header {
		t.Errorf("Access-Control-Expose-Headers %q: a browser-based client cannot read the id", got)
	}

	// The access log (V(1)) has a line for each, with its id.
	seen := map[any]string{}
	for _, l := range logs.lines(t, "request") {
		seen[l["request_id"]], _ = l["route"].(string)
	}
	if !strings.HasSuffix(seen[id], "/register") || !strings.HasSuffix(seen[id2], "/token") {
		t.Errorf("access log ids %v: want %s for /register and %s for /token", seen, id, id2)
	}

	// An HTML error page shows the id; an ordinary page does not.
	resp, err := http.Get(s.Issuer + "/no-such-page")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	id3 := resp.Header.Get(requestid.Header)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(html.UnescapeString(string(body)), "quote this id: <code>"+id3+"</code>") {
		t.Errorf("404 page (%d, id %q) does not show the id:\n%s", resp.StatusCode, id3, body)
	}
	resp, err = http.Get(s.Issuer + "/sign-in")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.Contains(string(body), "quote this id") || resp.Header.Get(requestid.Header) == "" {
		t.Errorf("sign-in page: %d, id %q, shows an id: %v", resp.StatusCode, resp.Header.Get(requestid.Header), strings.Contains(string(body), "quote this id"))
	}
}

// A client cannot choose the id that ends up in logs and on pages: an X-Request-Id it sends is
// ignored. Only a trusted proxy's is used, and only when it has an id's shape.
func TestRequestIDFromTrustedProxiesOnly(t *testing.T) {
	const proxyID = "0f8fad5b-d9cb-469f-a165-70867728950e"
	t.Parallel()
	get := func(s *stack.Stack, sent string) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, s.Issuer+"/no-such-page", nil)
		req.Header.Set(requestid.Header, sent)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Header.Get(requestid.Header)
	}
	untrusted, _ := loggedStack(t, nil)
	if got := get(untrusted, proxyID); got == proxyID || !requestid.Valid(got) {
		t.Errorf("a client's X-Request-Id was used: %q", got)
	}
	trusted, _ := loggedStack(t, func(o *webhook.Options) {
		o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	})
	if got := get(trusted, proxyID); got != proxyID {
		t.Errorf("a trusted proxy's X-Request-Id was not used: %q", got)
	}
	if got := get(trusted, "forged\"><script>"); got == "forged\"><script>" || !requestid.Valid(got) {
		t.Errorf("an X-Request-Id without an id's shape was used: %q", got)
	}
}

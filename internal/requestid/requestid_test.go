package requestid_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"latchkey.dev/latchkey/internal/requestid"
)

func TestValid(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{"4bf92f3577b34da6a3ce929d0e0e4736", true},
		{"0f8fad5b-d9cb-469f-a165-70867728950e", true},
		{"a.b_c-D", true},
		{"", false},
		{strings.Repeat("a", requestid.MaxLen+1), false},
		{"abc def", false},
		{"abc\nlevel=error msg=forged", false},
		{"<script>", false},
		{"ü", false},
	} {
		if got := requestid.Valid(tc.id); got != tc.want {
			t.Errorf("Valid(%q) = %v, want %v", tc.id, got, tc.want)
		}
	}
}

// The id a request gets: a proxy's X-Request-Id only from a trusted proxy and only in shape; a
// client's own is never taken, so it cannot put its text in logs and on pages.
func TestMiddlewareChoosesTheID(t *testing.T) {
	trustProxy := func(r *http.Request) bool { return strings.HasPrefix(r.RemoteAddr, "10.0.0.1:") }
	for _, tc := range []struct {
		name, peer, header string
		keep               bool
	}{
		{"trusted proxy", "10.0.0.1:1234", "0f8fad5b-d9cb-469f-a165-70867728950e", true},
		{"trusted proxy, bad shape", "10.0.0.1:1234", "bad id\nforged", false},
		{"client", "192.0.2.7:1234", "0f8fad5b-d9cb-469f-a165-70867728950e", false},
		{"nobody sends one", "192.0.2.7:1234", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var inContext string
			var lines bytes.Buffer
			server := logr.FromSlogHandler(slog.NewTextHandler(&lines, nil))
			h := requestid.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				inContext = requestid.FromContext(r.Context())
				requestid.Logger(r.Context(), logr.Discard()).Info("handled")
			}), func() logr.Logger { return server }, trustProxy)
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tc.peer
			if tc.header != "" {
				r.Header.Set(requestid.Header, tc.header)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			got := w.Header().Get(requestid.Header)
			// The request's logger is the server's, with the id on every line.
			logged := strings.Contains(lines.String(), "msg=handled request_id="+got)
			if got == "" || got != inContext || !logged || !requestid.Valid(got) {
				t.Fatalf("header %q, context %q, logged %q", got, inContext, lines.String())
			}
			if (got == tc.header) != tc.keep {
				t.Errorf("id %q from header %q: kept %v, want %v", got, tc.header, got == tc.header, tc.keep)
			}
		})
	}
	if a, b := requestid.New(), requestid.New(); a == b || len(a) != 32 {
		t.Errorf("New: %q, %q", a, b)
	}
	if requestid.FromContext(context.Background()) != "" {
		t.Error("an id outside a request")
	}
}

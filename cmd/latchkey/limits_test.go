package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/go-logr/logr"
)

// Oversized request headers are refused by the server itself (431) before any handler runs;
// headers within the limit reach the handler.
func TestHeaderLimits(t *testing.T) {
	reached := 0
	srv := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached++
		io.WriteString(w, "ok")
	}), logr.Discard())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	base := "http://" + ln.Addr().String() + "/"

	for _, c := range []struct {
		name   string
		header map[string]string
		want   int
	}{
		{"a 32 KiB cookie", map[string]string{"Cookie": "a=" + strings.Repeat("x", 32<<10)}, http.StatusOK},
		{"a 100 KiB cookie", map[string]string{"Cookie": "a=" + strings.Repeat("x", 100<<10)}, http.StatusRequestHeaderFieldsTooLarge},
		{"a thousand 100-byte headers", thousand(), http.StatusRequestHeaderFieldsTooLarge},
		{"a 1 MiB Authorization header", map[string]string{"Authorization": "Bearer " + strings.Repeat("t", 1<<20)}, http.StatusRequestHeaderFieldsTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, base, nil)
			for k, v := range c.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			must(t, err)
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Errorf("status %d, want %d", resp.StatusCode, c.want)
			}
		})
	}
	if reached != 1 {
		t.Errorf("the handler ran %d times; only the request within the limit may reach it", reached)
	}
}

func thousand() map[string]string {
	h := map[string]string{}
	for i := range 1000 {
		h["X-Filler-"+strings.Repeat("f", 3)+string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676))] = strings.Repeat("v", 100)
	}
	return h
}

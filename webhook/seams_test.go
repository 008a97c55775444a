package webhook_test

import (
	"net/http"
	"strings"
	"testing"

	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/pages"
)

// Every answer of the server, a page, an API or a 404, carries the security headers; the
// issuer's answers are never cached; programs may call it from any origin.
func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	s := stack.New(t, stack.Options{})
	b := s.Browser()
	for _, u := range []string{s.Issuer + "/sign-in", s.Issuer + "/token", s.Issuer + "/nothing-here", s.Front.URL + "/-/healthz"} {
		p := b.MustGet(u)
		for k, v := range map[string]string{
			"Content-Security-Policy": pages.CSP,
			"X-Content-Type-Options":  "nosniff",
			"Referrer-Policy":         "no-referrer",
		} {
			if got := p.Header.Get(k); got != v {
				t.Errorf("%s: %s = %q", u, k, got)
			}
		}
		if strings.HasPrefix(u, s.Issuer) && p.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("%s: Cache-Control %q", u, p.Header.Get("Cache-Control"))
		}
	}
	if !strings.Contains(pages.CSP, "frame-ancestors 'none'") || !strings.Contains(pages.CSP, "form-action 'self'") {
		t.Error("CSP lost a directive")
	}
	// CORS for programs, and a preflight.
	req, _ := http.NewRequest(http.MethodOptions, s.Issuer+"/token", nil)
	req.Header.Set("Origin", "https://inspector.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	if r := s.Send(req); r.Status != http.StatusNoContent || r.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("preflight: %d %v", r.Status, r.Header)
	}
}

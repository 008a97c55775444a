package webhook_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/webhook/pages"
)

// The seams internal/redirect plugs into: the destination shown on the consent page (with a tick box
// the server enforces) and the redirect policy checked at consent.
func TestConsentSeams(t *testing.T) {
	h := newHarness(t)
	b := h.browser()
	b.signIn("", "alice@example.com", alicePass)
	env := h.srv.Env()

	t.Run("tick box enforced by the server", func(t *testing.T) {
		env.Destination = func(_ *config.Project, uri string) pages.Destination {
			return pages.Destination{URI: uri, Kind: pages.DestinationWebsite, ConfirmRequired: true}
		}
		p := b.get(authorizeURL(h, "web", "https://app.example/cb", "read", newPKCE(), nil))
		if !strings.Contains(p.body, `name="confirm_destination"`) || !strings.Contains(p.body, "I set up this connection and expected access to go to") {
			t.Fatalf("no tick box:\n%s", p.body)
		}
		f := p.hidden()
		f.Set("decision", "allow")
		if d := b.post(h.base+"/authorize", f); d.status != http.StatusBadRequest || d.location() != "" {
			t.Errorf("Allow without the tick box: %d %q", d.status, d.location())
		}
		f.Set("confirm_destination", "https://app.example/cb")
		d := b.post(h.base+"/authorize", f)
		if loc, _ := url.Parse(d.location()); d.status != http.StatusSeeOther || loc.Query().Get("code") == "" {
			t.Errorf("Allow with the tick box: %d %q", d.status, d.location())
		}
	})

	t.Run("recognised destination reads as what it is", func(t *testing.T) {
		env.Destination = func(_ *config.Project, uri string) pages.Destination {
			return pages.Destination{URI: uri, Kind: pages.DestinationRecognised, Name: "Claude"}
		}
		p := b.get(authorizeURL(h, "web", "https://app.example/cb", "write", newPKCE(), nil))
		where := strings.Index(p.body, "Where access goes")
		who := strings.Index(p.body, "Who is asking")
		if where < 0 || who < where || !strings.Contains(p.body, "Access goes to <strong>Claude</strong>") {
			t.Errorf("consent page must lead with where access goes:\n%s", p.body)
		}
	})

	t.Run("policy refuses at consent with a page", func(t *testing.T) {
		env.RedirectPolicy = func(*config.Project, []string) error {
			return policyError("This organisation only allows recognised apps to connect")
		}
		defer func() { env.RedirectPolicy = func(*config.Project, []string) error { return nil } }()
		p := b.get(authorizeURL(h, "web", "https://app.example/cb", "read", newPKCE(), nil))
		if p.status != http.StatusForbidden || p.location() != "" || !strings.Contains(p.body, "only allows recognised apps") {
			t.Errorf("%d %q", p.status, p.location())
		}
	})
}

func TestSecurityHeaders(t *testing.T) {
	h := newHarness(t)
	b := h.browser()
	for _, u := range []string{h.base + "/sign-in", h.base + "/token", h.base + "/nothing-here", h.ts.URL + "/-/healthz"} {
		p := b.get(u)
		for k, v := range map[string]string{
			"Content-Security-Policy": pages.CSP,
			"X-Content-Type-Options":  "nosniff",
			"Referrer-Policy":         "no-referrer",
		} {
			if got := p.header.Get(k); got != v {
				t.Errorf("%s: %s = %q", u, k, got)
			}
		}
		if strings.HasPrefix(u, h.base) && p.header.Get("Cache-Control") != "no-store" {
			t.Errorf("%s: Cache-Control %q", u, p.header.Get("Cache-Control"))
		}
	}
	if !strings.Contains(pages.CSP, "frame-ancestors 'none'") || !strings.Contains(pages.CSP, "form-action 'self'") {
		t.Error("CSP lost a directive")
	}
	// CORS for programs, and a preflight.
	req, _ := http.NewRequest(http.MethodOptions, h.base+"/token", nil)
	req.Header.Set("Origin", "https://inspector.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	if r := h.send(req); r.status != http.StatusNoContent || r.header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("preflight: %d %v", r.status, r.header)
	}
}

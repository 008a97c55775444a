package pages_test

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"

	"latchkey.dev/latchkey/test/stack"

	"latchkey.dev/latchkey/internal/config"
)

func testLogo(data string) *config.Logo {
	sum := sha256.Sum256([]byte(data))
	return &config.Logo{Data: []byte(data), ContentType: "image/png", Hash: hex.EncodeToString(sum[:])}
}

// TestBrandingAssets: a Project's pages link its logo and stylesheet on Latchkey's own origin;
// both are served with their exact type, nosniff and a year's cache (they carry a content hash
// and nothing about a person), and a Project serves only its own: another Project's logo
// address, or this logo's address under another Project, is the ordinary 404.
func TestBrandingAssets(t *testing.T) {
	t.Parallel()
	demoLogo, otherLogo := testLogo("\x89PNG\r\n\x1a\ndemo"), testLogo("\x89PNG\r\n\x1a\nother")
	h := stack.New(t, stack.Options{Project: func(p *config.Project) {
		p.Branding = config.Branding{Accent: "#0b6e4f", AccentHover: "#095e43", Logo: demoLogo, SupportURL: "https://help.example.com/"}
	}})
	other := stack.NewProject(h.Front.URL + "/team/other")
	other.Key, other.Name = "team/other", "other"
	other.Branding = config.Branding{Logo: otherLogo}
	h.Replicas[0].Holder.Store(&config.Snapshot{Projects: map[string]*config.Project{stack.ProjectKey: h.Project, other.Key: other}, Version: 2})

	b := h.Browser()
	signIn := b.MustGet("/team/demo/sign-in")
	demoURL := "/team/demo/branding/logo-" + demoLogo.Hash[:16] + ".png"
	if !strings.Contains(signIn.Body, `<img class="logo" src="`+demoURL+`" alt="">`) ||
		!strings.Contains(signIn.Body, `<a href="https://help.example.com/" rel="noopener noreferrer">Help</a>`) {
		t.Fatalf("sign-in page lacks the branding:\n%s", signIn.Body)
	}
	if csp := signIn.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "img-src 'self'") || !strings.Contains(csp, "style-src 'self'") {
		t.Errorf("CSP %q", csp)
	}
	i := strings.Index(signIn.Body, "/team/demo/branding/theme-")
	if i < 0 {
		t.Fatalf("no theme:\n%s", signIn.Body)
	}
	themeURL := signIn.Body[i : i+strings.IndexByte(signIn.Body[i:], '"')]

	for _, tc := range []struct {
		url, typ, body string
	}{
		{demoURL, "image/png", string(demoLogo.Data)},
		{themeURL, "text/css; charset=utf-8", "--accent: #0b6e4f"},
		{"/team/other/branding/logo-" + otherLogo.Hash[:16] + ".png", "image/png", string(otherLogo.Data)},
	} {
		resp := b.MustGet(tc.url)
		if resp.Status != http.StatusOK || resp.Header.Get("Content-Type") != tc.typ || !strings.Contains(resp.Body, tc.body) {
			t.Errorf("%s: %d %q %q", tc.url, resp.Status, resp.Header.Get("Content-Type"), resp.Body)
		}
		hd := resp.Header
		if hd.Get("X-Content-Type-Options") != "nosniff" || hd.Get("Cache-Control") != "public, max-age=31536000, immutable" ||
			hd.Get("Pragma") != "" || hd.Get("Set-Cookie") != "" || !strings.Contains(hd.Get("Content-Security-Policy"), "sandbox") {
			t.Errorf("%s: headers %v", tc.url, hd)
		}
	}

	for _, u := range []string{
		"/team/demo/branding/logo-" + otherLogo.Hash[:16] + ".png", // the other Project's logo here
		"/team/other/branding/logo-" + demoLogo.Hash[:16] + ".png", // this logo there
		"/team/other" + strings.TrimPrefix(themeURL, "/team/demo"), // this stylesheet there
		"/team/demo/branding/logo-" + demoLogo.Hash[:16] + ".webp", // another type
		"/team/demo/branding/" + demoLogo.Hash,
		"/team/nobody/branding/logo-" + demoLogo.Hash[:16] + ".png",
	} {
		if resp := b.MustGet(u); resp.Status != http.StatusNotFound || resp.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("%s: %d %q", u, resp.Status, resp.Header.Get("Cache-Control"))
		}
	}

	// A Project without branding has the default look and serves no branding.
	h.Update(func(p *config.Project) { p.Branding = config.Branding{} })
	if page := b.MustGet("/team/demo/sign-in"); strings.Contains(page.Body, "/branding/") || strings.Contains(page.Body, ">Help<") {
		t.Errorf("unbranded page:\n%s", page.Body)
	}
	if resp := b.MustGet(demoURL); resp.Status != http.StatusNotFound {
		t.Errorf("removed logo still served: %d", resp.Status)
	}
}

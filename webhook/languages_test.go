package webhook_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/config"
)

// TestLanguageSwitcherIsNoOpenRedirect plays someone who sends a person a switcher link whose
// return_to points elsewhere: the switcher sets the language and sends the browser only to a
// path under the Project's own issuer, else to the Project's home.
func TestLanguageSwitcherIsNoOpenRedirect(t *testing.T) {
	h := newHarness(t)
	for _, to := range []string{
		"https://evil.example/", "//evil.example/team/demo/", "/\\evil.example/", "\\\\evil.example",
		"javascript:alert(1)", "/team/other/account", "/team/demo/../../evil", "/team/demo/%2e%2e/%2e%2e/evil",
		"/team/demo//evil.example/", "/team/demo/\r\nSet-Cookie: x=1", "https://evil.example/team/demo/",
		"/team/demox/account", "",
	} {
		b := h.browser()
		resp := b.get("/team/demo/language?lang=de&return_to=" + url.QueryEscape(to))
		if resp.status != http.StatusSeeOther || resp.location() != "/team/demo/" {
			t.Errorf("return_to %q: %d to %q", to, resp.status, resp.location())
		}
	}
	b := h.browser()
	back := "/team/demo/sign-in?return_to=%2Fteam%2Fdemo%2Faccount"
	resp := b.get("/team/demo/language?lang=de&return_to=" + url.QueryEscape(back))
	if resp.status != http.StatusSeeOther || resp.location() != back {
		t.Fatalf("switch: %d to %q", resp.status, resp.location())
	}
	if c := resp.header.Get("Set-Cookie"); !strings.Contains(c, "lang=de") || !strings.Contains(c, "HttpOnly") || !strings.Contains(c, "SameSite=Lax") {
		t.Errorf("cookie %q", c)
	}
	page := b.get(back)
	if !strings.Contains(page.body, `<html lang="de">`) || !strings.Contains(page.body, ">Anmelden</button>") {
		t.Fatalf("sign-in after switching to German:\n%s", page.body)
	}
	// An unknown language changes nothing.
	b.get("/team/demo/language?lang=xx&return_to=" + url.QueryEscape(back))
	if page := b.get(back); !strings.Contains(page.body, `<html lang="de">`) {
		t.Errorf("lang=xx changed the language")
	}
}

// TestPagesFollowAcceptLanguage: the switcher's cookie, then Accept-Language, then the
// Project's default language choose a page's language; the switcher's links on the sign-in page
// come back to it, and no page repeats its query string in them except those that echo their
// request anyway.
func TestPagesFollowAcceptLanguage(t *testing.T) {
	h := newHarness(t)
	get := func(b *browser, path, accept string) page {
		req, _ := http.NewRequest(http.MethodGet, b.abs(path), nil)
		if accept != "" {
			req.Header.Set("Accept-Language", accept)
		}
		return b.do(req)
	}
	for _, tc := range []struct{ accept, lang, button string }{
		{"fr-CH, fr;q=0.9, de;q=0.5", "fr", "Se connecter"},
		{"de-AT", "de", "Anmelden"},
		{"ja, en;q=0.1", "en", "Sign in"},
		{"ja", "en", "Sign in"},
		{"", "en", "Sign in"},
	} {
		p := get(h.browser(), "/team/demo/sign-in", tc.accept)
		if !strings.Contains(p.body, `<html lang="`+tc.lang+`">`) || !strings.Contains(p.body, ">"+tc.button+"</button>") ||
			p.header.Get("Content-Language") != tc.lang {
			t.Errorf("Accept-Language %q: want %s:\n%s", tc.accept, tc.lang, p.body)
		}
	}
	h.update(func(p *config.Project) { p.DefaultLanguage = "de" })
	if p := get(h.browser(), "/team/demo/sign-in", ""); !strings.Contains(p.body, `<html lang="de">`) {
		t.Errorf("no Accept-Language, Project default de: %.300s", p.body)
	}
	if p := get(h.browser(), "/team/demo/sign-in", "fr"); !strings.Contains(p.body, `<html lang="fr">`) {
		t.Errorf("the browser's French loses to the Project default")
	}
	b := h.browser()
	b.get("/team/demo/language?lang=en&return_to=%2Fteam%2Fdemo%2Fsign-in")
	p := get(b, "/team/demo/sign-in?return_to=%2Fteam%2Fdemo%2Faccount", "fr")
	if !strings.Contains(p.body, `<html lang="en">`) {
		t.Errorf("the cookie loses to Accept-Language")
	}
	want := `href="/team/demo/language?return_to=%2Fteam%2Fdemo%2Fsign-in%3Freturn_to%3D%252Fteam%252Fdemo%252Faccount&amp;lang=de" lang="de" hreflang="de"`
	if !strings.Contains(p.body, want) {
		t.Errorf("switcher link missing:\n%s", p.body)
	}
	// The 404 page names no address, in any language.
	nf := get(b, "/team/demo/no/such/thing?x=secret", "de")
	if nf.status != http.StatusNotFound || strings.Contains(nf.body, "secret") || strings.Contains(nf.body, "no/such") {
		t.Errorf("404: %d\n%s", nf.status, nf.body)
	}
}

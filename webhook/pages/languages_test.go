package pages_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"latchkey.dev/latchkey/test/stack"

	"latchkey.dev/latchkey/internal/config"
)

// TestLanguageSwitcherIsNoOpenRedirect plays someone who sends a person a switcher link whose
// return_to points elsewhere: the switcher sets the language and sends the browser only to a
// path under the Project's own issuer, else to the Project's home.
func TestLanguageSwitcherIsNoOpenRedirect(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{})
	for _, to := range []string{
		"https://evil.example/", "//evil.example/team/demo/", "/\\evil.example/", "\\\\evil.example",
		"javascript:alert(1)", "/team/other/account", "/team/demo/../../evil", "/team/demo/%2e%2e/%2e%2e/evil",
		"/team/demo//evil.example/", "/team/demo/\r\nSet-Cookie: x=1", "https://evil.example/team/demo/",
		"/team/demox/account", "",
	} {
		b := h.Browser()
		resp := b.MustGet("/team/demo/language?lang=de&return_to=" + url.QueryEscape(to))
		if resp.Status != http.StatusSeeOther || resp.Header.Get("Location") != "/team/demo/" {
			t.Errorf("return_to %q: %d to %q", to, resp.Status, resp.Header.Get("Location"))
		}
	}
	b := h.Browser()
	back := "/team/demo/sign-in?return_to=%2Fteam%2Fdemo%2Faccount"
	resp := b.MustGet("/team/demo/language?lang=de&return_to=" + url.QueryEscape(back))
	if resp.Status != http.StatusSeeOther || resp.Header.Get("Location") != back {
		t.Fatalf("switch: %d to %q", resp.Status, resp.Header.Get("Location"))
	}
	if c := resp.Header.Get("Set-Cookie"); !strings.Contains(c, "lang=de") || !strings.Contains(c, "HttpOnly") || !strings.Contains(c, "SameSite=Lax") {
		t.Errorf("cookie %q", c)
	}
	page := b.MustGet(back)
	if !strings.Contains(page.Body, `<html lang="de">`) || !strings.Contains(page.Body, ">Anmelden</button>") {
		t.Fatalf("sign-in after switching to German:\n%s", page.Body)
	}
	// An unknown language changes nothing.
	b.MustGet("/team/demo/language?lang=xx&return_to=" + url.QueryEscape(back))
	if page := b.MustGet(back); !strings.Contains(page.Body, `<html lang="de">`) {
		t.Errorf("lang=xx changed the language")
	}
}

// TestPagesFollowAcceptLanguage: the switcher's cookie, then Accept-Language, then the
// Project's default language choose a page's language; the switcher's links on the sign-in page
// come back to it, and no page repeats its query string in them except those that echo their
// request anyway.
func TestPagesFollowAcceptLanguage(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{})
	get := func(b *stack.Browser, path, accept string) stack.Page {
		req, _ := http.NewRequest(http.MethodGet, b.Base+path, nil)
		if accept != "" {
			req.Header.Set("Accept-Language", accept)
		}
		return b.MustDo(req)
	}
	for _, tc := range []struct{ accept, lang, button string }{
		{"fr-CH, fr;q=0.9, de;q=0.5", "fr", "Se connecter"},
		{"de-AT", "de", "Anmelden"},
		{"ja, en;q=0.1", "en", "Sign in"},
		{"ja", "en", "Sign in"},
		{"", "en", "Sign in"},
	} {
		p := get(h.Browser(), "/team/demo/sign-in", tc.accept)
		if !strings.Contains(p.Body, `<html lang="`+tc.lang+`">`) || !strings.Contains(p.Body, ">"+tc.button+"</button>") ||
			p.Header.Get("Content-Language") != tc.lang {
			t.Errorf("Accept-Language %q: want %s:\n%s", tc.accept, tc.lang, p.Body)
		}
	}
	h.Update(func(p *config.Project) { p.DefaultLanguage = "de" })
	if p := get(h.Browser(), "/team/demo/sign-in", ""); !strings.Contains(p.Body, `<html lang="de">`) {
		t.Errorf("no Accept-Language, Project default de: %.300s", p.Body)
	}
	if p := get(h.Browser(), "/team/demo/sign-in", "fr"); !strings.Contains(p.Body, `<html lang="fr">`) {
		t.Errorf("the browser's French loses to the Project default")
	}
	b := h.Browser()
	b.MustGet("/team/demo/language?lang=en&return_to=%2Fteam%2Fdemo%2Fsign-in")
	p := get(b, "/team/demo/sign-in?return_to=%2Fteam%2Fdemo%2Faccount", "fr")
	if !strings.Contains(p.Body, `<html lang="en">`) {
		t.Errorf("the cookie loses to Accept-Language")
	}
	want := `href="/team/demo/language?return_to=%2Fteam%2Fdemo%2Fsign-in%3Freturn_to%3D%252Fteam%252Fdemo%252Faccount&amp;lang=de" lang="de" hreflang="de"`
	if !strings.Contains(p.Body, want) {
		t.Errorf("switcher link missing:\n%s", p.Body)
	}
	// The 404 page names no address, in any language.
	nf := get(b, "/team/demo/no/such/thing?x=secret", "de")
	if nf.Status != http.StatusNotFound || strings.Contains(nf.Body, "secret") || strings.Contains(nf.Body, "no/such") {
		t.Errorf("404: %d\n%s", nf.Status, nf.Body)
	}
}

package pages

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"latchkey.dev/latchkey/internal/config"
)

// hostile is a Project whose branding tries to pass for a client and for Latchkey's verdicts:
// its name claims "Verified" and carries markup, its accent is the warning colour, and its
// colours and Help link try to break out of where they are written. The operator would refuse
// the colours and the link; this is what reaches the pages if anything ever let them through.
var hostile = config.Branding{
	Accent:          "#e5a500", // --warn-line
	AccentHover:     "#c89200",
	DarkAccent:      "#c89200",
	DarkAccentHover: "#e5a500",
	SupportURL:      "https://help.example.com/?q=<b>",
	Logo:            &config.Logo{Data: []byte("\x89PNG\r\n\x1a\n"), ContentType: "image/png", Hash: strings.Repeat("ab", 32)},
}

const hostileName = `Claude ✓ Verified by Latchkey <strong class="dest-known">recognised</strong>`

var reWhere = regexp.MustCompile(`(?s)<section class="where[^"]*".*?</section>`)

func renderConsent(t *testing.T, p *Pages, w http.ResponseWriter, project string, dest Destination) {
	t.Helper()
	p.Consent(w, 200, ConsentData{
		Frame:       Frame{Project: project, SignedInAs: "alice@example.com"},
		AppName:     "Claude",
		Registered:  true,
		Destination: dest,
	})
}

// TestBrandingCannotRestyleWhereAccessGoes: whatever a Project's branding says, the "Where
// access goes" panel of the consent page is the same HTML, with the same classes, as on an
// unbranded page, for every kind of destination; the Project's stylesheet sets only the accent
// of the main buttons, and latchkey.css draws the panel, the warnings and the tick box without
// the accent.
func TestBrandingCannotRestyleWhereAccessGoes(t *testing.T) {
	p, err := New("/-/static/")
	if err != nil {
		t.Fatal(err)
	}
	for _, dest := range []Destination{
		{URI: "https://evil.example/cb", Kind: DestinationWebsite, ConfirmRequired: true},
		{URI: "https://claude.ai/api/mcp/auth_callback", Kind: DestinationRecognised, Name: "Claude"},
		{URI: "http://127.0.0.1:8080/cb", Kind: DestinationDevice},
	} {
		plain := httptest.NewRecorder()
		renderConsent(t, p, plain, "Demo Team", dest)
		branded := httptest.NewRecorder()
		renderConsent(t, p, Branded(branded, "/team/demo", &hostile), hostileName, dest)

		want, got := reWhere.FindString(plain.Body.String()), reWhere.FindString(branded.Body.String())
		if want == "" || got != want {
			t.Errorf("%s: the branded panel differs:\n%s\nwant:\n%s", dest.URI, got, want)
		}
		body := branded.Body.String()
		if !strings.Contains(body, `/team/demo/branding/theme-`) || !strings.Contains(body, `<img class="logo" src="/team/demo/branding/logo-abababababababab.png" alt="">`) {
			t.Errorf("%s: branding not applied:\n%s", dest.URI, body)
		}
		if strings.Contains(body, `<strong class="dest-known">`) || !strings.Contains(body, "Claude ✓ Verified by Latchkey &lt;strong") {
			t.Errorf("%s: display name not escaped:\n%s", dest.URI, body)
		}
		if !strings.Contains(body, `<a href="https://help.example.com/?q=%3cb%3e" rel="noopener noreferrer">Help</a>`) {
			t.Errorf("%s: Help link:\n%s", dest.URI, body)
		}
	}

	// The Project's stylesheet declares --accent and --accent-hover and nothing else.
	css, _, ok := theme(&hostile)
	if !ok {
		t.Fatal("no theme")
	}
	decl := regexp.MustCompile(`([-a-z]+)\s*:\s*[^;{}]*;`)
	for _, m := range decl.FindAllStringSubmatch(string(css), -1) {
		if m[1] != "--accent" && m[1] != "--accent-hover" {
			t.Errorf("theme declares %s:\n%s", m[1], css)
		}
	}

	// latchkey.css: the panel, warnings, alerts and the tick box never use the accent.
	sheet, err := staticFS.ReadFile("static/latchkey.css")
	if err != nil {
		t.Fatal(err)
	}
	fixed := regexp.MustCompile(`\.(where|dest|address|confirm|warning|alert)\b`)
	for _, rule := range strings.Split(string(sheet), "}") {
		sel, body, ok := strings.Cut(rule, "{")
		if ok && fixed.MatchString(sel) && strings.Contains(body, "var(--accent") {
			t.Errorf("%s uses the accent colour, which a Project sets: %s", strings.TrimSpace(sel), body)
		}
	}
}

// TestBrandingInputIsContained: colours that are not #rrggbb never reach a stylesheet, a Help
// link that is not https is not shown, and a display name is cut to 100 characters.
func TestBrandingInputIsContained(t *testing.T) {
	p, err := New("/-/static/")
	if err != nil {
		t.Fatal(err)
	}
	bad := config.Branding{
		Accent: "#fff;} .dest-website{background:green", AccentHover: "#000000",
		DarkAccent: "red", DarkAccentHover: "#000000",
		SupportURL: "javascript:alert(1)",
	}
	if _, _, ok := theme(&bad); ok {
		t.Error("a theme was made from colours that are not #rrggbb")
	}
	w := httptest.NewRecorder()
	long := strings.Repeat("Verified ", 40)
	p.SignIn(Branded(w, "/team/demo", &bad), 200, SignInData{Frame: Frame{Project: long}, Passwords: true})
	body := w.Body.String()
	if strings.Contains(body, "branding/theme-") || strings.Contains(body, "javascript:") || strings.Contains(body, ">Help<") {
		t.Errorf("bad branding rendered:\n%s", body)
	}
	brand := regexp.MustCompile(`<span class="brand">([^<]*)</span>`).FindStringSubmatch(body)
	if len(brand) != 2 || utf8.RuneCountInString(brand[1]) != maxNameRunes || !strings.HasSuffix(brand[1], "…") {
		t.Errorf("display name not limited: %q", brand)
	}

	// Without Branded (a page outside any Project) the default look.
	w = httptest.NewRecorder()
	p.NotFound(w)
	if strings.Contains(w.Body.String(), "/branding/") {
		t.Errorf("404 page branded:\n%s", w.Body)
	}
}

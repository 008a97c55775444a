package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"latchkey.dev/latchkey/internal/clientdoc"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/testbrowser"
	"latchkey.dev/latchkey/internal/testenv"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/register"
)

// axeTags are the rule sets the pages must pass: WCAG 2.0, 2.1 and 2.2, levels A and AA
// (docs/accessibility.md).
var axeTags = []string{"wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"}

// axeSource is axe-core's browser build, installed by npm ci from test/e2e/axe's lock file.
func axeSource(t *testing.T) string {
	t.Helper()
	testenv.SkipShort(t, "Node.js (npm) and Chromium")
	const dir, script = "axe", "axe/node_modules/axe-core/axe.min.js"
	if _, err := os.Stat(script); err != nil {
		npm, err := exec.LookPath("npm")
		needTool(t, "npm", err)
		cmd := exec.CommandContext(t.Context(), npm, "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		needTool(t, "npm ci in test/e2e/axe", wrapOutput(err, out))
	}
	b, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// auditor runs axe-core on whatever a browser shows, in light and dark mode.
type auditor struct {
	t      *testing.T
	source string
	states []string
}

// axeViolation is the part of an axe-core violation a failure message needs.
type axeViolation struct {
	ID      string `json:"id"`
	Impact  string `json:"impact"`
	Help    string `json:"help"`
	Targets []struct {
		Target  []any  `json:"target"`
		Summary string `json:"failureSummary"`
		Any     []struct {
			Message string `json:"message"`
		} `json:"any"`
	} `json:"nodes"`
}

// browser starts a person's browser for the audit. The pages keep their Content-Security-Policy
// (script-src 'none'): axe-core arrives through the DevTools protocol (Runtime.evaluate), which
// the policy does not govern, so the keyboard runs meet the same form-action and script rules
// a person's browser does.
func (a *auditor) browser(ctx context.Context, name string) *testbrowser.Profile {
	p := testbrowser.New(a.t, ctx, name)
	p.Do(chromedp.EmulateViewport(720, 900)) //nolint:contextcheck // Do runs in the profile's own browser context, which testbrowser.New derived from ctx
	return p
}

// check runs axe-core on the page p shows, as state, once per colour scheme, and fails the
// test with each violation.
func (a *auditor) check(p *testbrowser.Profile, state string) {
	a.t.Helper()
	a.states = append(a.states, state)
	tags, _ := json.Marshal(axeTags)
	run := `(async () => {
		if (typeof axe === "undefined") { ` + a.source + `
		}
		const r = await axe.run(document, {runOnly: {type: "tag", values: ` + string(tags) + `}, resultTypes: ["violations", "incomplete"]});
		return JSON.stringify({violations: r.violations, incomplete: r.incomplete});
	})()`
	for _, scheme := range []string{"light", "dark"} {
		colorScheme(p, scheme)
		ctx, cancel := context.WithTimeout(p.Ctx, 30*time.Second)
		out, err := chromedp.Run(ctx, chromedp.Evaluate[string](run, chromedp.EvalAwaitPromise))
		cancel()
		if err != nil {
			a.t.Fatalf("%s, %s mode: running axe-core: %v", state, scheme, err)
		}
		var res struct{ Violations, Incomplete []axeViolation }
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			a.t.Fatalf("%s: axe-core answered %q: %v", state, out, err)
		}
		for _, v := range res.Violations {
			for _, n := range v.Targets {
				a.t.Errorf("%s, %s mode: %s (%s) at %v: %s\n%s", state, scheme, v.ID, v.Impact, n.Target, v.Help, n.Summary)
			}
		}
		// What axe-core could not decide (text over a background it cannot compute) is for a
		// person to look at; the log says where.
		for _, v := range res.Incomplete {
			for _, n := range v.Targets {
				for _, c := range n.Any {
					a.t.Logf("%s, %s mode: for review: %s at %v: %s", state, scheme, v.ID, n.Target, c.Message)
				}
			}
		}
		for _, problem := range testbrowser.Eval[[]string](p, ownChecks) {
			a.t.Errorf("%s, %s mode: %s", state, scheme, problem)
		}
	}
	colorScheme(p, "light")
}

// shots saves what p shows in light and dark mode, for a person to look at.
func shots(p *testbrowser.Profile, name string) {
	p.T.Helper()
	for _, scheme := range []string{"dark", "light"} {
		colorScheme(p, scheme)
		p.Screenshot(consentShots, name+"-"+scheme+".png")
	}
}

// colorScheme makes the browser prefer scheme, light or dark.
func colorScheme(p *testbrowser.Profile, scheme string) {
	p.T.Helper()
	if _, err := chromedp.Call(p.Ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}},
	}); err != nil {
		p.T.Fatalf("%s: emulating %s mode: %v", p.Name, scheme, err)
	}
}

// contrastJS defines contrast(a, b), the WCAG contrast ratio of two CSS colours, and
// behind(el), the colour el is drawn on.
const contrastJS = `
	const rgb = s => {
		const m = /rgba?\(([^)]+)\)/.exec(s);
		if (!m) return null;
		const v = m[1].split(/[\s,\/]+/).filter(Boolean).map(Number);
		return {r: v[0], g: v[1], b: v[2], a: v.length > 3 ? v[3] : 1};
	};
	const lum = c => {
		const f = v => (v /= 255) <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
		return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b);
	};
	const contrast = (a, b) => {
		const x = lum(rgb(a)), y = lum(rgb(b));
		return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05);
	};
	const behind = el => {
		for (let e = el; e; e = e.parentElement) {
			const c = getComputedStyle(e).backgroundColor, v = rgb(c);
			if (v && v.a > 0) return c;
		}
		return "rgb(255, 255, 255)";
	};
`

// ownChecks are what axe-core does not check: the border that shows where a text field is
// (WCAG 1.4.11, 3:1 against what it is drawn on), and that no two buttons or links on a page
// have the same accessible name while doing different things (2.4.6, 4.1.2): "Disconnect"
// must say which account.
const ownChecks = `(() => {` + contrastJS + `
	const problems = [];
	for (const el of document.querySelectorAll("input[type=email], input[type=password], input[type=text]")) {
		const cs = getComputedStyle(el), r = contrast(cs.borderTopColor, behind(el.parentElement));
		if (r < 3) problems.push("the border of #" + el.id + " has contrast " + r.toFixed(2) + ":1, under 3:1");
	}
	const seen = new Map();
	for (const el of document.querySelectorAll("button, a[href]")) {
		const name = (el.getAttribute("aria-label") || el.textContent).trim().replace(/\s+/g, " ");
		const does = el.form ? el.form.action + " " + new URLSearchParams(new FormData(el.form)).toString() + " " + (el.value || "") : (el.href || "");
		if (seen.has(name) && seen.get(name) !== does) problems.push("two controls are both called " + JSON.stringify(name));
		seen.set(name, does);
	}
	return problems;
})()`

// pressAndWait presses the button labelled label and waits for the next page to say want
// (the old page may say it too, so it is marked first and must be gone).
func pressAndWait(p *testbrowser.Profile, label, want string) string {
	p.T.Helper()
	markPage(p)
	p.Press(label)
	return waitNewPage(p, want)
}

func markPage(p *testbrowser.Profile) {
	p.T.Helper()
	testbrowser.Eval[bool](p, `(document.documentElement.dataset.before = "1", true)`)
}

// waitNewPage waits until a page other than the marked one has loaded and says want.
func waitNewPage(p *testbrowser.Profile, want string) string {
	p.T.Helper()
	ctx, cancel := context.WithTimeout(p.Ctx, 20*time.Second)
	defer cancel()
	js := `document.readyState === "complete" && !document.documentElement.dataset.before && document.body ? document.body.innerText : ""`
	last := ""
	for {
		if s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js)); err == nil {
			last = s
			if strings.Contains(s, want) {
				return s
			}
		}
		select {
		case <-ctx.Done():
			p.T.Fatalf("%s: the next page never said %q; last seen:\n%s", p.Name, want, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// tabTo presses Tab until the focused element matches selector, and checks that focus is
// visible there.
func tabTo(p *testbrowser.Profile, selector string) {
	p.T.Helper()
	is := `document.activeElement && document.activeElement.matches(` + strconv.Quote(selector) + `)`
	for range 40 {
		p.Do(chromedp.KeyEvent(kb.Tab))
		if testbrowser.Eval[bool](p, is) {
			ring := `(() => {` + contrastJS + `
				const el = document.activeElement, cs = getComputedStyle(el);
				return cs.outlineStyle === "none" ? 0 : contrast(cs.outlineColor, behind(el.parentElement));
			})()`
			for _, scheme := range []string{"dark", "light"} {
				colorScheme(p, scheme)
				if r := testbrowser.Eval[float64](p, ring); r < 3 {
					p.T.Errorf("%s, %s mode: the focus ring on %s has contrast %.2f:1; it must be visible, at least 3:1 (WCAG 1.4.11)", p.Name, scheme, selector, r)
				}
			}
			return
		}
	}
	p.T.Fatalf("%s: Tab never reached %s", p.Name, selector)
}

// key presses one key on the focused element.
func key(p *testbrowser.Profile, k string) {
	p.T.Helper()
	p.Do(chromedp.KeyEvent(k))
}

// Every page and state a person can meet, in real Chromium, checked with axe-core against WCAG
// 2.2 A and AA in light and dark mode; the test fails on any violation. The consent and
// connect-link flows are also finished with the keyboard alone.
func TestAccessibilityInChromium(t *testing.T) {
	testbrowser.Chromium(t)
	a := &auditor{t: t, source: axeSource(t)}
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour, FrontHost: "127.0.0.1", GitHubHost: "127.0.0.2"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	alice := a.browser(ctx, "alice's browser")
	mallory := a.browser(ctx, "mallory's browser")

	// Sign-in: empty, refused, then slowed down. Attempts for an account nobody has leave
	// Alice's own budget alone.
	alice.Open(h.Issuer + "/sign-in")
	alice.WaitFor("Email")
	a.check(alice, "sign-in, empty")
	alice.Fill("username", "nobody@example.com")
	alice.Fill("password", "a wrong password")
	pressAndWait(alice, "Sign in", "do not match")
	a.check(alice, "sign-in, wrong password")
	for range 10 {
		alice.Fill("password", "a wrong password")
		if strings.Contains(pressAndWait(alice, "Sign in", "Sign in"), "Too many sign-in attempts") {
			break
		}
	}
	alice.WaitFor("Too many sign-in attempts")
	a.check(alice, "sign-in, too many attempts")
	shots(alice, "a11y-sign-in-too-many")

	// Sign-in with the keyboard alone: the email field has focus when the page opens.
	alice.Open(h.Issuer + "/sign-in")
	alice.WaitFor("Email")
	if !testbrowser.Eval[bool](alice, `document.activeElement.id === "username"`) {
		t.Error("the sign-in page does not put focus on the email field")
	}
	alice.Do(chromedp.KeyEvent(stack.AliceEmail))
	tabTo(alice, "#password")
	alice.Do(chromedp.KeyEvent(stack.AlicePassword))
	key(alice, kb.Enter)
	alice.WaitFor("Your account")
	a.check(alice, "account, nothing connected")

	// The confirmation page: Alice starts connecting GitHub in her browser, and the app path
	// finishes in another browser, signed in to nobody, then as Alice.
	alice.Block(h.GitHubURL)
	authURL := alice.PressAndCapture("Connect GitHub", h.GitHubURL+"/login/oauth/authorize?")
	system := a.browser(ctx, "alice's system browser")
	system.Open(h.GitHubURL + "/login")
	system.Fill("login", stack.AliceLogin)
	system.Fill("password", stack.AlicePassword)
	system.Press("Sign in")
	system.WaitFor("404 page not found")
	h.GitHub.Approve(stack.AliceLogin, stack.GitHubClientID)
	system.Open(authURL)
	system.WaitFor("Sign in to finish")
	a.check(system, "confirmation, sign in to finish")
	pressAndWait(system, "Sign in to finish", "Email")
	system.Fill("username", stack.AliceEmail)
	system.Fill("password", stack.AlicePassword)
	system.Press("Sign in")
	system.WaitFor("Finish connecting")
	a.check(system, "confirmation, finish connecting")
	pressAndWait(system, "Finish connecting", "is now connected.")
	a.check(system, "callback, connected")

	// Callback errors.
	alice.Open(h.CallbackURL)
	alice.WaitFor("The address is incomplete")
	a.check(alice, "callback, incomplete address")
	alice.Open(h.CallbackURL + "?" + url.Values{"code": {"c"}, "state": {"no-such-state"}}.Encode())
	alice.WaitFor("expired")
	a.check(alice, "callback, expired")

	// 404.
	alice.Open(h.Issuer + "/account/services/link/no-such-link")
	alice.WaitFor("There is nothing at this address")
	a.check(alice, "not found")

	// Connect links. Mallory's agent asks for her GitHub token: connect first.
	subject := h.AccessToken(stack.MalloryEmail, stack.Agent)
	link := h.AgentExchange(subject).Str("connect_uri")
	if link == "" {
		t.Fatal("no connect link for Mallory")
	}
	mallory.Open(link)
	mallory.WaitFor("Email")
	mallory.Fill("username", stack.MalloryEmail)
	mallory.Fill("password", stack.MalloryPassword)
	mallory.Press("Sign in")
	mallory.WaitFor("Connect your GitHub account and let Repo Helper use it.")
	a.check(mallory, "link, connect")

	alice.Open(link)
	alice.WaitFor("This link was made for another account")
	a.check(alice, "link, another person's")

	// Declined, with the keyboard.
	markPage(mallory)
	tabTo(mallory, `form[action$="/decline"] button`)
	key(mallory, kb.Enter)
	waitNewPage(mallory, "Nothing was connected")
	a.check(mallory, "link, declined")

	// Allow with one working account, with the keyboard.
	conn := h.ConnectDirectly(stack.MalloryEmail, strconv.Itoa(stack.MalloryGitHubID), stack.MalloryLogin, "gho_mallory")
	link = h.AgentExchange(subject).Str("connect_uri")
	mallory.Open(link)
	mallory.WaitFor("Let Repo Helper use your GitHub account?")
	a.check(mallory, "link, allow one account")
	markPage(mallory)
	tabTo(mallory, "#allow-form button")
	key(mallory, kb.Enter)
	waitNewPage(mallory, "Done: go back to Repo Helper")
	a.check(mallory, "link, done")

	// Reconnect a broken account.
	if _, err := h.Store().UpdateConnection(context.Background(), stack.ProjectKey, conn.ID, func(c store.Connection) (store.Connection, error) {
		c.Status = store.ConnectionRevokedUpstream
		return c, nil
	}); err != nil {
		t.Fatal(err)
	}
	link = h.AgentExchange(subject).Str("connect_uri")
	if link == "" {
		t.Fatal("no reconnect link for Mallory")
	}
	mallory.Open(link)
	mallory.WaitFor("Reconnect your GitHub account")
	a.check(mallory, "link, reconnect")
	mallory.Open(h.Issuer + "/account")
	mallory.WaitFor("access revoked at GitHub")
	a.check(mallory, "account, revoked connection")
	reconnect := link

	// Mallory's reconnection, finished in a browser signed in as Alice: refused.
	mallory.Block(h.GitHubURL)
	theirs := mallory.PressAndCapture("Reconnect GitHub", h.GitHubURL+"/login/oauth/authorize?")
	system.Open(theirs)
	system.WaitFor("This connection is not yours")
	a.check(system, "callback, someone else's connection")

	// Allow, choosing among two accounts, with the keyboard: the second one.
	h.ConnectDirectly(stack.AliceEmail, "3003", "alice-work", "gho_alice_work")
	link = h.AgentExchange(h.AccessToken(stack.AliceEmail, stack.Agent)).Str("connect_uri")
	alice.Open(link)
	alice.WaitFor("Which GitHub account may Repo Helper use?")
	a.check(alice, "link, choose an account")
	testbrowser.Eval[bool](alice, `(() => {
		for (const r of document.querySelectorAll("input[type=radio]")) { r.checked = false; r.removeAttribute("required"); }
		return true;
	})()`)
	pressAndWait(alice, "Allow", "Choose which GitHub account Repo Helper may use.")
	a.check(alice, "link, allow without a choice")
	tabTo(alice, "#account-0")
	key(alice, kb.ArrowDown)
	if !testbrowser.Eval[bool](alice, `document.getElementById("account-1").checked`) {
		t.Error("the arrow key did not choose the second account")
	}
	chosen := testbrowser.Eval[string](alice, `document.querySelector('label[for="account-1"]').textContent`)
	markPage(alice)
	tabTo(alice, "#allow-form button")
	key(alice, kb.Enter)
	waitNewPage(alice, "Done: go back to Repo Helper")
	alice.Open(h.Issuer + "/account")
	alice.WaitFor("alice-work")
	a.check(alice, "account, with connections")
	for _, name := range []string{"Disconnect GitHub account alice-work", "Disconnect GitHub account " + stack.AliceLogin, "Remove access for Repo Helper to GitHub account " + chosen} {
		if !testbrowser.Eval[bool](alice, `document.querySelector('button[aria-label=`+strconv.Quote(name)+`]') !== null`) {
			t.Errorf("no button is called %q", name)
		}
	}
	shots(alice, "a11y-account")

	// Consent: a recognised callback, a website (unticked, ticked, sent unticked), a client
	// described by a metadata document, and the refusal.
	claude := consentRegister(t, h, "Claude", "https://claude.ai/api/mcp/auth_callback")
	attacker := "https://claude-ai.evil.example/api/mcp/auth_callback"
	phish := consentRegister(t, h, "Claude", attacker)
	alice.Open(consentAuthorizeURL(h, claude, "https://claude.ai/api/mcp/auth_callback"))
	alice.WaitFor("Where access goes")
	a.check(alice, "consent, recognised")

	alice.Open(consentAuthorizeURL(h, phish, attacker))
	alice.WaitFor("does not recognise")
	a.check(alice, "consent, website, unticked")
	alice.Do(chromedp.Click(chromedp.ID("confirm_destination")))
	a.check(alice, "consent, website, ticked")
	testbrowser.Eval[bool](alice, `(() => { const c = document.getElementById("confirm_destination"); c.checked = false; c.removeAttribute("required"); return true; })()`)
	pressAndWait(alice, "Allow", "Tick the box")
	a.check(alice, "consent, website, sent without the tick")

	// The website, with the keyboard alone: tick, then Allow.
	alice.Open(consentAuthorizeURL(h, phish, attacker))
	alice.WaitFor("does not recognise")
	alice.Block("https://claude-ai.evil.example")
	tabTo(alice, "#confirm_destination")
	key(alice, " ")
	if !testbrowser.Eval[bool](alice, `document.getElementById("confirm_destination").checked`) {
		t.Fatal("Space did not tick the box")
	}
	tabTo(alice, "#allow")
	shots(alice, "a11y-consent-keyboard")
	got := enterAndCapture(alice, attacker+"?")
	if u, _ := url.Parse(got); u.Query().Get("code") == "" {
		t.Errorf("no code after Allow with the keyboard: %s", got)
	}

	alice.Open(consentAuthorizeURL(h, "repo-helper", "http://127.0.0.1/cb"))
	alice.WaitFor("set up for Demo Team by its administrators")
	a.check(alice, "consent, app set up by the administrators")

	var doc []byte
	site := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(doc)
	}))
	defer site.Close()
	id := site.URL + "/oauth/client.json"
	doc, _ = json.Marshal(map[string]any{
		"client_id": id, "client_name": "Claude Code", "client_uri": "https://claude.ai/",
		"redirect_uris": []string{"http://127.0.0.1/callback"}, "token_endpoint_auth_method": "none",
	})
	pool := x509.NewCertPool()
	pool.AddCert(site.Certificate())
	h.Server().Env().ClientDocument = register.ClientDocument(clientdoc.New(clientdoc.Options{AllowLoopback: true, RootCAs: pool, Now: h.Clock.Now}))
	p := *h.Project
	p.Registration.ClientIDMetadataDocuments = true
	h.Holder().Store(&config.Snapshot{Projects: map[string]*config.Project{p.Key: &p}, Version: 2})
	alice.Open(consentAuthorizeURL(h, id, "http://127.0.0.1:53682/callback"))
	alice.WaitFor("vouches for it")
	a.check(alice, "consent, client ID metadata document")

	// The consent page in German, chosen with the switcher, which comes back to the same
	// request (docs/languages.md): the warning about a website nobody recognises, in German.
	// The German consent page is docs/screenshots/consent-de.png.
	alice.Open(consentAuthorizeURL(h, phish, attacker))
	alice.WaitFor("does not recognise")
	markPage(alice)
	alice.Do(chromedp.Click(chromedp.CSS(`a[hreflang="de"]`)))
	waitNewPage(alice, "Der Zugriff geht an eine Website, die diese Organisation nicht kennt")
	if lang := testbrowser.Eval[string](alice, `document.documentElement.lang`); lang != "de" {
		t.Errorf("the German consent page says <html lang=%q>", lang)
	}
	a.check(alice, "consent, website, German")
	alice.Screenshot(consentShots, "consent-de.png")
	testbrowser.Eval[bool](alice, `(() => { const c = document.getElementById("confirm_destination"); c.checked = false; c.removeAttribute("required"); return true; })()`)
	pressAndWait(alice, "Erlauben", "Setzen Sie das Häkchen")
	a.check(alice, "consent, website, sent without the tick, German")
	alice.Open(consentAuthorizeURL(h, claude, "https://claude.ai/api/mcp/auth_callback"))
	alice.WaitFor("Der Zugriff geht an Claude")
	a.check(alice, "consent, recognised, German")
	markPage(alice)
	alice.Do(chromedp.Click(chromedp.CSS(`a[hreflang="en"]`)))
	waitNewPage(alice, "Where access goes")

	// Sign-in in German: empty, then a wrong password.
	german := a.browser(ctx, "a German browser")
	german.Open(h.Issuer + "/sign-in")
	german.WaitFor("Email")
	markPage(german)
	german.Do(chromedp.Click(chromedp.CSS(`a[hreflang="de"]`)))
	waitNewPage(german, "E-Mail")
	a.check(german, "sign-in, German")
	german.Fill("username", "niemand@example.com")
	german.Fill("password", "ein falsches Passwort")
	pressAndWait(german, "Anmelden", "passen nicht zusammen")
	a.check(german, "sign-in, wrong password, German")

	p.Redirects = config.DefaultRedirectRules()
	p.Redirects.OnlyRecognisedApps = true
	h.Holder().Store(&config.Snapshot{Projects: map[string]*config.Project{p.Key: &p}, Version: 3})
	alice.Open(consentAuthorizeURL(h, phish, attacker))
	alice.WaitFor(consentRefusal)
	a.check(alice, "consent, refused")

	// The link again after the recent sign-in has gone stale: sign in again.
	h.Clock.Advance(h.Project.Lifetimes.RecentSignIn + time.Minute)
	mallory.Open(reconnect)
	mallory.WaitFor("sign in again")
	a.check(mallory, "sign-in, again for a link")
	testbrowser.Eval[bool](mallory, `(document.getElementById("username").value = "", true)`)
	mallory.Fill("username", stack.MalloryEmail)
	mallory.Fill("password", stack.MalloryPassword)
	mallory.Press("Sign in")
	mallory.WaitFor("Reconnect your GitHub account")
	testbrowser.Eval[bool](mallory, `(() => { for (const f of document.getElementsByName("csrf_token")) f.value = "stale"; return true; })()`)
	pressAndWait(mallory, "Decline", "This form has expired")
	a.check(mallory, "form expired")

	// Sign-in with the organisation's provider beside passwords; then with neither available.
	stranger := a.browser(ctx, "a stranger's browser")
	p.SignIn.OIDC = &config.OIDCProvider{Issuer: "https://sso.example", ClientID: "latchkey", Label: "Sign in with Acme SSO"}
	h.Holder().Store(&config.Snapshot{Projects: map[string]*config.Project{p.Key: &p}, Version: 4})
	stranger.Open(h.Issuer + "/sign-in")
	stranger.WaitFor("Sign in with Acme SSO")
	a.check(stranger, "sign-in, passwords or the organisation")
	tabTo(stranger, "a.button")
	shots(stranger, "a11y-sign-in-organisation")
	p.SignIn = config.SignIn{PasswordsUnavailable: true, OIDC: &config.OIDCProvider{Issuer: "https://sso.example", Unavailable: true}}
	h.Holder().Store(&config.Snapshot{Projects: map[string]*config.Project{p.Key: &p}, Version: 5})
	stranger.Open(h.Issuer + "/sign-in")
	stranger.WaitFor("Please try again later")
	a.check(stranger, "sign-in, no way available")

	t.Logf("%d page states checked with axe-core %v, each in light and dark mode: %s", len(a.states), axeTags, strings.Join(a.states, "; "))
}

// enterAndCapture presses Enter on the focused element and returns the first address the
// browser is sent to that starts with prefix.
func enterAndCapture(p *testbrowser.Profile, prefix string) string {
	p.T.Helper()
	return p.Capture(prefix, func() { key(p, kb.Enter) })
}

// brandLogo is a small PNG logo for the branded pages: a green rounded square holding a key.
func brandLogo(t *testing.T) []byte {
	t.Helper()
	const n = 96
	img := image.NewRGBA(image.Rect(0, 0, n, n))
	green, white := color.RGBA{0x0b, 0x6e, 0x4f, 0xff}, color.RGBA{0xff, 0xff, 0xff, 0xff}
	in := func(x, y, cx, cy, r int) bool { return (x-cx)*(x-cx)+(y-cy)*(y-cy) <= r*r }
	for y := range n {
		for x := range n {
			// Rounded corners: outside the four corner circles is transparent.
			cx, cy := min(max(x, 16), n-17), min(max(y, 16), n-17)
			if !in(x, y, cx, cy, 16) {
				continue
			}
			c := green
			switch {
			case in(x, y, 34, 48, 16) && !in(x, y, 34, 48, 7): // the key's bow
				c = white
			case x >= 48 && x <= 78 && y >= 45 && y <= 51: // its shaft
				c = white
			case (x >= 62 && x <= 67 || x >= 72 && x <= 78) && y > 51 && y <= 62: // its bit
				c = white
			}
			img.Set(x, y, c)
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestBrandedPagesInChromium: a Project with its own logo, accent colours and Help link passes
// axe-core on sign-in and consent in light and dark mode; the logo loads from Latchkey's origin
// under the page's CSP, the main button takes the accent, and the "Where access goes" panel keeps
// its fixed colours. The branded consent page is docs/screenshots/consent-branded.png.
func TestBrandedPagesInChromium(t *testing.T) {
	testbrowser.Chromium(t)
	a := &auditor{t: t, source: axeSource(t)}
	h := stack.New(t, stack.Options{Audit: true, FrontHost: "127.0.0.1"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	data := brandLogo(t)
	sum := sha256.Sum256(data)
	p := *h.Project
	p.DisplayName = "Acme Engineering"
	// What the operator compiles from accentColor #0b6e4f and darkAccentColor #5fd3a7
	// (controllers/branding.go checks their contrast; the hover shades are 15% towards black
	// and white).
	p.Branding = config.Branding{
		Accent: "#0b6e4f", AccentHover: "#095e43", DarkAccent: "#5fd3a7", DarkAccentHover: "#77dab4",
		Logo:       &config.Logo{Data: data, ContentType: "image/png", Hash: hex.EncodeToString(sum[:])},
		SupportURL: "https://help.acme.example/sign-in",
	}
	h.Holder().Store(&config.Snapshot{Projects: map[string]*config.Project{p.Key: &p}, Version: 2})

	attacker := "https://claude-ai.evil.example/api/mcp/auth_callback"
	claude := consentRegister(t, h, "Claude", "https://claude.ai/api/mcp/auth_callback")
	phish := consentRegister(t, h, "Claude", attacker)

	alice := a.browser(ctx, "alice's browser")
	alice.Open(h.Issuer + "/sign-in")
	alice.WaitFor("Sign in to Acme Engineering")
	if !testbrowser.Eval[bool](alice, `(() => { const i = document.querySelector("img.logo"); return !!i && i.complete && i.naturalWidth === 96; })()`) {
		t.Error("the logo did not load")
	}
	a.check(alice, "branded sign-in")

	// The main button takes the Project's accent in each mode.
	allowBg := `getComputedStyle(document.querySelector("button.primary")).backgroundColor`
	for scheme, want := range map[string]string{"light": "rgb(11, 110, 79)", "dark": "rgb(95, 211, 167)"} {
		colorScheme(alice, scheme)
		if got := testbrowser.Eval[string](alice, allowBg); got != want {
			t.Errorf("%s mode: the Sign in button is %s, want %s", scheme, got, want)
		}
	}
	colorScheme(alice, "light")
	alice.Fill("username", stack.AliceEmail)
	alice.Fill("password", stack.AlicePassword)
	alice.Press("Sign in")
	alice.WaitFor("Your account")

	alice.Open(consentAuthorizeURL(h, claude, "https://claude.ai/api/mcp/auth_callback"))
	alice.WaitFor("Where access goes")
	a.check(alice, "branded consent, recognised")

	alice.Open(consentAuthorizeURL(h, phish, attacker))
	alice.WaitFor("Access goes to a website this organisation does not recognise")
	a.check(alice, "branded consent, website, unticked")
	// The warning panel keeps Latchkey's warning colours whatever the accent.
	for scheme, want := range map[string]string{"light": "rgb(255, 245, 224)", "dark": "rgb(58, 46, 16)"} {
		colorScheme(alice, scheme)
		if got := testbrowser.Eval[string](alice, `getComputedStyle(document.querySelector(".dest-website")).backgroundColor`); got != want {
			t.Errorf("%s mode: the warning panel is %s, want %s", scheme, got, want)
		}
	}
	colorScheme(alice, "light")
	alice.Do(chromedp.Click(chromedp.ID("confirm_destination")))
	a.check(alice, "branded consent, website, ticked")
	alice.Screenshot(consentShots, "consent-branded.png")
	colorScheme(alice, "dark")
	alice.Screenshot(consentShots, "consent-branded-dark.png")
	colorScheme(alice, "light")

	t.Logf("%d branded page states checked with axe-core %v, each in light and dark mode: %s", len(a.states), axeTags, strings.Join(a.states, "; "))
}

// The passkey states, on a host where passkeys work (localhost): the sign-in page with its
// passkey button, the account page with a passkey, and the connect link refusing a password
// sign-in where the project requires a passkey.
func TestPasskeyAccessibilityInChromium(t *testing.T) {
	testbrowser.Chromium(t)
	a := &auditor{t: t, source: axeSource(t)}
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour, FrontHost: "127.0.0.1", GitHubHost: "127.0.0.2", PublicHost: "localhost"})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	alice := a.browser(ctx, "alice's browser")
	auth := authenticator(t, alice)
	presence(t, alice, auth, false)
	alice.Open(h.Issuer + "/sign-in")
	alice.WaitFor("Sign in with a passkey")
	a.check(alice, "sign-in, with a passkey button")
	presence(t, alice, auth, true)

	signInWithPassword(alice, h.Issuer, stack.AliceEmail, stack.AlicePassword)
	alice.WaitFor("Add a passkey")
	a.check(alice, "account, no passkey")
	alice.Press("Add a passkey")
	alice.WaitFor("The passkey was added")
	a.check(alice, "account, with a passkey")

	h.Project.SignIn.RequirePhishingResistant = true
	presence(t, alice, auth, false) // a password sign-in, not the autofill's passkey
	alice.Open(h.Issuer + "/sign-in?prompt=login")
	alice.Fill("username", stack.AliceEmail)
	alice.Fill("password", stack.AlicePassword)
	alice.Press("Sign in")
	alice.WaitFor("Your account")
	link := h.AgentExchange(h.AccessToken(stack.AliceEmail, stack.Agent)).Str("connect_uri")
	alice.Open(link)
	alice.WaitFor("Sign in with a passkey to continue")
	a.check(alice, "link, passkey required")
	t.Logf("%d passkey page states checked", len(a.states))
}

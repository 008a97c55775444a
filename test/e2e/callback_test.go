package e2e

import (
	"context"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"

	"latchkey.dev/latchkey/internal/testbrowser"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/callback"
)

const cbConfirmSentence = "This connects your GitHub account to the account %s. If you did not start this connection or that account is not yours, close this window."

// TestCallbackInRealBrowsers tells the story of a callback bound to the browser that started it
// (docs/connectors-for-admins.md) with real browsers: a forwarded authorization URL, the legitimate
// path and the app path. Latchkey is on 127.0.0.1 and the fake GitHub on 127.0.0.2, two different
// sites, with one Chromium profile per browser.
func TestCallbackInRealBrowsers(t *testing.T) {
	testbrowser.Chromium(t)
	h := stack.New(t, stack.Options{Audit: true, FrontHost: "127.0.0.1", GitHubHost: "127.0.0.2"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	signIn := func(p *testbrowser.Profile, email, password string) {
		t.Helper()
		p.Open(h.Issuer + "/sign-in")
		p.Fill("username", email)
		p.Fill("password", password)
		p.Press("Sign in")
		p.WaitFor("Your account")
	}
	signInGitHub := func(p *testbrowser.Profile, login, password string) {
		t.Helper()
		p.Open(h.GitHubURL + "/login")
		p.Fill("login", login)
		p.Fill("password", password)
		p.Press("Sign in")
		// The fake GitHub goes on to "/", which it does not serve; what matters is its cookie.
		p.WaitFor("404 page not found")
		if got := p.Cookies(h.GitHubURL); len(got) == 0 {
			t.Fatalf("%s: not signed in at GitHub", p.Name)
		}
	}

	mallory := testbrowser.New(t, ctx, "mallory's browser")
	alice := testbrowser.New(t, ctx, "alice's browser")

	// 1. The attack. Mallory starts a GitHub connection and copies the authorization URL
	// without opening it.
	signIn(mallory, stack.MalloryEmail, stack.MalloryPassword)
	mallory.WaitFor("Connect GitHub")
	mallory.Block(h.GitHubURL)
	authURL := mallory.PressAndCapture("Connect GitHub", h.GitHubURL+"/login/oauth/authorize?")
	if u, _ := url.Parse(authURL); u.Query().Get("redirect_uri") != h.CallbackURL {
		t.Fatalf("authorization URL %s does not carry the fixed callback", authURL)
	}
	var binding *network.Cookie
	for _, c := range mallory.Cookies(h.CallbackURL) {
		if c.Name == callback.CookieName(h.Server().Env()) {
			binding = c
		}
	}
	if binding == nil {
		t.Fatal("Mallory's browser holds no binding cookie")
	}
	if !binding.HTTPOnly || binding.SameSite != network.CookieSameSiteLax || binding.Path != "/team/demo/connectors/default/github/callback" {
		t.Errorf("binding cookie: HttpOnly=%v SameSite=%q Path=%q; want HttpOnly, Lax, the callback path", binding.HTTPOnly, binding.SameSite, binding.Path)
	}
	if got := cbCountNamed(alice.Cookies(h.CallbackURL), binding.Name); got != 0 {
		t.Fatal("profiles share cookies")
	}

	// Alice is signed in to GitHub, and approved the app before, so GitHub skips its page and
	// sends her straight back to the callback. She is not signed in to Latchkey (the victim of a
	// forwarded authorization URL need not even have an account here): the page names Mallory's
	// account, masked, and finishing needs a sign-in as that account, which Alice cannot give.
	// Signed in, she is refused outright (1b).
	signInGitHub(alice, stack.AliceLogin, stack.AlicePassword)
	h.GitHub.Approve(stack.AliceLogin, stack.GitHubClientID)
	alice.Open(authURL)
	text := alice.WaitFor("Finish this connection?")
	if want := fmt.Sprintf(cbConfirmSentence, "m***@example.com"); !strings.Contains(cbOneLine(text), want) {
		t.Errorf("Alice sees:\n%s\nwant:\n%s", text, want)
	}
	if !strings.Contains(text, "To finish, sign in as m***@example.com.") || strings.Contains(text, "Finish connecting") {
		t.Errorf("Alice, signed in as nobody, is offered:\n%s", text)
	}
	if strings.Contains(text, stack.MalloryEmail) {
		t.Error("the confirmation page shows Mallory's full address")
	}
	if loc := alice.Location(); !strings.HasPrefix(loc, h.CallbackURL+"?") {
		t.Errorf("Alice is at %s, want the callback", loc)
	}
	if n := h.CountRows("connections"); n != 0 {
		t.Fatalf("%d connections saved after Alice opened Mallory's URL; want none for anyone", n)
	}
	if n := h.GitHub.ExchangeCalls(); n != 0 {
		t.Fatalf("the code was exchanged %d times without the binding cookie", n)
	}

	// Mallory's site auto-submits the confirmation POST in Alice's browser, with the code and
	// state but without the page's token: refused before anything happens.
	cb, _ := url.Parse(alice.Location())
	attacker := cbAttackerSite(t, h.CallbackURL, cb.Query().Get("code"), cb.Query().Get("state"))
	alice.Open(attacker)
	alice.WaitFor("came from another site")
	if h.CountRows("connections") != 0 || h.GitHub.ExchangeCalls() != 0 {
		t.Fatal("the cross-site POST saved a connection")
	}

	// 1b. The same attack on a victim signed in to the same project as herself: her browser
	// cannot be Mallory's app path, so it is not offered Connect at all, and the attempt ends.
	signIn(alice, stack.AliceEmail, stack.AlicePassword)
	mallory.Open(h.Issuer + "/account")
	mallory.WaitFor("Connect GitHub")
	authURL = mallory.PressAndCapture("Connect GitHub", h.GitHubURL+"/login/oauth/authorize?")
	states := h.CountRows("callback_states")
	alice.Open(authURL)
	text = alice.WaitFor("This connection is not yours")
	if want := "This GitHub connection was started by the account m***@example.com, not by the account you are signed in with. It is not yours to finish. Nothing was saved, and this connection attempt has ended."; !strings.Contains(cbOneLine(text), want) {
		t.Errorf("signed-in Alice sees:\n%s\nwant:\n%s", text, want)
	}
	if strings.Contains(text, "Finish connecting") || strings.Contains(text, stack.MalloryEmail) {
		t.Errorf("the refusal offers Connect or shows Mallory's address:\n%s", text)
	}
	if status := testbrowser.Eval[int](alice, `performance.getEntriesByType("navigation")[0].responseStatus`); status != http.StatusForbidden {
		t.Errorf("the refusal answered %d, want 403", status)
	}
	if n := h.CountRows("callback_states"); n != states-1 {
		t.Errorf("state rows %d → %d; the refusal must end Mallory's attempt", states, n)
	}
	if h.CountRows("connections") != 0 || h.GitHub.ExchangeCalls() != 0 {
		t.Fatal("the refusal exchanged or saved")
	}
	// Opening the address again (GitHub issues a fresh code) finds the attempt used up.
	alice.Open(authURL)
	alice.WaitFor("It has expired or has already been used")
	if h.CountRows("connections") != 0 || h.GitHub.ExchangeCalls() != 0 {
		t.Fatal("reopening the forwarded address exchanged or saved")
	}

	// 2. The legitimate path: Alice connects from her own browser and it finishes at once.
	alice.Open(h.Issuer + "/account")
	alice.WaitFor("Connect GitHub")
	alice.Press("Connect GitHub")
	text = alice.WaitFor("is now connected.")
	if !strings.Contains(text, "Your GitHub account "+stack.AliceLogin+" is now connected.") || strings.Contains(text, "Finish this connection?") {
		t.Errorf("same-browser result:\n%s", text)
	}
	if got := cbCountNamed(alice.Cookies(h.CallbackURL), binding.Name); got != 0 {
		t.Error("the binding cookie survived the result page")
	}
	conns := h.Connections(stack.AliceEmail)
	if len(conns) != 1 || conns[0].AccountName != stack.AliceLogin || conns[0].Subject != h.Person(stack.AliceEmail).ID {
		t.Fatalf("Alice's connections: %+v", conns)
	}
	if n := h.CountRows("connections"); n != 1 {
		t.Fatalf("%d connections in all, want Alice's only", n)
	}
	alice.Open(h.Issuer + "/account")
	if text := alice.WaitFor(stack.AliceLogin); !strings.Contains(text, stack.AliceLogin+" at GitHub") {
		t.Errorf("account page does not name the account as GitHub does:\n%s", text)
	}

	// 3. The app path: Mallory starts in one browser (her app) and finishes in another (the
	// system browser, without the cookie, signed in to Latchkey as nobody). The page asks her to
	// sign in as the receiving account first; signed in, she confirms, and the connection is
	// hers.
	system := testbrowser.New(t, ctx, "mallory's system browser")
	mallory.Open(h.Issuer + "/account")
	mallory.WaitFor("Connect GitHub")
	appURL := mallory.PressAndCapture("Connect GitHub", h.GitHubURL+"/login/oauth/authorize?")
	signInGitHub(system, stack.MalloryLogin, stack.MalloryPassword)
	h.GitHub.Approve(stack.MalloryLogin, stack.GitHubClientID)
	system.Open(appURL)
	text = system.WaitFor("Finish this connection?")
	if want := fmt.Sprintf(cbConfirmSentence, "m***@example.com"); !strings.Contains(cbOneLine(text), want) {
		t.Errorf("system browser sees:\n%s", text)
	}
	if !strings.Contains(text, "To finish, sign in as m***@example.com.") || strings.Contains(text, "Finish connecting") {
		t.Errorf("a system browser signed in as nobody is offered:\n%s", text)
	}
	system.Press("Sign in to finish")
	system.WaitFor("Sign in")
	system.Fill("username", stack.MalloryEmail)
	system.Fill("password", stack.MalloryPassword)
	system.Press("Sign in")
	system.WaitFor("Finish connecting")
	if h.CountRows("connections") != 1 || h.GitHub.ExchangeCalls() != 1 {
		t.Fatal("the app path exchanged or saved before confirmation")
	}
	system.Press("Finish connecting")
	text = system.WaitFor("is now connected.")
	if !strings.Contains(text, "Your GitHub account "+stack.MalloryLogin+" is now connected.") {
		t.Errorf("app path result:\n%s", text)
	}
	mc := h.Connections(stack.MalloryEmail)
	if len(mc) != 1 || mc[0].AccountName != stack.MalloryLogin || mc[0].Subject != h.Person(stack.MalloryEmail).ID {
		t.Fatalf("Mallory's connections: %+v", mc)
	}
	if ac := h.Connections(stack.AliceEmail); len(ac) != 1 || ac[0].AccountName != stack.AliceLogin {
		t.Fatalf("Alice's connections changed: %+v", ac)
	}
	for _, r := range h.Audit() {
		if r.Action == "connection.confirmed" && r.Actor != h.Person(stack.MalloryEmail).ID {
			t.Errorf("confirmed connection recorded with actor %q", r.Actor)
		}
	}
}

// cbOneLine joins a page's paragraphs into one line of words.
func cbOneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func cbCountNamed(cs []*network.Cookie, name string) int {
	n := 0
	for _, c := range cs {
		if c.Name == name {
			n++
		}
	}
	return n
}

var cbAttackerPage = template.Must(template.New("").Parse(`<!doctype html><title>Free stickers</title>
<form method="post" action="{{.Action}}">
<input type="hidden" name="code" value="{{.Code}}"><input type="hidden" name="state" value="{{.State}}">
</form><script>document.forms[0].submit()</script>`))

// cbAttackerSite serves a page on 127.0.0.3, another site, that submits the confirmation form
// to Latchkey by itself.
func cbAttackerSite(t *testing.T, action, code, state string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.3:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		cbAttackerPage.Execute(w, map[string]string{"Action": action, "Code": code, "State": state})
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL + "/"
}

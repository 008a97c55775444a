package attacks

import (
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/testbrowser"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/callback"
	"latchkey.dev/latchkey/webhook/signin"
)

// The pages that end a callback in a browser no longer signed in as the person who started.
const (
	notYoursHeading = "This connection is not yours"
	signInToFinish  = "To finish, sign in as a***@example.com."
)

// startAtGitHub starts connecting GitHub in b, signed in as Alice, from her connect link or from
// her account page, and returns the address of GitHub's sign-in page the browser
// is sent to (Alice is not signed in at GitHub in b).
func (e *env) startAtGitHub(b *profile, fromLink bool, link string) string {
	e.t.Helper()
	if fromLink {
		b.Open(e.Front.URL + link)
		b.WaitFor("Connect your GitHub account and let Repo Helper use it.")
	} else {
		b.Open(e.Issuer + "/account")
		b.WaitFor("Connect GitHub")
	}
	b.Press("Connect GitHub")
	b.WaitFor("Sign in to GitHub")
	if e.CountRows("callback_states") != 1 {
		e.t.Fatal("Connect left no state row")
	}
	return b.Location()
}

// approveAtGitHub signs b in at GitHub as login on the page at loc and approves the app (unless
// login approved it before, when GitHub does not ask again); GitHub sends the browser back to Latchkey's callback. It returns what the callback page says.
func (e *env) approveAtGitHub(b *profile, loc, login, password, want string) string {
	e.t.Helper()
	b.Open(loc)
	b.WaitFor("Sign in to GitHub")
	b.Fill("login", login)
	b.Fill("password", password)
	approved := e.GitHub.Approved(login, stack.GitHubClientID)
	b.Press("Sign in")
	if !approved {
		b.WaitFor("Authorize")
		b.Press("Authorize")
	}
	return b.WaitFor(want)
}

// signOutOf signs b out of the project through the sign-out page.
func (e *env) signOutOf(b *profile) {
	e.t.Helper()
	b.Open(e.Issuer + "/sign-out")
	b.WaitFor("Sign out of")
	b.Press("Sign out")
	b.WaitFor("You are signed out")
}

// signInOver signs b in as email over whatever session it has, without signing out, as the
// "Sign in with another account" button does.
func (e *env) signInOver(b *profile, email, password string) {
	e.t.Helper()
	b.Open(e.Issuer + "/sign-in?prompt=login")
	b.Fill("username", email)
	b.Fill("password", password)
	b.Press("Sign in")
	b.WaitFor("Your account")
	if text := b.Text(); !strings.Contains(text, email) {
		e.t.Fatalf("not signed in as %s:\n%s", email, text)
	}
}

// aliceHasNothing fails when anything was connected or allowed for Alice, or her agent gets a
// GitHub token.
func (e *env) aliceHasNothing(what, linkID, subject string) {
	e.t.Helper()
	if n := e.CountRows("connections") + e.CountRows("agent_permissions"); n != 0 {
		for _, c := range e.Connections(stack.AliceEmail) {
			e.t.Errorf("%s: Alice's connection holds the GitHub account %s", what, c.AccountName)
		}
		e.t.Fatalf("%s: %d connections or permissions stored", what, n)
	}
	if x := e.GitHub.ExchangeCalls(); x != 0 {
		e.t.Fatalf("%s: %d codes exchanged", what, x)
	}
	if linkID != "" {
		if st := e.linkState(linkID); st != store.LinkOpen {
			e.t.Fatalf("%s: Alice's link is %s", what, st)
		}
	}
	if a := e.AgentExchange(subject); a.Status == http.StatusOK {
		e.t.Fatalf("%s: Alice's agent got a GitHub token: %s", what, a.Raw)
	}
}

// The same person must come back. In one real browser Alice starts connecting GitHub (from her
// connect link, or from her account page) and is sent to GitHub. Then Mallory takes over the
// browser: after Alice signs out, or over Alice's session without signing out (the "Sign in
// with another account" button). Mallory signs in at GitHub with her own account and approves.
// The callback, which finds the binding cookie Alice's start left, saves nothing: signing out
// ended Alice's attempt, and a browser signed in as Mallory is refused, with a
// connection.wrong_person event naming both. Alice's agent never gets Mallory's token.
func TestAnotherPersonFinishesInTheSameBrowserInChromium(t *testing.T) {
	testbrowser.Chromium(t)
	for _, from := range []string{"connect link", "account page"} {
		t.Run(from, func(t *testing.T) {
			e := newEnvOn(t, "127.0.0.1", "127.0.0.2")
			link, refusal, subject := e.linkFor(stack.AliceEmail)
			linkID := refusal.Str("connect_id")
			fromLink := from == "connect link"
			if !fromLink {
				linkID = "" // the link is not what this attempt is about
			}
			browser := newProfile(t, "the shared browser")

			// Alice signs out before Mallory signs in: the attempt ends with the sign-out.
			browser.signIn(e.Issuer, stack.AliceEmail, stack.AlicePassword)
			loc := e.startAtGitHub(browser, fromLink, link)
			e.signOutOf(browser)
			if n := e.CountRows("callback_states"); n != 0 {
				t.Errorf("%d state rows after Alice signed out; signing out ends her attempts", n)
			}
			if cs := browser.Cookies(e.CallbackURL); countNamed(cs, callback.CookieName(e.Server().Env())) != 0 {
				t.Error("the binding cookie outlived the sign-out")
			}
			browser.signIn(e.Issuer, stack.MalloryEmail, stack.MalloryPassword)
			text := e.approveAtGitHub(browser, loc, stack.MalloryLogin, stack.MalloryPassword, "This connection cannot be finished")
			if !strings.Contains(text, expiredText) {
				t.Errorf("Mallory sees:\n%s", text)
			}
			e.aliceHasNothing("after Alice signed out", linkID, subject)

			// Mallory signs in over Alice's session instead: the attempt and its cookie are
			// alive, and the callback itself refuses.
			e.forgetGitHub(browser)
			e.signInOver(browser, stack.AliceEmail, stack.AlicePassword)
			loc = e.startAtGitHub(browser, fromLink, link)
			e.signInOver(browser, stack.MalloryEmail, stack.MalloryPassword)
			text = e.approveAtGitHub(browser, loc, stack.MalloryLogin, stack.MalloryPassword, notYoursHeading)
			if want := "This GitHub connection was started by the account a***@example.com, not by the account you are signed in with. It is not yours to finish. Nothing was saved, and this connection attempt has ended."; !strings.Contains(cbLine(text), want) {
				t.Errorf("Mallory sees:\n%s\nwant:\n%s", text, want)
			}
			if status := testbrowser.Eval[int](browser.Profile, `performance.getEntriesByType("navigation")[0].responseStatus`); status != http.StatusForbidden {
				t.Errorf("the refusal answered %d, want 403", status)
			}
			if n := e.CountRows("callback_states"); n != 0 {
				t.Errorf("%d state rows; the refusal ends the attempt", n)
			}
			e.aliceHasNothing("after Mallory signed in over Alice's session", linkID, subject)
			var wrong []store.AuditRecord
			for _, r := range e.Audit() {
				if r.Action == callback.ActionWrongPerson {
					wrong = append(wrong, r)
				}
			}
			alice, mallory := e.PersonID(stack.AliceEmail), e.PersonID(stack.MalloryEmail)
			if len(wrong) != 1 || wrong[0].Details["owner"] != alice || wrong[0].Details["signed_in"] != mallory || wrong[0].Details["browser"] != "same" {
				t.Errorf("connection.wrong_person records: %+v", wrong)
			}
			if got := e.SecurityEvents("callback.other_person"); got != 1 {
				t.Errorf("callback.other_person counted %v times, want 1", got)
			}

		})
	}
}

// The signed-out variant: Alice starts connecting from her link and is sent to GitHub, then
// signs out; nobody signs in. The approval that comes back (with the binding cookie) saves
// nothing: the attempt ended with the sign-out. A sign-in that ended without signing out (the
// session cookie gone) keeps the attempt, and the callback asks for a sign-in as Alice, masked,
// before anything is exchanged; after it, the connection finishes for her.
func TestSignedOutCallbackInChromium(t *testing.T) {
	testbrowser.Chromium(t)
	e := newEnvOn(t, "127.0.0.1", "127.0.0.2")
	link, refusal, subject := e.linkFor(stack.AliceEmail)
	linkID := refusal.Str("connect_id")
	browser := newProfile(t, "alice's browser")

	browser.signIn(e.Issuer, stack.AliceEmail, stack.AlicePassword)
	loc := e.startAtGitHub(browser, true, link)
	e.signOutOf(browser)
	text := e.approveAtGitHub(browser, loc, stack.AliceLogin, stack.AlicePassword, "This connection cannot be finished")
	if !strings.Contains(text, expiredText) {
		t.Errorf("after signing out, the callback says:\n%s", text)
	}
	e.aliceHasNothing("after the approval came back signed out", linkID, subject)

	// The session ends without a sign-out (it expired, or its cookie was cleared) while Alice
	// is at GitHub.
	e.forgetGitHub(browser)
	browser.signIn(e.Issuer, stack.AliceEmail, stack.AlicePassword)
	loc = e.startAtGitHub(browser, true, link)
	session := signin.CookieName(e.Server().Env(), e.project(), "session")
	if _, err := chromedp.Call(browser.Ctx, network.DeleteCookies, network.DeleteCookiesParams{Name: session, URL: e.Issuer + "/"}); err != nil {
		t.Fatal(err)
	}
	// GitHub remembers the approval and sends her straight back.
	browser.Open(loc)
	browser.WaitFor("Sign in to GitHub")
	browser.Fill("login", stack.AliceLogin)
	browser.Fill("password", stack.AlicePassword)
	browser.Press("Sign in")
	text = browser.WaitFor(signInToFinish)
	if strings.Contains(text, "Finish connecting") || strings.Contains(text, stack.AliceEmail) {
		t.Errorf("signed out at the callback, Alice sees:\n%s", text)
	}
	e.aliceHasNothing("before signing in", linkID, subject)
	if n := e.CountRows("callback_states"); n != 1 {
		t.Fatalf("%d state rows; asking for a sign-in keeps the attempt", n)
	}
	browser.Press("Sign in to finish")
	browser.WaitFor("Sign in")
	browser.Fill("username", stack.AliceEmail)
	browser.Fill("password", stack.AlicePassword)
	browser.Press("Sign in")
	browser.WaitFor("is now connected.")
	if cs := e.Connections(stack.AliceEmail); len(cs) != 1 || cs[0].AccountName != stack.AliceLogin {
		t.Fatalf("Alice's connections: %+v", cs)
	}
	if a := e.AgentExchange(subject); a.Status != http.StatusOK {
		t.Fatalf("Alice's agent after she connected: %d %s", a.Status, a.Raw)
	}
	if st := e.linkState(linkID); st != store.LinkDone {
		t.Errorf("the link is %s", st)
	}
}

// forgetGitHub signs b out of GitHub, so the next approval asks who is signing in there.
func (e *env) forgetGitHub(b *profile) {
	e.t.Helper()
	for _, c := range b.Cookies(e.GitHubURL) {
		if _, err := chromedp.Call(b.Ctx, network.DeleteCookies, network.DeleteCookiesParams{Name: c.Name, URL: e.GitHubURL + "/"}); err != nil {
			e.t.Fatal(err)
		}
	}
}

func countNamed(cs []*network.Cookie, name string) int {
	n := 0
	for _, c := range cs {
		if c.Name == name {
			n++
		}
	}
	return n
}

// cbLine joins a page's paragraphs into one line of words.
func cbLine(s string) string { return strings.Join(strings.Fields(s), " ") }

package attacks

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/callback"
)

// connectFromLink signs email in, opens their own connect link and presses Connect GitHub. It
// returns the browser, the link's connect_id and the authorization URL the browser was sent to
// (not followed: the attacker copies it).
func (e *env) connectFromLink(email string) (*stack.Browser, string, string) {
	e.t.Helper()
	link, refusal, _ := e.linkFor(email)
	b := e.signedIn(email)
	action, f, ok := b.MustGet(link).Form("Connect GitHub")
	if !ok {
		e.t.Fatalf("%s is not offered Connect GitHub", email)
	}
	res := b.MustPost(action, f)
	if res.Status != http.StatusSeeOther || !strings.HasPrefix(res.Location(), e.GitHubURL+"/login/oauth/authorize?") {
		e.t.Fatalf("Connect answered %d → %s", res.Status, res.Location())
	}
	if b.BindingCookie() == nil {
		e.t.Fatal("no binding cookie after Connect")
	}
	return b, refusal.Str("connect_id"), res.Location()
}

// atGitHub opens authURL in b, signed in at the fake GitHub as login with the app approved
// before, and returns the callback address GitHub sends the browser back to.
func (e *env) atGitHub(b *stack.Browser, login, authURL string) string {
	e.t.Helper()
	b.SignInGitHub(login)
	e.GitHub.Approve(login, stack.GitHubClientID)
	res := b.MustGet(authURL)
	if res.Status != http.StatusFound || !strings.HasPrefix(res.Location(), e.CallbackURL+"?") {
		e.t.Fatalf("GitHub answered %d → %s", res.Status, res.Location())
	}
	return res.Location()
}

func assertConfirmation(t *testing.T, p stack.Page, masked string) (code, state, token string) {
	t.Helper()
	if p.Status != http.StatusOK || !strings.Contains(p.Text(), confirmHeading) || !strings.Contains(p.Text(), masked) {
		t.Fatalf("want the confirmation page naming %s, got %d: %s", masked, p.Status, p.Text())
	}
	for _, leak := range []string{stack.MalloryEmail, stack.AliceEmail, stack.AliceLogin, stack.MalloryLogin} {
		if strings.Contains(p.Body, leak) {
			t.Errorf("the confirmation page shows %q", leak)
		}
	}
	if p.Header.Get("Cache-Control") != "no-store" || p.Header.Get("Referrer-Policy") != "no-referrer" ||
		!strings.Contains(p.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Errorf("confirmation page headers: %v", p.Header)
	}
	_, f, ok := p.Form("Finish connecting")
	if !ok {
		t.Fatal("no Finish connecting form")
	}
	return f.Get("code"), f.Get("state"), f.Get("confirm_token")
}

// assertSignInFirst checks the page a browser signed in as nobody (of this project) gets at the
// callback: the receiving account, masked, and a sign-in as that account; no way to confirm.
func assertSignInFirst(t *testing.T, p stack.Page, masked string) {
	t.Helper()
	if !strings.Contains(p.Text(), confirmHeading) || !strings.Contains(p.Text(), "To finish, sign in as "+masked+".") {
		t.Fatalf("want the page asking for a sign-in as %s, got %d: %s", masked, p.Status, p.Text())
	}
	if _, _, ok := p.Form("Finish connecting"); ok || strings.Contains(p.Body, "confirm_token") {
		t.Fatal("a browser signed in as nobody is offered a way to confirm")
	}
	for _, leak := range []string{stack.MalloryEmail, stack.AliceEmail, stack.AliceLogin, stack.MalloryLogin} {
		if strings.Contains(p.Body, leak) {
			t.Errorf("the page shows %q", leak)
		}
	}
	if p.Header.Get("Cache-Control") != "no-store" || p.Header.Get("Referrer-Policy") != "no-referrer" ||
		!strings.Contains(p.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Errorf("page headers: %v", p.Header)
	}
}

// TestForwardedAuthorizationURL is the forwarded authorization URL (a callback finishes only for
// the person who started it, docs/connectors-for-admins.md) started from a connect link: Mallory
// presses Connect on her own link and sends the GitHub address to Alice, who is signed in to
// GitHub and approved the app before, but not to this project (signed in here, she is refused
// outright: TestForwardedAuthorizationURLSignedIn). Alice's browser lands on a page naming
// Mallory's account, masked, that asks for a sign-in as that account; nothing is exchanged or
// saved, the link stays open and Mallory's agent is still refused. Every way of pushing the
// confirmation through fails in a browser not signed in as Mallory, even with a genuine
// confirmation token.
func TestForwardedAuthorizationURL(t *testing.T) {
	for _, aliceState := range []string{"signed in to another project", "with a binding cookie of her own", "not signed in to Latchkey"} {
		t.Run(aliceState, func(t *testing.T) {
			e := newEnv(t)
			_, linkID, authURL := e.connectFromLink(stack.MalloryEmail)
			var alice *stack.Browser
			switch aliceState {
			case "signed in to another project":
				other := e.addOtherProject()
				alice = e.Browser()
				if res := signInAt(t, alice, alice.MustGet(other+"/sign-in"), stack.AliceEmail, stack.AlicePassword); res.Status != http.StatusOK {
					t.Fatalf("sign-in at the other project: %d %s", res.Status, res.Text())
				}
			case "with a binding cookie of her own":
				alice, _, _ = e.connectFromLink(stack.AliceEmail)
				e.signOut(alice)
			default:
				alice = e.Browser()
			}
			states := e.CountRows("callback_states")
			cb := e.atGitHub(alice, stack.AliceLogin, authURL)
			page := alice.MustGet(cb)
			if page.Status != http.StatusOK {
				t.Fatalf("callback answered %d", page.Status)
			}
			assertSignInFirst(t, page, "m***@example.com")
			q := mustURL(cb).Query()
			code, state := q.Get("code"), q.Get("state")

			nothingSaved := func(what string) {
				t.Helper()
				if n := e.CountRows("connections") + e.CountRows("agent_permissions"); n != 0 {
					t.Fatalf("%s: %d connections or permissions", what, n)
				}
				if n := e.GitHub.ExchangeCalls(); n != 0 {
					t.Fatalf("%s: GitHub exchanged %d codes", what, n)
				}
				if st := e.linkState(linkID); st != store.LinkOpen {
					t.Fatalf("%s: Mallory's link is %s", what, st)
				}
				if a := e.AgentExchange(e.AccessToken(stack.MalloryEmail, "repo-helper")); a.Status == http.StatusOK {
					t.Fatalf("%s: Mallory's agent got a token", what)
				}
			}
			nothingSaved("after the callback in Alice's browser")
			if n := e.CountRows("callback_states"); n != states {
				t.Fatalf("the callback changed the state rows: %d → %d", states, n)
			}

			// Mallory, signed in in her own browser, renders the confirmation for Alice's code
			// (more than she could: she never sees the code) and gets a genuine token.
			mal := e.signedIn(stack.MalloryEmail)
			_, _, token := assertConfirmation(t, mal.MustGet(cb), "m***@example.com")

			// An attacker's site submits the form in Alice's browser.
			for origin, f := range map[string]url.Values{
				"http://127.0.0.3:8080": {"code": {code}, "state": {state}},
				"null":                  {"code": {code}, "state": {state}, "confirm_token": {token}},
			} {
				res := alice.MustPostFrom(e.CallbackURL, f, origin)
				if res.Status != http.StatusForbidden || !strings.Contains(res.Text(), crossSiteText) {
					t.Errorf("cross-origin confirmation from %s: %d %s", origin, res.Status, res.Text())
				}
			}
			for name, f := range map[string]url.Values{
				"no token":         {"code": {code}, "state": {state}},
				"empty token":      {"code": {code}, "state": {state}, "confirm_token": {""}},
				"guessed token":    {"code": {code}, "state": {state}, "confirm_token": {strings.Repeat("A", 43)}},
				"state as token":   {"code": {code}, "state": {state}, "confirm_token": {state}},
				"token, new code":  {"code": {"attacker-code"}, "state": {state}, "confirm_token": {token}},
				"token, long code": {"code": {code + "x"}, "state": {state}, "confirm_token": {token}},
			} {
				res := alice.MustPost(e.CallbackURL, f)
				if res.Status != http.StatusForbidden || !strings.Contains(res.Text(), "This connection was not finished") {
					t.Errorf("%s: %d %s", name, res.Status, res.Text())
				}
			}
			// The genuine token itself, in Alice's browser: a sign-in as Mallory first.
			res := alice.MustPost(e.CallbackURL, url.Values{"code": {code}, "state": {state}, "confirm_token": {token}})
			if res.Status != http.StatusForbidden {
				t.Errorf("the genuine token in Alice's browser: %d %s", res.Status, res.Text())
			}
			assertSignInFirst(t, res, "m***@example.com")
			nothingSaved("after forged confirmations")

			// A token Mallory renders for a code she made up is bound to that code.
			_, _, mtoken := assertConfirmation(t, mal.MustGet(e.CallbackURL+"?"+url.Values{"state": {state}, "code": {"made-up"}}.Encode()), "m***@example.com")
			for _, c := range []string{code, "made-up-too"} {
				if res := alice.MustPost(e.CallbackURL, url.Values{"code": {c}, "state": {state}, "confirm_token": {mtoken}}); res.Status != http.StatusForbidden {
					t.Errorf("Mallory's token for another code (%s): %d %s", c, res.Status, res.Text())
				}
			}
			nothingSaved("after stale and foreign tokens")

			// After ten minutes the state is gone; even the current token does nothing.
			_, _, token3 := assertConfirmation(t, mal.MustGet(cb), "m***@example.com")
			e.Clock.Advance(10*time.Minute + time.Second)
			res = alice.MustPost(e.CallbackURL, url.Values{"code": {code}, "state": {state}, "confirm_token": {token3}})
			if res.Status != http.StatusBadRequest || !strings.Contains(res.Text(), expiredText) {
				t.Errorf("confirmation after ten minutes: %d %s", res.Status, res.Text())
			}
			if res := alice.MustGet(cb); res.Status != http.StatusBadRequest || strings.Contains(res.Text(), confirmHeading) {
				t.Errorf("callback after ten minutes: %d %s", res.Status, res.Text())
			}
			nothingSaved("after ten minutes")
		})
	}
}

// TestForwardedAuthorizationURLSignedIn: the same forwarded address in a browser signed in to
// this project as Alice (with or without a binding cookie of her own) cannot be Mallory's app
// path. It is refused without a confirmation page, the attempt ends so its code finishes
// nowhere, and nothing is saved; Mallory's link stays open for Mallory.
func TestForwardedAuthorizationURLSignedIn(t *testing.T) {
	for _, aliceState := range []string{"no binding cookie", "with a binding cookie of her own", "signing in from the page"} {
		t.Run(aliceState, func(t *testing.T) {
			e := newEnv(t)
			_, linkID, authURL := e.connectFromLink(stack.MalloryEmail)
			var alice *stack.Browser
			switch aliceState {
			case "no binding cookie":
				alice = e.signedIn(stack.AliceEmail)
			case "with a binding cookie of her own":
				alice, _, _ = e.connectFromLink(stack.AliceEmail)
			default:
				alice = e.Browser()
			}
			states := e.CountRows("callback_states")
			cb := e.atGitHub(alice, stack.AliceLogin, authURL)
			res := alice.MustGet(cb)
			if aliceState == "signing in from the page" {
				// Alice does what the page offers, with her own account: she comes back to the
				// callback signed in as herself.
				assertSignInFirst(t, res, "m***@example.com")
				action, f, _ := res.Form("Sign in to finish")
				back := f.Get("return_to")
				done := signInAt(t, alice, alice.MustGet(action+"?"+f.Encode()), stack.AliceEmail, stack.AlicePassword)
				if next := done.Continue(); next != back || !strings.HasPrefix(e.Front.URL+next, e.CallbackURL+"?") {
					t.Fatalf("sign-in continues to %q, want %q", next, back)
				}
				res = alice.MustGet(back)
			}
			if res.Status != http.StatusForbidden || !strings.Contains(res.Text(), notYoursText) || !strings.Contains(res.Text(), "Nothing was saved") || strings.Contains(res.Text(), confirmHeading) {
				t.Fatalf("want the refusal, got %d: %s", res.Status, res.Text())
			}
			if _, _, ok := res.Form("Finish connecting"); ok || strings.Contains(res.Body, stack.MalloryEmail) {
				t.Error("the refusal offers Connect or shows Mallory's address")
			}
			if n := e.CountRows("callback_states"); n != states-1 {
				t.Errorf("state rows %d → %d; the refusal must end Mallory's attempt", states, n)
			}
			for name, b := range map[string]*stack.Browser{"Alice again": alice, "a browser signed in as nobody": e.Browser()} {
				if res := b.MustGet(cb); res.Status != http.StatusBadRequest || !strings.Contains(res.Text(), expiredText) {
					t.Errorf("%s: %d %s", name, res.Status, res.Text())
				}
			}
			if n := e.CountRows("connections") + e.CountRows("agent_permissions"); n != 0 || e.GitHub.ExchangeCalls() != 0 {
				t.Fatalf("%d connections or permissions, %d exchanges", n, e.GitHub.ExchangeCalls())
			}
			if st := e.linkState(linkID); st != store.LinkOpen {
				t.Fatalf("Mallory's link is %s", st)
			}
			if a := e.AgentExchange(e.AccessToken(stack.MalloryEmail, "repo-helper")); a.Status == http.StatusOK {
				t.Fatal("Mallory's agent got a token")
			}
		})
	}
}

// TestCallbackStateIsBound: a state works only at its own project's callback, only with its own
// binding cookie, only once, and an error report ends it; garbage gets a page, never a 500.
func TestCallbackStateIsBound(t *testing.T) {
	t.Run("another project's callback", func(t *testing.T) {
		e := newEnv(t)
		otherIssuer := e.addOtherProject()
		mallory, _, authURL := e.connectFromLink(stack.MalloryEmail)
		cb := e.atGitHub(mallory, stack.MalloryLogin, authURL)
		u, _ := url.Parse(cb)
		// The same connector's path, at the other project.
		foreign := otherIssuer + config.CallbackPath("default", "github") + "?" + u.RawQuery
		for name, b := range map[string]*stack.Browser{"Mallory's browser": mallory, "a fresh browser": e.Browser()} {
			res := b.MustGet(foreign)
			if res.Status != http.StatusBadRequest || !strings.Contains(res.Text(), expiredText) {
				t.Errorf("%s at the other project: %d %s", name, res.Status, res.Text())
			}
			foreignPath, _, _ := strings.Cut(foreign, "?")
			res = b.MustPost(foreignPath, url.Values{"code": {u.Query().Get("code")}, "state": {u.Query().Get("state")}, "confirm_token": {"x"}})
			if res.Status != http.StatusBadRequest {
				t.Errorf("%s POST at the other project: %d %s", name, res.Status, res.Text())
			}
		}
		if e.CountRows("connections") != 0 || e.GitHub.ExchangeCalls() != 0 {
			t.Fatal("the other project's callback exchanged or saved")
		}
		// The state is still good where it belongs.
		if res := mallory.MustGet(cb); res.Status != http.StatusOK || !strings.Contains(res.Text(), "is now connected") {
			t.Fatalf("own callback afterwards: %d %s", res.Status, res.Text())
		}
	})

	t.Run("binding cookie of one connection with the state of another", func(t *testing.T) {
		e := newEnv(t)
		// Mallory starts two connections in two browsers; each holds its own cookie.
		first, _, _ := e.connectFromLink(stack.MalloryEmail)
		second := e.signedIn(stack.MalloryEmail)
		res := second.PressOnAccount("Connect GitHub")
		authB := res.Location()
		cbB := e.atGitHub(second, stack.MalloryLogin, authB)
		// The first browser presents its cookie with the second connection's state.
		page := first.MustGet(cbB)
		assertConfirmation(t, page, "m***@example.com")
		if e.GitHub.ExchangeCalls() != 0 || e.CountRows("connections") != 0 {
			t.Fatal("a foreign binding cookie finished the connection")
		}
		// A cookie value copied in by hand from the other browser is just as foreign.
		cbURL, _ := url.Parse(e.CallbackURL)
		forged := &http.Cookie{Name: callback.CookieName(e.Server().Env()), Value: strings.Repeat("A", 43), Path: cbURL.Path}
		third := e.Browser()
		third.Jar.SetCookies(cbURL, []*http.Cookie{forged})
		assertSignInFirst(t, third.MustGet(cbB), "m***@example.com")
		if e.GitHub.ExchangeCalls() != 0 {
			t.Fatal("a made-up binding cookie finished the connection")
		}
	})

	t.Run("an error report with a live state ends it", func(t *testing.T) {
		e := newEnv(t)
		mallory, linkID, authURL := e.connectFromLink(stack.MalloryEmail)
		cb := e.atGitHub(mallory, stack.MalloryLogin, authURL)
		u, _ := url.Parse(cb)
		state := u.Query().Get("state")
		for _, errCode := range []string{"access_denied", "server_error", strings.Repeat("x", 3000), "<script>alert(1)</script>"} {
			res := e.Browser().MustGet(e.CallbackURL + "?" + url.Values{"state": {state}, "error": {errCode}, "error_description": {"<b>injected</b>"}}.Encode())
			if res.Status != http.StatusOK || !strings.Contains(res.Text(), "Nothing was connected") {
				t.Errorf("error %.20q: %d %s", errCode, res.Status, res.Text())
			}
			if strings.Contains(res.Body, "<script>alert") || strings.Contains(res.Body, "<b>injected") || strings.Contains(res.Body, "injected") {
				t.Errorf("the error page shows the sender's text")
			}
		}
		// The code that arrives after the error (or a replay of the genuine callback) is too late.
		if res := mallory.MustGet(cb); res.Status != http.StatusBadRequest || !strings.Contains(res.Text(), expiredText) {
			t.Fatalf("callback after an error: %d %s", res.Status, res.Text())
		}
		if e.CountRows("connections") != 0 || e.GitHub.ExchangeCalls() != 0 {
			t.Fatal("saved after an error")
		}
		if st := e.linkState(linkID); st != store.LinkOpen {
			t.Fatalf("the link is %s after a cancelled attempt", st)
		}
	})

	t.Run("replaying the callback after success", func(t *testing.T) {
		e := newEnv(t)
		mallory, linkID, authURL := e.connectFromLink(stack.MalloryEmail)
		binding := *mallory.BindingCookie()
		cb := e.atGitHub(mallory, stack.MalloryLogin, authURL)
		if res := mallory.MustGet(cb); res.Status != http.StatusOK || !strings.Contains(res.Text(), "is now connected") {
			t.Fatalf("first callback: %d %s", res.Status, res.Text())
		}
		if mallory.BindingCookie() != nil {
			t.Error("the binding cookie survived the result page")
		}
		if st := e.linkState(linkID); st != store.LinkDone {
			t.Fatalf("link is %s after connecting", st)
		}
		cbURL, _ := url.Parse(e.CallbackURL)
		mallory.Jar.SetCookies(cbURL, []*http.Cookie{&binding})
		for name, b := range map[string]*stack.Browser{"same browser, cookie put back": mallory, "another browser": e.Browser()} {
			res := b.MustGet(cb)
			if res.Status != http.StatusBadRequest || strings.Contains(res.Text(), confirmHeading) {
				t.Errorf("%s: %d %s", name, res.Status, res.Text())
			}
		}
		if e.GitHub.ExchangeCalls() != 1 || e.CountRows("connections") != 1 {
			t.Fatalf("replays: %d exchanges, %d connections", e.GitHub.ExchangeCalls(), e.CountRows("connections"))
		}
	})

	t.Run("garbage never gets a 500", func(t *testing.T) {
		e := newEnv(t)
		mallory, _, authURL := e.connectFromLink(stack.MalloryEmail)
		cb := e.atGitHub(mallory, stack.MalloryLogin, authURL)
		u, _ := url.Parse(cb)
		state, code := u.Query().Get("state"), u.Query().Get("code")
		long := strings.Repeat("A", 5000)
		queries := []string{
			"",
			"state=" + state,
			"code=" + code,
			"state=" + long + "&code=" + code,
			"state=" + state + "&code=" + long,
			"state=" + state + "&state=" + state + "&code=" + code,
			"state=" + state + "&code=" + code + "&code=" + code,
			"state=%00&code=%00",
			"state=%ff%fe&code=%c0%af",
			"state=" + state + "%00&code=" + code,
			"error=&error=x&state=" + state,
			"state=" + state + "&code=" + code + "&%zz=1",
			"%%%%",
		}
		for _, q := range queries {
			res := e.Browser().MustGet(e.CallbackURL + "?" + q)
			if res.Status >= 500 || res.Status < 200 || (res.Status == http.StatusOK && !strings.Contains(res.Text(), confirmHeading) && !strings.Contains(res.Text(), "Nothing was connected")) {
				t.Errorf("GET ?%.60s: %d %s", q, res.Status, res.Text())
			}
		}
		posts := map[string]string{
			"huge body":      "state=" + state + "&code=" + code + "&confirm_token=" + strings.Repeat("A", 20000),
			"bad escapes":    "state=%zz&code=%",
			"repeated state": "state=" + state + "&state=x&code=" + code + "&confirm_token=x",
			"empty":          "",
		}
		for name, body := range posts {
			req, _ := http.NewRequest(http.MethodPost, e.CallbackURL, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", e.Front.URL)
			if res := e.Browser().MustDo(req); res.Status >= 500 || res.Status == http.StatusOK {
				t.Errorf("POST %s: %d %s", name, res.Status, res.Text())
			}
		}
		req, _ := http.NewRequest(http.MethodPost, e.CallbackURL, strings.NewReader("--x\r\nContent-Disposition: form-data; name=\"state\"\r\n\r\n"+state+"\r\n--x--\r\n"))
		req.Header.Set("Content-Type", "multipart/form-data; boundary=x")
		req.Header.Set("Origin", e.Front.URL)
		if res := e.Browser().MustDo(req); res.Status >= 500 || res.Status == http.StatusOK {
			t.Errorf("multipart POST: %d %s", res.Status, res.Text())
		}
		if e.CountRows("connections") != 0 || e.GitHub.ExchangeCalls() != 0 {
			t.Fatal("garbage saved or exchanged something")
		}
		// The genuine callback still works afterwards: garbage did not use up the state.
		if res := mallory.MustGet(cb); res.Status != http.StatusOK || !strings.Contains(res.Text(), "is now connected") {
			t.Fatalf("genuine callback after garbage: %d %s", res.Status, res.Text())
		}
	})
}

package attacks

import (
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
)

// assertWrongPerson checks the check-3 page: it refuses, says nothing about whose link it is or
// what it is for, and offers nothing.
func assertWrongPerson(t *testing.T, p stack.Page, who string) {
	t.Helper()
	if p.Status != http.StatusForbidden || !strings.Contains(p.Text(), wrongPersonText) {
		t.Fatalf("%s: want the wrong-person page, got %d at %s: %s", who, p.Status, p.URL, p.Text())
	}
	text := strings.ToLower(p.Text())
	leaks := []string{"repo helper", "github", "connect ", "allow", "decline"}
	if strings.Contains(who, "alice") {
		leaks = append(leaks, "mallory")
	} else {
		leaks = append(leaks, "alice")
	}
	for _, leak := range leaks {
		if strings.Contains(text, leak) {
			t.Errorf("%s: the wrong-person page says %q:\n%s", who, leak, p.Text())
		}
	}
	for _, label := range []string{"Connect GitHub", "Allow", "Decline", "Reconnect GitHub"} {
		if _, _, ok := p.Form(label); ok {
			t.Errorf("%s: the wrong-person page has a %q form", who, label)
		}
	}
	if loc := p.Header.Get("Location"); loc != "" {
		t.Errorf("%s: the wrong-person page redirects to %s", who, loc)
	}
}

func (e *env) wrongPersonEvents(actor string) int {
	n := 0
	for _, r := range e.Audit() {
		if r.Action == events.LinkWrongPerson && r.Actor == actor {
			n++
		}
	}
	return n
}

// TestForwardedLink is the forwarded connect link and its variants (Mallory sends Alice the link
// her agent got): whoever opens a link that was not made for them is stopped at check 3 (the
// signed-in person must be the link's), however they arrived, and nothing changes.
func TestForwardedLink(t *testing.T) {
	t.Run("Alice opens Mallory's link while signed in", func(t *testing.T) {
		e := newEnv(t)
		link, refusal, subject := e.linkFor(stack.MalloryEmail)
		alice := e.signedIn(stack.AliceEmail)
		alice.SignInGitHub(stack.AliceLogin)
		e.GitHub.Approve(stack.AliceLogin, stack.GitHubClientID)

		p := alice.MustGet(link)
		assertWrongPerson(t, p, "alice@example.com")
		e.assertNothingStored("after Alice opened Mallory's link")
		if n := e.wrongPersonEvents(e.Person(stack.AliceEmail).ID); n != 1 {
			t.Errorf("%d link.wrong_person records with Alice as actor, want 1", n)
		}
		if got := e.SecurityEvents(events.LinkWrongPerson); got != 1 {
			t.Errorf("link.wrong_person counted %v times", got)
		}
		// The link is untouched: Mallory's agent gets the same link again.
		if a := e.AgentExchange(subject); a.Str("connect_id") != refusal.Str("connect_id") || a.Str("connect_uri") != refusal.Str("connect_uri") {
			t.Fatalf("the link changed: %s", a.Raw)
		}
		if e.GitHub.ExchangeCalls() != 0 {
			t.Fatal("GitHub was asked for a code")
		}
	})

	t.Run("Alice not signed in signs in as herself and is still refused", func(t *testing.T) {
		e := newEnv(t)
		link, _, _ := e.linkFor(stack.MalloryEmail)
		alice := e.Browser()
		p := alice.MustGet(link)
		if p.Status != http.StatusSeeOther || !strings.Contains(p.Location(), "/sign-in?") {
			t.Fatalf("check 2: %d → %s", p.Status, p.Location())
		}
		if u, _ := url.Parse(p.Location()); u.Query().Get("return_to") != link {
			t.Fatalf("sign-in does not come back to the link: %s", p.Location())
		}
		form := alice.MustGet(p.Location())
		back := signInAt(t, alice, form, stack.AliceEmail, stack.AlicePassword)
		if back.Continue() != link {
			t.Fatalf("after sign-in the browser goes to %q, want the link", back.Continue())
		}
		assertWrongPerson(t, alice.MustGet(back.Continue()), "alice@example.com")
		e.assertNothingStored("after Alice signed in and came back")
	})

	t.Run("a stale session is refused at check 3, not sent to sign in", func(t *testing.T) {
		e := newEnv(t)
		link, _, _ := e.linkFor(stack.MalloryEmail)
		alice := e.signedIn(stack.AliceEmail)
		e.Clock.Advance(20 * time.Minute)
		assertWrongPerson(t, alice.MustGet(link), "alice@example.com")
	})

	t.Run("Mallory opens Alice's link and cannot become Alice", func(t *testing.T) {
		e := newEnv(t)
		link, _, _ := e.linkFor(stack.AliceEmail)
		mallory := e.Browser()
		p := mallory.MustGet(link)
		form := mallory.MustGet(p.Location())
		// Alice's address with Mallory's password (or a guess) does not sign in.
		for _, pw := range []string{stack.MalloryPassword, "", "alice", stack.AlicePassword + " "} {
			res := signInAt(t, mallory, form, stack.AliceEmail, pw)
			if res.Continue() != "" || strings.Contains(res.Text(), "You are signed in") {
				t.Fatalf("signed in as Alice with %q", pw)
			}
			form = res
		}
		back := signInAt(t, mallory, mallory.MustGet(p.Location()), stack.MalloryEmail, stack.MalloryPassword)
		assertWrongPerson(t, mallory.MustGet(back.Continue()), "mallory@example.com")
		e.assertNothingStored("after Mallory opened Alice's link")
	})

	t.Run("a session older than 15 minutes must sign in again, as the same person", func(t *testing.T) {
		e := newEnv(t)
		link, _, _ := e.linkFor(stack.AliceEmail)
		alice := e.signedIn(stack.AliceEmail)
		e.Clock.Advance(16 * time.Minute)
		p := alice.MustGet(link)
		if p.Status != http.StatusSeeOther {
			t.Fatalf("check 4: %d %s", p.Status, p.Text())
		}
		u, _ := url.Parse(p.Location())
		if u.Query().Get("prompt") != "login" || u.Query().Get("return_to") != link {
			t.Fatalf("check 4 sends to %s; want sign-in again and back to the link", p.Location())
		}
		// The stale session cannot act either: every action goes to sign in again.
		for _, action := range []string{"/connect", "/decline", "/allow"} {
			res := alice.MustPost(link+action, url.Values{"csrf_token": {"x"}})
			if res.Status != http.StatusSeeOther || !strings.Contains(res.Location(), "prompt=login") {
				t.Errorf("stale POST %s: %d %s", action, res.Status, res.Location())
			}
		}
		form := alice.MustGet(p.Location())
		if !strings.Contains(form.Body, `name="password"`) {
			t.Fatalf("prompt=login did not show the form to a signed-in browser: %s", form.Text())
		}
		back := signInAt(t, alice, form, stack.AliceEmail, stack.AlicePassword)
		offer := alice.MustGet(back.Continue())
		if _, _, ok := offer.Form("Connect GitHub"); !ok || offer.Status != http.StatusOK {
			t.Fatalf("after signing in again: %d %s", offer.Status, offer.Text())
		}
		e.assertNothingStored("after the offer was shown")
	})

	t.Run("someone else signs in at the fresh sign-in in the middle of the flow", func(t *testing.T) {
		e := newEnv(t)
		link, _, _ := e.linkFor(stack.AliceEmail)
		shared := e.signedIn(stack.AliceEmail) // a shared computer
		offer := shared.MustGet(link)
		_, aliceFields, ok := offer.Form("Connect GitHub")
		if !ok {
			t.Fatalf("Alice is not offered Connect: %s", offer.Text())
		}
		e.Clock.Advance(20 * time.Minute)
		p := shared.MustGet(link)
		back := signInAt(t, shared, shared.MustGet(p.Location()), stack.MalloryEmail, stack.MalloryPassword)
		assertWrongPerson(t, shared.MustGet(back.Continue()), "mallory@example.com")
		// Alice's form, still open in another tab, is now submitted under Mallory's session.
		for _, action := range []string{"/connect", "/decline", "/allow"} {
			assertWrongPerson(t, shared.MustPost(link+action, aliceFields), "mallory@example.com")
		}
		e.assertNothingStored("after Mallory took over the browser")
	})
}

// TestLinkActionsCannotBeReplayed sends the link page's actions with the wrong session, the
// wrong form token, from another origin, or naming someone else's account.
func TestLinkActionsCannotBeReplayed(t *testing.T) {
	e := newEnv(t)
	malloryConn := e.ConnectDirectly(stack.MalloryEmail, "1001", stack.MalloryLogin, "gho_mallory")
	link, refusal, subject := e.linkFor(stack.AliceEmail)
	alice := e.signedIn(stack.AliceEmail)
	mallory := e.signedIn(stack.MalloryEmail)
	offer := alice.MustGet(link)
	_, aliceFields, ok := offer.Form("Decline")
	if !ok {
		t.Fatalf("no Decline on Alice's page: %s", offer.Text())
	}
	malloryToken := func() string {
		// Mallory's own form token, from a page she can open.
		own, _, _ := e.linkFor(stack.MalloryEmail)
		_, f, ok := mallory.MustGet(own).Form("Decline")
		if !ok {
			t.Fatal("Mallory has no form on her own link")
		}
		return f.Get("csrf_token")
	}()
	actions := []string{"/connect", "/decline", "/allow"}

	unchanged := func(what string) {
		t.Helper()
		if st := e.linkState(refusal.Str("connect_id")); st != store.LinkOpen {
			t.Fatalf("%s: Alice's link is %s", what, st)
		}
		if n := e.CountRows("callback_states") + e.CountRows("agent_permissions"); n != 0 {
			t.Fatalf("%s: %d callback states or permissions", what, n)
		}
	}

	t.Run("Mallory's session with her own form token", func(t *testing.T) {
		for _, a := range actions {
			assertWrongPerson(t, mallory.MustPost(link+a, url.Values{"csrf_token": {malloryToken}, "connection_id": {malloryConn.ID}}), "mallory@example.com")
		}
		unchanged("Mallory's session")
	})
	t.Run("Mallory's session with Alice's form token", func(t *testing.T) {
		for _, a := range actions {
			assertWrongPerson(t, mallory.MustPost(link+a, aliceFields), "mallory@example.com")
		}
		unchanged("Alice's token in Mallory's session")
	})
	t.Run("Alice's session with Mallory's form token, none, or a guess", func(t *testing.T) {
		for _, tok := range []string{malloryToken, "", "x", secret.New("")} {
			for _, a := range actions {
				res := alice.MustPost(link+a, url.Values{"csrf_token": {tok}})
				if res.Status != http.StatusForbidden || !strings.Contains(res.Text(), "This form has expired") {
					t.Errorf("%s with token %q: %d %s", a, tok, res.Status, res.Text())
				}
			}
		}
		unchanged("bad form tokens")
	})
	t.Run("Alice's session and token from another origin", func(t *testing.T) {
		for _, origin := range []string{"http://127.0.0.3:8080", "null", "http://127.0.0.1:1"} {
			for _, a := range actions {
				res := alice.MustPostFrom(link+a, aliceFields, origin)
				if res.Status != http.StatusForbidden || !strings.Contains(res.Text(), crossSiteText) {
					t.Errorf("%s from %s: %d %s", a, origin, res.Status, res.Text())
				}
			}
		}
		// A browser that says so with Sec-Fetch-Site instead of Origin.
		for _, site := range []string{"cross-site", "same-site"} {
			req, _ := http.NewRequest(http.MethodPost, e.Front.URL+link+"/decline", strings.NewReader(aliceFields.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Sec-Fetch-Site", site)
			if res := alice.MustDo(req); res.Status != http.StatusForbidden {
				t.Errorf("Sec-Fetch-Site %s: %d %s", site, res.Status, res.Text())
			}
		}
		unchanged("cross-origin posts")
	})
	t.Run("repeated fields", func(t *testing.T) {
		f := url.Values{"csrf_token": {aliceFields.Get("csrf_token"), aliceFields.Get("csrf_token")}}
		if res := alice.MustPost(link+"/decline", f); res.Status != http.StatusBadRequest {
			t.Errorf("repeated csrf_token: %d %s", res.Status, res.Text())
		}
		unchanged("repeated fields")
	})

	t.Run("allow naming someone else's connection", func(t *testing.T) {
		// Alice connects an account, so her link becomes an allow link.
		e.ConnectDirectly(stack.AliceEmail, "2002", stack.AliceLogin, "gho_alice")
		a := e.AgentExchange(subject)
		if a.Str("reason") != "allow_required" {
			t.Fatalf("after connecting: %s", a.Raw)
		}
		allow := e.LinkPath(a.Str("connect_uri"))
		page := alice.MustGet(allow)
		_, f, ok := page.Form("Allow")
		if !ok {
			t.Fatalf("no Allow: %s", page.Text())
		}
		for _, id := range []string{malloryConn.ID, "", "nope", malloryConn.ID + "x"} {
			f.Set("connection_id", id)
			res := alice.MustPost(allow+"/allow", f)
			if res.Status != http.StatusBadRequest || strings.Contains(res.Text(), "Done") {
				t.Errorf("allow with connection %q: %d %s", id, res.Status, res.Text())
			}
		}
		if n := e.CountRows("agent_permissions"); n != 0 {
			t.Fatalf("%d permissions after allowing someone else's account", n)
		}
		if st := e.linkState(a.Str("connect_id")); st != store.LinkOpen {
			t.Fatalf("the allow link is %s", st)
		}
		if got := e.AgentExchange(subject); got.Str("reason") != "allow_required" {
			t.Fatalf("the agent got: %s", got.Raw)
		}
	})
}

// TestTwoTabsFinishOneLink races two submissions of the same link: one wins, the other sees the
// not-found page, and exactly one permission exists.
func TestTwoTabsFinishOneLink(t *testing.T) {
	e := newEnv(t)
	e.ConnectDirectly(stack.AliceEmail, "2002", stack.AliceLogin, "gho_alice")
	link, refusal, subject := e.linkFor(stack.AliceEmail)
	if refusal.Str("reason") != "allow_required" {
		t.Fatalf("want an allow link: %s", refusal.Raw)
	}
	alice := e.signedIn(stack.AliceEmail)
	_, f, ok := alice.MustGet(link).Form("Allow")
	if !ok {
		t.Fatal("no Allow")
	}
	_, df, _ := alice.MustGet(link).Form("Decline")
	const tabs = 8
	var wg sync.WaitGroup
	results := make([]stack.Page, tabs)
	for i := range tabs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, e.Front.URL+link+"/allow", strings.NewReader(f.Encode()))
			if i%2 == 1 {
				req, _ = http.NewRequest(http.MethodPost, e.Front.URL+link+"/decline", strings.NewReader(df.Encode()))
			}
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", e.Front.URL)
			resp, err := alice.C.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			results[i] = stack.Page{Status: resp.StatusCode}
		}()
	}
	wg.Wait()
	won := 0
	for _, r := range results {
		switch r.Status {
		case http.StatusOK:
			won++
		case http.StatusNotFound:
		default:
			t.Errorf("a tab got %d", r.Status)
		}
	}
	if won != 1 {
		t.Fatalf("%d tabs finished the link, want exactly 1", won)
	}
	st := e.linkState(refusal.Str("connect_id"))
	perms := e.CountRows("agent_permissions")
	switch {
	case st == store.LinkDone && perms == 1:
		if a := e.AgentExchange(subject); a.Status != http.StatusOK {
			t.Fatalf("allowed, but the agent gets %s", a.Raw)
		}
	case st == store.LinkDeclined && perms == 0:
	default:
		t.Fatalf("link %s with %d permissions", st, perms)
	}
}

// TestFinishedLinkRedirectsNowhere: the done and declined pages tell the person to go back to
// the agent; nothing sends the browser on.
func TestFinishedLinkRedirectsNowhere(t *testing.T) {
	for _, action := range []string{"Allow", "Decline"} {
		t.Run(action, func(t *testing.T) {
			e := newEnv(t)
			e.ConnectDirectly(stack.AliceEmail, "2002", stack.AliceLogin, "gho_alice")
			link, _, _ := e.linkFor(stack.AliceEmail)
			alice := e.signedIn(stack.AliceEmail)
			act, f, ok := alice.MustGet(link).Form(action)
			if !ok {
				t.Fatalf("no %s", action)
			}
			res := alice.MustPost(act, f)
			if res.Status != http.StatusOK || res.Header.Get("Location") != "" || res.Continue() != "" || strings.Contains(res.Body, "http-equiv") {
				t.Fatalf("%s answered %d, Location %q: %s", action, res.Status, res.Header.Get("Location"), res.Body)
			}
			if strings.Contains(res.Body, "<script") {
				t.Error("the result page runs a script")
			}
			if action == "Allow" && !strings.Contains(res.Text(), "Go back to Repo Helper") {
				t.Errorf("done page: %s", res.Text())
			}
		})
	}
}

// TestClosedLinksLookLikeNothing: a declined, replaced, finished or expired code, another
// project's code and a random code all get the same 404 — status, headers and body — signed out,
// signed in as the link's person, and signed in as someone else.
func TestClosedLinksLookLikeNothing(t *testing.T) {
	e := newEnv(t)
	e.addOtherProject()
	alice := e.signedIn(stack.AliceEmail)
	mallory := e.signedIn(stack.MalloryEmail)

	codes := map[string]string{}
	// Declined.
	declined, _, _ := e.linkFor(stack.AliceEmail)
	act, f, _ := alice.MustGet(declined).Form("Decline")
	if res := alice.MustPost(act, f); res.Status != http.StatusOK {
		t.Fatalf("decline: %d", res.Status)
	}
	codes["declined"] = declined
	// Replaced: connect becomes allow once an account exists.
	replaced, _, subject := e.linkFor(stack.MalloryEmail)
	e.ConnectDirectly(stack.MalloryEmail, "1001", stack.MalloryLogin, "gho_m")
	if a := e.AgentExchange(subject); a.Str("reason") != "allow_required" {
		t.Fatalf("no replacement: %s", a.Raw)
	} else {
		codes["replaced"] = replaced
		// Done: Mallory allows the agent.
		done := e.LinkPath(a.Str("connect_uri"))
		act, f, _ := mallory.MustGet(done).Form("Allow")
		if res := mallory.MustPost(act, f); res.Status != http.StatusOK {
			t.Fatalf("allow: %d %s", res.Status, res.Text())
		}
		codes["done"] = done
	}
	// Expired: a link of another agent (the MCP server's own), made now; then the clock moves
	// past its 30 minutes. Every other code is closed already, so that changes nothing else.
	expiring := e.AccessToken(stack.AliceEmail, stack.MCP, stack.MCPResource)
	ex := e.ExchangeAs(stack.MCP, stack.MCPSecret, expiring, stack.Audience)
	if ex.Str("connect_uri") == "" {
		t.Fatalf("no link for the MCP agent: %s", ex.Raw)
	}
	e.Clock.Advance(31 * time.Minute)
	codes["expired"] = e.LinkPath(ex.Str("connect_uri"))
	codes["random"] = e.Issuer[len(e.Front.URL):] + "/account/services/link/" + secret.New("")
	codes["short"] = e.Issuer[len(e.Front.URL):] + "/account/services/link/x"
	codes["long"] = e.Issuer[len(e.Front.URL):] + "/account/services/link/" + strings.Repeat("A", 300)
	// An open link of this project, opened under the other project's path.
	open, _, _ := e.linkFor(stack.AliceEmail)
	codes["other project's path"] = strings.Replace(open, "/team/demo/", "/team/other/", 1)

	type seen struct {
		status int
		header http.Header
		body   string
	}
	// The request's own id differs on every answer, whatever the code: it is random, so it says
	// nothing about the code.
	norm := func(p stack.Page) seen {
		h := p.Header.Clone()
		h.Del("Date")
		h.Del("X-Request-Id")
		return seen{p.Status, h, strings.ReplaceAll(p.Body, p.Header.Get("X-Request-Id"), "REQUEST-ID")}
	}
	for who, b := range map[string]*stack.Browser{"signed out": e.Browser(), "alice": alice, "mallory": mallory} {
		var want *seen
		var wantName string
		for name, path := range codes {
			for _, method := range []string{http.MethodGet, http.MethodPost} {
				var p stack.Page
				if method == http.MethodGet {
					p = b.MustGet(path)
				} else {
					p = b.MustPost(path+"/decline", url.Values{"csrf_token": {"x"}})
				}
				got := norm(p)
				if got.status != http.StatusNotFound || !strings.Contains(p.Text(), notFoundText) {
					t.Errorf("%s, %s %s: %d %s", who, method, name, got.status, p.Text())
					continue
				}
				if want == nil {
					want, wantName = &got, name
					continue
				}
				if got.body != want.body {
					t.Errorf("%s: %s %s's 404 body differs from %s's", who, method, name, wantName)
				}
				for k := range want.header {
					if got.header.Get(k) != want.header.Get(k) {
						t.Errorf("%s: %s %s's header %s = %q, %s's = %q", who, method, name, k, got.header.Get(k), wantName, want.header.Get(k))
					}
				}
				if len(got.header) != len(want.header) {
					t.Errorf("%s: %s %s has %d headers, %s has %d", who, method, name, len(got.header), wantName, len(want.header))
				}
			}
		}
	}
	// None of this opened, closed or recorded anything on the open link.
	if n := e.wrongPersonEvents(e.Person(stack.MalloryEmail).ID); n != 0 {
		t.Errorf("%d wrong-person events from 404s", n)
	}
}

package attacks

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/callback"
	"latchkey.dev/latchkey/webhook/signin"
)

// sessionCookie is the browser's session cookie for the project at issuer, or nil.
func sessionCookie(b *stack.Browser, issuer string) *http.Cookie {
	for _, c := range b.Jar.Cookies(mustURL(issuer + "/")) {
		if strings.Contains(c.Name, "_session_") {
			return c
		}
	}
	return nil
}

func signedInAs(b *stack.Browser, issuer string) string {
	p := b.MustGet(issuer + "/account")
	if p.Status != http.StatusOK {
		return ""
	}
	text := p.Text()
	i := strings.Index(text, "Signed in as ")
	if i < 0 {
		return ""
	}
	return strings.Fields(text[i+len("Signed in as "):])[0]
}

// TestSessions: a session value planted before sign-in is not adopted, a signed-out session is
// dead on the server, and one project's session means nothing at another.
func TestSessions(t *testing.T) {
	e := newEnv(t)
	otherIssuer := e.addOtherProject()

	t.Run("fixation", func(t *testing.T) {
		victim := e.Browser()
		planted := secret.New("")
		name := signin.CookieName(e.Server().Env(), e.project(), "session")
		victim.Jar.SetCookies(mustURL(e.Issuer+"/"), []*http.Cookie{{Name: name, Value: planted, Path: "/team/demo/"}})
		signInAt(t, victim, victim.MustGet(e.Issuer+"/sign-in?prompt=login"), stack.AliceEmail, stack.AlicePassword)
		if c := sessionCookie(victim, e.Issuer); c == nil || c.Value == planted {
			t.Fatalf("the planted session value was kept: %v", c)
		}
		// Whoever planted it holds nothing.
		attacker := e.Browser()
		attacker.Jar.SetCookies(mustURL(e.Issuer+"/"), []*http.Cookie{{Name: name, Value: planted, Path: "/team/demo/"}})
		if who := signedInAs(attacker, e.Issuer); who != "" {
			t.Fatalf("the planted value signs in as %s", who)
		}
	})

	t.Run("signed out is signed out on the server", func(t *testing.T) {
		b := e.signedIn(stack.AliceEmail)
		stolen := *sessionCookie(b, e.Issuer)
		action, f, ok := b.MustGet(e.Issuer + "/sign-out").Form("Sign out")
		if !ok {
			t.Fatal("no Sign out form")
		}
		if res := b.MustPost(action, f); res.Status != http.StatusOK || !strings.Contains(res.Text(), "You are signed out") {
			t.Fatalf("sign-out: %d %s", res.Status, res.Text())
		}
		thief := e.Browser()
		stolen.Path = "/team/demo/"
		thief.Jar.SetCookies(mustURL(e.Issuer+"/"), []*http.Cookie{&stolen})
		if who := signedInAs(thief, e.Issuer); who != "" {
			t.Fatalf("a signed-out session still works, as %s", who)
		}
	})

	t.Run("sign-out without the form token", func(t *testing.T) {
		b := e.signedIn(stack.AliceEmail)
		for _, tok := range []string{"", "x"} {
			if res := b.MustPost(e.Issuer+"/sign-out", url.Values{"csrf_token": {tok}}); res.Status != http.StatusForbidden {
				t.Errorf("sign-out with token %q: %d", tok, res.Status)
			}
		}
		if who := signedInAs(b, e.Issuer); who != stack.AliceEmail {
			t.Fatalf("signed in as %q after forged sign-outs", who)
		}
	})

	t.Run("one project's session at another", func(t *testing.T) {
		b := e.signedIn(stack.AliceEmail)
		c := sessionCookie(b, e.Issuer)
		other := *c
		other.Path = "/team/other/"
		p := e.Holder().Load().Project("team/other")
		other.Name = signin.CookieName(e.Server().Env(), p, "session")
		b.Jar.SetCookies(mustURL(otherIssuer+"/"), []*http.Cookie{&other})
		if who := signedInAs(b, otherIssuer); who != "" {
			t.Fatalf("demo's session signs in to the other project as %s", who)
		}
		// And a link of the other project's is not opened by it either.
		res := b.MustGet(otherIssuer + "/account/services/link/" + secret.New(""))
		if res.Status != http.StatusNotFound {
			t.Errorf("other project's link path: %d", res.Status)
		}
	})

	t.Run("the binding cookie never reaches other pages", func(t *testing.T) {
		b, _, _ := e.connectFromLink(stack.MalloryEmail)
		bc := b.BindingCookie()
		if bc == nil {
			t.Fatal("no binding cookie")
		}
		for _, u := range []string{e.Issuer + "/account", e.Issuer + "/sign-in", e.Issuer + "/", otherIssuer + config.CallbackPath("team", "github")} {
			for _, c := range b.Jar.Cookies(mustURL(u)) {
				if c.Name == bc.Name {
					t.Errorf("the binding cookie is sent to %s", u)
				}
			}
		}
	})
}

// TestAccountActionsOnOthersThings: the account page's actions name connections, agents and
// apps by id; naming someone else's changes nothing of theirs.
func TestAccountActionsOnOthersThings(t *testing.T) {
	e := newEnv(t)
	mc := e.ConnectDirectly(stack.MalloryEmail, "1001", stack.MalloryLogin, "gho_m")
	e.Allow(stack.MalloryEmail, stack.Agent, mc)
	mallorySubject := e.AccessToken(stack.MalloryEmail, stack.Agent)
	if a := e.AgentExchange(mallorySubject); a.Status != http.StatusOK {
		t.Fatalf("control: %s", a.Raw)
	}
	alice := e.signedIn(stack.AliceEmail)
	acct := alice.Account()
	_, f, ok := acct.Form("Connect GitHub")
	if !ok {
		t.Fatalf("no form on Alice's account page: %s", acct.Text())
	}
	tok := f.Get("csrf_token")
	for path, form := range map[string]url.Values{
		"/account/disconnect":    {"csrf_token": {tok}, "connection_id": {mc.ID}},
		"/account/agents/remove": {"csrf_token": {tok}, "connector": {e.Connector.Key}, "client_id": {stack.Agent}},
		"/account/apps/revoke":   {"csrf_token": {tok}, "client_id": {stack.Agent}},
	} {
		res := alice.MustPost(e.Issuer+path, form)
		if res.Status >= 500 {
			t.Errorf("%s: %d", path, res.Status)
		}
	}
	if cs := e.Connections(stack.MalloryEmail); len(cs) != 1 {
		t.Fatalf("Mallory has %d connections after Alice's actions", len(cs))
	}
	if a := e.AgentExchange(mallorySubject); a.Status != http.StatusOK {
		t.Fatalf("Mallory's agent lost access through Alice's actions: %s", a.Raw)
	}
	if !e.active(mallorySubject) {
		t.Fatal("Mallory's token was ended through Alice's actions")
	}
	// Alice's account page shows nothing of Mallory's.
	if text := alice.Account().Text(); strings.Contains(text, stack.MalloryLogin) || strings.Contains(strings.ToLower(text), "mallory") {
		t.Errorf("Alice's account page mentions Mallory: %s", text)
	}
}

// TestBindingCookieCannotBePlanted: over https the binding cookie carries the __Host- prefix, so
// no other site of the same registrable domain (a sibling subdomain) can plant the attacker's
// own binding value in the victim's browser with Domain= and have the attacker's authorization
// finish there at once, skipping the confirmation page. (Over plain http no prefix exists; any
// page on the same host can plant any cookie, which is one more reason production runs on https.)
func TestBindingCookieCannotBePlanted(t *testing.T) {
	e := newEnv(t)
	env := *e.Server().Env()
	pub := *env.PublicURL
	pub.Scheme = "https"
	env.PublicURL = &pub
	rec := httptest.NewRecorder()
	if _, err := callback.Begin(rec, httptest.NewRequest(http.MethodPost, "/", nil), &env, e.Store(), e.project(), e.Connector, e.PersonID(stack.MalloryEmail), callback.PurposeConnect, ""); err != nil {
		t.Fatal(err)
	}
	cookies := rec.Result().Cookies()
	if len(cookies) != 1 {
		t.Fatalf("cookies: %v", cookies)
	}
	c := cookies[0]
	if !strings.HasPrefix(c.Name, "__Host-") || c.Path != "/" || c.Domain != "" || !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode {
		t.Fatalf("binding cookie over https: %+v; want __Host-, Path=/, no Domain, Secure, HttpOnly, SameSite=Lax", c)
	}
	if c.Name != callback.CookieName(&env) {
		t.Fatalf("set as %q, read as %q", c.Name, callback.CookieName(&env))
	}
	// The session cookie has the same protection.
	if n := signin.CookieName(&env, e.project(), "session"); !strings.HasPrefix(n, "__Host-") {
		t.Errorf("session cookie over https: %q", n)
	}
}

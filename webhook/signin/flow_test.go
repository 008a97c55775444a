package signin_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook"
	"latchkey.dev/latchkey/webhook/signin"
)

func TestSignIn(t *testing.T) {
	t.Parallel()
	s := stack.New(t, stack.Options{})

	for _, who := range []struct{ user, pass string }{{stack.AliceEmail, stack.AlicePassword}, {"Bob@Example.com", stack.BobPassword}} {
		t.Run("success "+who.user, func(t *testing.T) {
			b := s.Browser()
			p := b.SignInPage(s.Issuer+"/account", who.user, who.pass)
			if p.Status != http.StatusOK || p.Continue() != "/team/demo/account" {
				t.Fatalf("after sign-in: %d continue=%q", p.Status, p.Continue())
			}
			c := stack.MustSessionCookie(t, p.Header)
			if !strings.HasPrefix(c.Name, "latchkey_session_") || c.Path != "/team/demo/" || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode {
				t.Errorf("session cookie %+v", c)
			}
			acct := b.MustGet(p.Continue())
			if acct.Status != http.StatusOK || !strings.Contains(acct.Text(), strings.ToLower(who.user)) {
				t.Errorf("account page: %d %s", acct.Status, acct.Text())
			}
			// The session row holds only the hash of the cookie value.
			got, err := s.Admin.GetSession(context.Background(), secret.Hash(c.Value), s.Clock.Now())
			if err != nil || !got.AuthTime.Equal(s.Clock.Now()) {
				t.Errorf("session %+v %v", got, err)
			}
		})
	}

	t.Run("wrong password and unknown person look the same", func(t *testing.T) {
		b := s.Browser()
		wrong := b.SignInPage("", stack.AliceEmail, "not it")
		unknown := b.SignInPage("", "mallory@example.com", "not it")
		if wrong.Status != unknown.Status || wrong.Status != http.StatusOK {
			t.Fatalf("status %d vs %d", wrong.Status, unknown.Status)
		}
		a := strings.ReplaceAll(wrong.Body, stack.AliceEmail, "X")
		u := strings.ReplaceAll(unknown.Body, "mallory@example.com", "X")
		if a != u {
			t.Errorf("pages differ:\n%s\n---\n%s", a, u)
		}
		if !strings.Contains(wrong.Text(), "do not match") || stack.SessionCookie(wrong.Header) != nil {
			t.Error("a failed sign-in must say so and set no session")
		}
	})

	t.Run("rate limit per account", func(t *testing.T) {
		b := s.Browser()
		var last stack.Page
		for i := 0; i <= signin.AccountBurst; i++ {
			last = b.SignInPage("", stack.BobEmail, "guess")
		}
		if last.Status != http.StatusTooManyRequests || !strings.Contains(last.Text(), "Too many") {
			t.Fatalf("after %d failures: %d", signin.AccountBurst+1, last.Status)
		}
		// Even the right password waits now; an unknown account is limited the same way.
		if p := b.SignInPage("", stack.BobEmail, stack.BobPassword); p.Status != http.StatusTooManyRequests {
			t.Errorf("right password during the limit: %d", p.Status)
		}
		for i := 0; i <= signin.AccountBurst; i++ {
			last = b.SignInPage("", "nobody@example.com", "guess")
		}
		if last.Status != http.StatusTooManyRequests {
			t.Errorf("unknown account not limited: %d", last.Status)
		}
		s.Clock.Advance(signin.AccountEvery)
		if p := b.SignInPage("", stack.BobEmail, stack.BobPassword); p.Status != http.StatusOK || p.Continue() == "" {
			t.Errorf("after waiting: %d", p.Status)
		}
	})

	t.Run("return_to stays on this issuer", func(t *testing.T) {
		for _, rt := range []string{
			"https://evil.example/", "//evil.example/", "/\\evil.example", "/team/demo/../../evil",
			"/team/demo/%2e%2e/%2e%2e/evil", "/team/other/account", "javascript:alert(1)", "/team/demo\t/x",
			"https://" + strings.TrimPrefix(s.Front.URL, "http://") + "/team/demo/account", "/team/demox",
		} {
			b := s.Browser()
			p := b.SignInPage(rt, stack.AliceEmail, stack.AlicePassword)
			if got := p.Continue(); got != "/team/demo/account" {
				t.Errorf("return_to %q continued to %q", rt, got)
			}
		}
		b := s.Browser()
		if got := b.SignInPage("/team/demo/authorize?x=1", stack.AliceEmail, stack.AlicePassword).Continue(); got != "/team/demo/authorize?x=1" {
			t.Errorf("good return_to continued to %q", got)
		}
	})

	t.Run("forged form", func(t *testing.T) {
		b := s.Browser()
		b.MustGet(s.Issuer + "/sign-in")
		// Posted without an Origin header, as a program that is not a browser would.
		form := url.Values{"username": {stack.AliceEmail}, "password": {stack.AlicePassword}, "csrf_token": {"guess"}}
		req, _ := http.NewRequest(http.MethodPost, s.Issuer+"/sign-in", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if p := b.MustDo(req); p.Status != http.StatusForbidden || stack.SessionCookie(p.Header) != nil {
			t.Errorf("forged sign-in: %d", p.Status)
		}
		req, _ = http.NewRequest(http.MethodPost, s.Issuer+"/sign-in", strings.NewReader("username=a"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		if p := b.MustDo(req); p.Status != http.StatusForbidden {
			t.Errorf("cross-site POST: %d", p.Status)
		}
	})

	t.Run("sign out", func(t *testing.T) {
		b := s.Browser()
		b.SignInPage("", stack.AliceEmail, stack.AlicePassword)
		p, err := b.Press(b.MustGet(s.Issuer+"/sign-out"), "Sign out")
		if err != nil {
			t.Fatal(err)
		}
		if p.Status != http.StatusOK || !strings.Contains(p.Text(), "signed out") {
			t.Fatalf("sign out: %d %s", p.Status, p.Text())
		}
		if p := b.MustGet(s.Issuer + "/account"); p.Status != http.StatusSeeOther {
			t.Errorf("still signed in after sign-out: %d", p.Status)
		}
	})

	t.Run("stale sign-in asks again", func(t *testing.T) {
		b := s.Browser()
		b.SignInPage("", stack.AliceEmail, stack.AlicePassword)
		s.Clock.Advance(16 * time.Minute)
		p := b.MustGet(s.Issuer + "/sign-in?prompt=login&return_to=" + url.QueryEscape("/team/demo/account"))
		if p.Status != http.StatusOK || !strings.Contains(p.Text(), "sign in again") {
			t.Errorf("prompt=login page: %d", p.Status)
		}
	})
}

// Served over HTTPS, the sign-in's cookies are __Host- cookies: Secure, for the whole host and
// no other.
func TestSessionCookieOverHTTPS(t *testing.T) {
	t.Parallel()
	const public = "https://auth.example"
	s := stack.New(t, stack.Options{
		Project: func(p *config.Project) { p.Issuer = public + "/team/demo" },
		Server:  func(o *webhook.Options) { o.PublicURL = public },
	})
	srv := s.Server()
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, httptest.NewRequest(http.MethodGet, public+"/team/demo/sign-in", nil))
	csrf := w.Result().Cookies()[0]
	if !strings.HasPrefix(csrf.Name, "__Host-latchkey_signin_csrf_") || !csrf.Secure || csrf.Path != "/" {
		t.Fatalf("csrf cookie %+v", csrf)
	}
	form := url.Values{"username": {stack.AliceEmail}, "password": {stack.AlicePassword}, "csrf_token": {csrf.Value}}
	req := httptest.NewRequest(http.MethodPost, public+"/team/demo/sign-in", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(csrf)
	w = httptest.NewRecorder()
	srv.ServeHTTP(w, req)
	c := stack.MustSessionCookie(t, w.Header())
	if !strings.HasPrefix(c.Name, "__Host-latchkey_session_") || !c.Secure || c.Path != "/" || c.Domain != "" || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode {
		t.Errorf("session cookie %+v", c)
	}
	if len(c.Value) != 43 {
		t.Errorf("cookie value should be 32 random bytes in base64url, got %d chars", len(c.Value))
	}
}

// After sign-in, return_to only ever leads to this issuer's own pages.
func TestSignInReturnToStaysHome(t *testing.T) {
	t.Parallel()
	s := stack.New(t, stack.Options{})
	for _, rt := range []string{
		"https://evil.example/", "//evil.example/", "/\\evil.example", "\\\\evil.example",
		"javascript:alert(1)", "/team/demo/../../evil", "http://" + strings.TrimPrefix(s.Front.URL, "http://") + "@evil.example/",
		"/team/demo/%2F%2Fevil.example", "\x00/team/demo", "/team/demo/account\r\nLocation: https://evil.example/",
	} {
		t.Run(rt, func(t *testing.T) {
			b := s.Browser()
			p := b.SignInPage(rt, stack.AliceEmail, stack.AlicePassword)
			if p.Status >= 500 {
				t.Fatalf("%d", p.Status)
			}
			for _, target := range []string{p.Header.Get("Location"), p.Continue()} {
				if target == "" {
					continue
				}
				u, err := url.Parse(target)
				if err != nil || (u.Host != "" && "http://"+u.Host != s.Front.URL) || !strings.HasPrefix(u.Path, "/team/demo/") || strings.HasPrefix(target, "//") {
					t.Errorf("return_to %q led to %q", rt, target)
				}
			}
		})
	}
}

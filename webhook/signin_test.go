package webhook_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
	"latchkey.dev/latchkey/webhook"
	"latchkey.dev/latchkey/webhook/signin"
)

func TestSignIn(t *testing.T) {
	h := newHarness(t)

	for _, who := range []struct{ user, pass string }{{"alice@example.com", alicePass}, {"Bob@Example.com", bobPass}} {
		t.Run("success "+who.user, func(t *testing.T) {
			b := h.browser()
			p := b.signIn(h.base+"/account", who.user, who.pass)
			if p.status != http.StatusOK || p.continueURL() != "/team/demo/account" {
				t.Fatalf("after sign-in: %d continue=%q", p.status, p.continueURL())
			}
			c := sessionCookie(t, p.header)
			if !strings.HasPrefix(c.Name, "latchkey_session_") || c.Path != "/team/demo/" || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode {
				t.Errorf("session cookie %+v", c)
			}
			acct := b.get(p.continueURL())
			if acct.status != http.StatusOK || !strings.Contains(acct.body, strings.ToLower(who.user)) {
				t.Errorf("account page: %d %s", acct.status, acct.body)
			}
			// The session row holds only the hash of the cookie value.
			s, err := h.store.GetSession(context.Background(), secret.Hash(c.Value), h.clock.Now())
			if err != nil || !s.AuthTime.Equal(h.clock.Now()) {
				t.Errorf("session %+v %v", s, err)
			}
		})
	}

	t.Run("wrong password and unknown person look the same", func(t *testing.T) {
		b := h.browser()
		wrong := b.signIn("", "alice@example.com", "not it")
		unknown := b.signIn("", "mallory@example.com", "not it")
		if wrong.status != unknown.status || wrong.status != http.StatusOK {
			t.Fatalf("status %d vs %d", wrong.status, unknown.status)
		}
		a := strings.ReplaceAll(wrong.body, "alice@example.com", "X")
		u := strings.ReplaceAll(unknown.body, "mallory@example.com", "X")
		if a != u {
			t.Errorf("pages differ:\n%s\n---\n%s", a, u)
		}
		if !strings.Contains(a, "do not match") || sessionCookieOrNil(wrong.header) != nil {
			t.Error("a failed sign-in must say so and set no session")
		}
	})

	t.Run("rate limit per account", func(t *testing.T) {
		b := h.browser()
		var last page
		for i := 0; i <= signin.AccountBurst; i++ {
			last = b.signIn("", "bob@example.com", "guess")
		}
		if last.status != http.StatusTooManyRequests || !strings.Contains(last.body, "Too many") {
			t.Fatalf("after %d failures: %d", signin.AccountBurst+1, last.status)
		}
		// Even the right password waits now; an unknown account is limited the same way.
		if p := b.signIn("", "bob@example.com", bobPass); p.status != http.StatusTooManyRequests {
			t.Errorf("right password during the limit: %d", p.status)
		}
		for i := 0; i <= signin.AccountBurst; i++ {
			last = b.signIn("", "nobody@example.com", "guess")
		}
		if last.status != http.StatusTooManyRequests {
			t.Errorf("unknown account not limited: %d", last.status)
		}
		h.clock.Advance(signin.AccountEvery)
		if p := b.signIn("", "bob@example.com", bobPass); p.status != http.StatusOK || p.continueURL() == "" {
			t.Errorf("after waiting: %d", p.status)
		}
	})

	t.Run("return_to stays on this issuer", func(t *testing.T) {
		for _, rt := range []string{
			"https://evil.example/", "//evil.example/", "/\\evil.example", "/team/demo/../../evil",
			"/team/demo/%2e%2e/%2e%2e/evil", "/team/other/account", "javascript:alert(1)", "/team/demo\t/x",
			"https://" + strings.TrimPrefix(h.ts.URL, "http://") + "/team/demo/account", "/team/demox",
		} {
			b := h.browser()
			p := b.signIn(rt, "alice@example.com", alicePass)
			if got := p.continueURL(); got != "/team/demo/account" {
				t.Errorf("return_to %q continued to %q", rt, got)
			}
		}
		b := h.browser()
		if got := b.signIn("/team/demo/authorize?x=1", "alice@example.com", alicePass).continueURL(); got != "/team/demo/authorize?x=1" {
			t.Errorf("good return_to continued to %q", got)
		}
	})

	t.Run("forged form", func(t *testing.T) {
		b := h.browser()
		b.get(h.base + "/sign-in")
		p := b.post(h.base+"/sign-in", url.Values{"username": {"alice@example.com"}, "password": {alicePass}, "csrf_token": {"guess"}})
		if p.status != http.StatusForbidden || sessionCookieOrNil(p.header) != nil {
			t.Errorf("forged sign-in: %d", p.status)
		}
		req, _ := http.NewRequest(http.MethodPost, h.base+"/sign-in", strings.NewReader("username=a"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		if p := b.do(req); p.status != http.StatusForbidden {
			t.Errorf("cross-site POST: %d", p.status)
		}
	})

	t.Run("sign out", func(t *testing.T) {
		b := h.browser()
		b.signIn("", "alice@example.com", alicePass)
		out := b.get(h.base + "/sign-out")
		p := b.post(h.base+"/sign-out", out.hidden())
		if p.status != http.StatusOK || !strings.Contains(p.body, "signed out") {
			t.Fatalf("sign out: %d %s", p.status, p.body)
		}
		if p := b.get(h.base + "/account"); p.status != http.StatusSeeOther {
			t.Errorf("still signed in after sign-out: %d", p.status)
		}
	})

	t.Run("stale sign-in asks again", func(t *testing.T) {
		b := h.browser()
		b.signIn("", "alice@example.com", alicePass)
		h.clock.Advance(16 * time.Minute)
		p := b.get(h.base + "/sign-in?prompt=login&return_to=" + url.QueryEscape("/team/demo/account"))
		if p.status != http.StatusOK || !strings.Contains(p.body, "sign in again") {
			t.Errorf("prompt=login page: %d", p.status)
		}
	})
}

func TestSessionCookieOverHTTPS(t *testing.T) {
	st, err := sqlstore.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	holder := &config.Holder{}
	p := testProject("https://auth.example/team/demo")
	holder.Store(&config.Snapshot{Projects: map[string]*config.Project{projectKey: p}})
	srv, err := webhook.New(webhook.Options{Config: holder, Store: st, Keyring: secret.NewRandomKeyring(), PublicURL: "https://auth.example"})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "https://auth.example/team/demo/sign-in", nil))
	csrf := w.Result().Cookies()[0]
	if !strings.HasPrefix(csrf.Name, "__Host-latchkey_signin_csrf_") || !csrf.Secure || csrf.Path != "/" {
		t.Fatalf("csrf cookie %+v", csrf)
	}
	form := url.Values{"username": {"alice@example.com"}, "password": {alicePass}, "csrf_token": {csrf.Value}}
	req := httptest.NewRequest(http.MethodPost, "https://auth.example/team/demo/sign-in", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(csrf)
	w = httptest.NewRecorder()
	srv.ServeHTTP(w, req)
	c := sessionCookie(t, w.Header())
	if !strings.HasPrefix(c.Name, "__Host-latchkey_session_") || !c.Secure || c.Path != "/" || c.Domain != "" || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode {
		t.Errorf("session cookie %+v", c)
	}
	if len(c.Value) != 43 {
		t.Errorf("cookie value should be 32 random bytes in base64url, got %d chars", len(c.Value))
	}
}

func sessionCookieOrNil(h http.Header) *http.Cookie {
	for _, c := range (&http.Response{Header: h}).Cookies() {
		if strings.Contains(c.Name, "latchkey_session_") && c.Value != "" {
			return c
		}
	}
	return nil
}

func sessionCookie(t *testing.T, h http.Header) *http.Cookie {
	t.Helper()
	c := sessionCookieOrNil(h)
	if c == nil {
		t.Fatalf("no session cookie in %v", h["Set-Cookie"])
	}
	return c
}

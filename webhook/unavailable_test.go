package webhook_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/config"
)

// A password file that cannot be read fails closed: nobody of the file is active while it
// is unavailable, since nobody can tell who was removed (someone removed in the edit that broke
// it must not carry on). Nothing is ended either: once the Secret is fixed, the people still in
// the file have their sessions and agents back.
func TestPasswordsUnavailable(t *testing.T) {
	h := newHarness(t)
	alice := h.browser()
	tokens := h.codeFlow(alice, "web", webSecret, "openid", "alice@example.com", alicePass)
	// A form loaded before the Secret broke.
	stale := h.browser()
	form := stale.get(h.base + "/sign-in")
	file := h.project.SignIn.Passwords

	h.update(func(p *config.Project) {
		p.SignIn.Passwords = nil
		p.SignIn.PasswordsUnavailable = true
	})

	if pg := alice.get(h.base + "/account"); pg.status != http.StatusSeeOther || !strings.Contains(pg.location(), "/sign-in") {
		t.Errorf("alice's session works while the password file is unavailable: %d %s", pg.status, pg.location())
	}
	r := h.refresh("web", webSecret, tokens.str("refresh_token"))
	if r.status != http.StatusServiceUnavailable || r.str("error") != "temporarily_unavailable" {
		t.Fatalf("alice's refresh while the password file is unavailable: %d %s", r.status, r.raw)
	}
	if h.active(tokens.str("access_token")) {
		t.Error("alice's access token is active while the password file is unavailable")
	}
	if u := h.userinfo(tokens.str("access_token")); u.status != http.StatusUnauthorized {
		t.Errorf("userinfo while the password file is unavailable: %d %s", u.status, u.raw)
	}

	pg := h.browser().get(h.base + "/sign-in")
	if pg.status != http.StatusOK || !strings.Contains(pg.body, "Password sign-in is unavailable right now") ||
		strings.Contains(pg.body, `name="password"`) || strings.Contains(pg.body, "no way to sign in yet") {
		t.Errorf("sign-in page: %d %s", pg.status, pg.body)
	}
	post := stale.submitSignIn(form, "bob@example.com", bobPass)
	if post.status != http.StatusServiceUnavailable || !strings.Contains(post.body, "Password sign-in is unavailable right now") ||
		sessionCookieOrNil(post.header) != nil {
		t.Errorf("password form while unavailable: %d %s", post.status, post.body)
	}
	if strings.Count(post.body, "unavailable right now") != 1 {
		t.Errorf("the refusal says it more than once: %s", post.body)
	}

	// With another way in, the page offers it.
	h.update(func(p *config.Project) {
		p.SignIn.OIDC = &config.OIDCProvider{Issuer: "https://idp.example", ClientID: "latchkey", ClientSecret: "s", Label: "Sign in with Corp SSO"}
	})
	pg = h.browser().get(h.base + "/sign-in")
	if !strings.Contains(pg.body, "Sign in with Corp SSO") || !strings.Contains(pg.body, "sign in with your organisation instead") {
		t.Errorf("sign-in page with OIDC: %s", pg.body)
	}

	// Readable again with alice: nothing was ended, her session and her agent's grant work.
	h.update(func(p *config.Project) {
		p.SignIn.OIDC = nil
		p.SignIn.PasswordsUnavailable = false
		p.SignIn.Passwords = file
	})
	if pg := alice.get(h.base + "/account"); pg.status != http.StatusOK {
		t.Errorf("alice's session once the file is fixed: %d %s", pg.status, pg.location())
	}
	r = h.refresh("web", webSecret, tokens.str("refresh_token"))
	if r.status != http.StatusOK || !h.active(r.str("access_token")) {
		t.Fatalf("alice's refresh once the file is fixed: %d %s", r.status, r.raw)
	}

	// Readable again, without alice: now she is removed.
	h.update(func(p *config.Project) {
		p.SignIn.OIDC = nil
		p.SignIn.PasswordsUnavailable = false
		p.SignIn.Passwords = map[string]config.PasswordUser{"bob@example.com": testProject(h.base).SignIn.Passwords["bob@example.com"]}
	})
	if pg := alice.get(h.base + "/account"); pg.status == http.StatusOK {
		t.Error("alice's session still works once the file is readable without her")
	}
	if r := h.refresh("web", webSecret, r.str("refresh_token")); r.status != http.StatusBadRequest || r.str("error") != "invalid_grant" {
		t.Errorf("alice's refresh once the file is readable without her: %d %s", r.status, r.raw)
	}
}

// A missing OIDC client secret turns sign-in with the provider off; its people stay signed in
// and password sign-in goes on.
func TestOIDCUnavailable(t *testing.T) {
	h := newHarness(t)
	idp := newFakeIDP(t, h.clock.Now)
	h.update(func(p *config.Project) {
		p.SignIn.OIDC = &config.OIDCProvider{Issuer: idp.srv.URL, ClientID: "latchkey", ClientSecret: "idp-secret", Label: "Sign in with Corp SSO"}
	})
	carol := h.browser()
	pg := carol.get(h.base + "/sign-in/oidc")
	for range 3 {
		if pg.status != http.StatusFound {
			break
		}
		pg = carol.get(pg.location())
	}
	if pg.status != http.StatusSeeOther {
		t.Fatalf("upstream sign-in: %d %s", pg.status, pg.body)
	}
	// A sign-in started before the Secret broke.
	late := h.browser()
	atIDP := late.get(late.get(h.base + "/sign-in/oidc").location())

	h.update(func(p *config.Project) {
		o := *p.SignIn.OIDC
		o.ClientSecret, o.Unavailable = "", true
		p.SignIn.OIDC = &o
	})

	if pg := carol.get(h.base + "/account"); pg.status != http.StatusOK || !strings.Contains(pg.body, "carol@corp.example") {
		t.Errorf("carol's session ended while OIDC is unavailable: %d", pg.status)
	}
	pg = h.browser().get(h.base + "/sign-in")
	if pg.status != http.StatusOK || strings.Contains(pg.body, "/sign-in/oidc") ||
		!strings.Contains(pg.body, "Signing in with your organisation is unavailable right now") || !strings.Contains(pg.body, `name="password"`) {
		t.Errorf("sign-in page: %d %s", pg.status, pg.body)
	}
	start := h.browser().get(h.base + "/sign-in/oidc?return_to=" + url.QueryEscape("/team/demo/account"))
	if start.status != http.StatusServiceUnavailable || start.location() != "" || !strings.Contains(start.body, "unavailable right now") {
		t.Errorf("starting OIDC sign-in while unavailable: %d %q %s", start.status, start.location(), start.body)
	}
	cb := late.get(atIDP.location())
	if cb.status != http.StatusServiceUnavailable || sessionCookieOrNil(cb.header) != nil {
		t.Errorf("callback while unavailable: %d %s", cb.status, cb.body)
	}
	if p := h.browser().signIn("", "alice@example.com", alicePass); p.status != http.StatusOK || p.continueURL() == "" {
		t.Errorf("password sign-in while OIDC is unavailable: %d", p.status)
	}

	// Both off: the page says to come back later, not that the project has no way in.
	h.update(func(p *config.Project) {
		p.SignIn.Passwords = nil
		p.SignIn.PasswordsUnavailable = true
	})
	pg = h.browser().get(h.base + "/sign-in")
	if !strings.Contains(pg.body, "Please try again later") || strings.Contains(pg.body, "no way to sign in yet") {
		t.Errorf("sign-in page with everything off: %s", pg.body)
	}
}

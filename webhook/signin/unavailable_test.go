package signin_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/test/stack"
)

// A password file that cannot be read fails closed: nobody of the file is active while it
// is unavailable, since nobody can tell who was removed (someone removed in the edit that broke
// it must not carry on). Nothing is ended either: once the Secret is fixed, the people still in
// the file have their sessions and agents back.
func TestPasswordsUnavailable(t *testing.T) {
	t.Parallel()
	s := stack.New(t, stack.Options{})
	alice := s.Browser()
	tokens := s.CodeFlowAs(alice, stack.Web, stack.WebSecret, "openid", stack.AliceEmail, stack.AlicePassword)
	// A form loaded before the Secret broke.
	stale := s.Browser()
	form := stale.MustGet(s.Issuer + "/sign-in")
	file := s.Project.SignIn.Passwords

	s.Update(func(p *config.Project) {
		p.SignIn.Passwords = nil
		p.SignIn.PasswordsUnavailable = true
	})

	if pg := alice.MustGet(s.Issuer + "/account"); pg.Status != http.StatusSeeOther || !strings.Contains(pg.Header.Get("Location"), "/sign-in") {
		t.Errorf("alice's session works while the password file is unavailable: %d %s", pg.Status, pg.Header.Get("Location"))
	}
	r := s.RefreshAs(stack.Web, stack.WebSecret, tokens.Str("refresh_token"))
	if r.Status != http.StatusServiceUnavailable || r.Str("error") != "temporarily_unavailable" {
		t.Fatalf("alice's refresh while the password file is unavailable: %d %s", r.Status, r.Raw)
	}
	if s.Active(tokens.Str("access_token")) {
		t.Error("alice's access token is active while the password file is unavailable")
	}
	if u := s.Userinfo(tokens.Str("access_token")); u.Status != http.StatusUnauthorized {
		t.Errorf("userinfo while the password file is unavailable: %d %s", u.Status, u.Raw)
	}

	pg := s.Browser().MustGet(s.Issuer + "/sign-in")
	if pg.Status != http.StatusOK || !strings.Contains(pg.Text(), "Password sign-in is unavailable right now") ||
		pg.HasField("Password") || strings.Contains(pg.Text(), "no way to sign in yet") {
		t.Errorf("sign-in page: %d %s", pg.Status, pg.Text())
	}
	post := stale.MustFillSignIn(form, stack.BobEmail, stack.BobPassword)
	if post.Status != http.StatusServiceUnavailable || !strings.Contains(post.Text(), "Password sign-in is unavailable right now") ||
		stack.SessionCookie(post.Header) != nil {
		t.Errorf("password form while unavailable: %d %s", post.Status, post.Text())
	}
	if strings.Count(post.Body, "unavailable right now") != 1 {
		t.Errorf("the refusal says it more than once: %s", post.Body)
	}

	// With another way in, the page offers it.
	s.Update(func(p *config.Project) {
		p.SignIn.OIDC = &config.OIDCProvider{Issuer: "https://idp.example", ClientID: "latchkey", ClientSecret: "s", Label: "Sign in with Corp SSO"}
	})
	pg = s.Browser().MustGet(s.Issuer + "/sign-in")
	if !strings.Contains(pg.Text(), "Sign in with Corp SSO") || !strings.Contains(pg.Text(), "sign in with your organisation instead") {
		t.Errorf("sign-in page with OIDC: %s", pg.Text())
	}

	// Readable again with alice: nothing was ended, her session and her agent's grant work.
	s.Update(func(p *config.Project) {
		p.SignIn.OIDC = nil
		p.SignIn.PasswordsUnavailable = false
		p.SignIn.Passwords = file
	})
	if pg := alice.MustGet(s.Issuer + "/account"); pg.Status != http.StatusOK {
		t.Errorf("alice's session once the file is fixed: %d %s", pg.Status, pg.Header.Get("Location"))
	}
	r = s.RefreshAs(stack.Web, stack.WebSecret, tokens.Str("refresh_token"))
	if r.Status != http.StatusOK || !s.Active(r.Str("access_token")) {
		t.Fatalf("alice's refresh once the file is fixed: %d %s", r.Status, r.Raw)
	}

	// Readable again, without alice: now she is removed.
	s.Update(func(p *config.Project) {
		p.SignIn.OIDC = nil
		p.SignIn.PasswordsUnavailable = false
		p.SignIn.Passwords = map[string]config.PasswordUser{stack.BobEmail: stack.NewProject(s.Issuer).SignIn.Passwords[stack.BobEmail]}
	})
	if pg := alice.MustGet(s.Issuer + "/account"); pg.Status == http.StatusOK {
		t.Error("alice's session still works once the file is readable without her")
	}
	if r := s.RefreshAs(stack.Web, stack.WebSecret, r.Str("refresh_token")); r.Status != http.StatusBadRequest || r.Str("error") != "invalid_grant" {
		t.Errorf("alice's refresh once the file is readable without her: %d %s", r.Status, r.Raw)
	}
}

// A missing OIDC client secret turns sign-in with the provider off; its people stay signed in
// and password sign-in goes on.
func TestOIDCUnavailable(t *testing.T) {
	t.Parallel()
	s := stack.New(t, stack.Options{})
	s.UseIDP(0)
	carol := s.Browser()
	pg := carol.MustGet(s.Issuer + "/sign-in/oidc")
	for range 3 {
		if pg.Status != http.StatusFound {
			break
		}
		pg = carol.MustGet(pg.Location())
	}
	if pg.Status != http.StatusSeeOther {
		t.Fatalf("upstream sign-in: %d %s", pg.Status, pg.Text())
	}
	// A sign-in started before the Secret broke.
	late := s.Browser()
	atIDP := late.MustGet(late.MustGet(s.Issuer + "/sign-in/oidc").Location())

	s.Update(func(p *config.Project) {
		o := *p.SignIn.OIDC
		o.ClientSecret, o.Unavailable = "", true
		p.SignIn.OIDC = &o
	})

	if pg := carol.MustGet(s.Issuer + "/account"); pg.Status != http.StatusOK || !strings.Contains(pg.Text(), "carol@corp.example") {
		t.Errorf("carol's session ended while OIDC is unavailable: %d", pg.Status)
	}
	pg = s.Browser().MustGet(s.Issuer + "/sign-in")
	if pg.Status != http.StatusOK || strings.Contains(pg.Body, "/sign-in/oidc") ||
		!strings.Contains(pg.Text(), "Signing in with your organisation is unavailable right now") || !pg.HasField("Password") {
		t.Errorf("sign-in page: %d %s", pg.Status, pg.Text())
	}
	start := s.Browser().MustGet(s.Issuer + "/sign-in/oidc?return_to=" + url.QueryEscape("/team/demo/account"))
	if start.Status != http.StatusServiceUnavailable || start.Header.Get("Location") != "" || !strings.Contains(start.Text(), "unavailable right now") {
		t.Errorf("starting OIDC sign-in while unavailable: %d %q %s", start.Status, start.Header.Get("Location"), start.Text())
	}
	cb := late.MustGet(atIDP.Location())
	if cb.Status != http.StatusServiceUnavailable || stack.SessionCookie(cb.Header) != nil {
		t.Errorf("callback while unavailable: %d %s", cb.Status, cb.Text())
	}
	if p := s.Browser().SignInPage("", stack.AliceEmail, stack.AlicePassword); p.Status != http.StatusOK || p.Continue() == "" {
		t.Errorf("password sign-in while OIDC is unavailable: %d", p.Status)
	}

	// Both off: the page says to come back later, not that the project has no way in.
	s.Update(func(p *config.Project) {
		p.SignIn.Passwords = nil
		p.SignIn.PasswordsUnavailable = true
	})
	pg = s.Browser().MustGet(s.Issuer + "/sign-in")
	if !strings.Contains(pg.Text(), "Please try again later") || strings.Contains(pg.Text(), "no way to sign in yet") {
		t.Errorf("sign-in page with everything off: %s", pg.Text())
	}
}

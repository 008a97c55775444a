package stack

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/callback"
	"latchkey.dev/latchkey/webhook/signin"
)

// MustFollow is Follow failing the test on a transport error or a redirect loop.
func (b *Browser) MustFollow(p Page) Page {
	b.t().Helper()
	p, err := b.Follow(p)
	if err != nil {
		b.t().Fatal(err)
	}
	return p
}

// MustSignIn signs the browser in through the sign-in page, failing the test if it cannot.
func (b *Browser) MustSignIn(email, password string) {
	b.t().Helper()
	if err := b.SignIn(email, password); err != nil {
		b.t().Fatal(err)
	}
}

// MustPostFrom submits a form as a page at origin would; "" means the target's own origin.
func (b *Browser) MustPostFrom(u string, form url.Values, origin string) Page {
	b.t().Helper()
	req, err := http.NewRequest(http.MethodPost, b.abs(u), strings.NewReader(form.Encode()))
	if err != nil {
		b.t().Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin == "" {
		origin = req.URL.Scheme + "://" + req.URL.Host
	}
	req.Header.Set("Origin", origin)
	return b.MustDo(req)
}

// SignInWithPasskey leaves the browser signed in as the person with email (who has signed in
// before) the way a passkey sign-in does: a new session, made now, whose method is
// signin.MethodHardwareKey. The ceremony itself is tested in webhook/signin and test/e2e.
func (b *Browser) SignInWithPasskey(email string) {
	b.t().Helper()
	b.SignInWith(email, signin.MethodHardwareKey)
}

// SignInWith leaves the browser signed in as the person with email (who has signed in before)
// with a new session, made now, whose sign-in method is method (signin.MethodOIDC, …).
func (b *Browser) SignInWith(email, method string) {
	b.t().Helper()
	s := b.S
	person := s.Person(email)
	v := secret.New("")
	now := s.Clock.Now()
	if err := s.Admin.CreateSession(context.Background(), store.Session{
		IDHash: secret.Hash(v), Project: ProjectKey, Subject: person.ID, AuthTime: now, CreatedAt: now,
		ExpiresAt: now.Add(s.Project.Lifetimes.Session), Method: method,
	}); err != nil {
		s.T.Fatal(err)
	}
	u, _ := url.Parse(s.Issuer + "/")
	b.Jar.SetCookies(u, []*http.Cookie{{
		Name: signin.CookieName(s.Server().Env(), s.Project, "session"), Value: v, Path: u.Path,
	}})
}

// Account loads the account page.
func (b *Browser) Account() Page {
	b.t().Helper()
	return b.MustGet(b.Issuer + "/account")
}

// PressOnAccount loads the account page, presses the button that says label (the first one)
// and returns the answer without following it; "Connect GitHub" answers with a redirect to
// GitHub that carries the binding cookie.
func (b *Browser) PressOnAccount(label string) Page {
	b.t().Helper()
	acct := b.Account()
	f, ok := acct.FindForm(label)
	if !ok {
		b.t().Fatalf("no %q button on the account page: %s", label, acct.Text())
	}
	p, err := b.Submit(f)
	if err != nil {
		b.t().Fatal(err)
	}
	return p
}

// BindingCookie is the binding cookie the browser holds for the callback, or nil.
func (b *Browser) BindingCookie() *http.Cookie {
	u, _ := url.Parse(b.S.CallbackURL)
	for _, c := range b.Jar.Cookies(u) {
		if c.Name == callback.CookieName(b.S.Server().Env()) {
			return c
		}
	}
	return nil
}

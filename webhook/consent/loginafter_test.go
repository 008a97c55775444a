package consent_test

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/test/stack"
)

// A client that asks for prompt=login (or max_age=0) gets a code only after a sign-in that
// happened for that request. The browser plays the attacker: it is signed in already, from a
// while ago, and comes back to /authorize with a login_after that claims the sign-in happened
// (one it wrote itself, one the server sealed for another request, or the server's own after
// it has expired). Each time the person is sent to sign in again; no consent page, no code.
func TestLoginAfterCannotCancelPromptLogin(t *testing.T) {
	t.Parallel()
	s := stack.New(t, stack.Options{})
	b := s.Browser()
	b.SignInPage("", stack.AliceEmail, stack.AlicePassword)
	signedInAt := s.Clock.Now()
	// Consent is remembered, so a request that skips the sign-in would be answered with a code
	// at once.
	if loc, _ := b.MustAuthorizeAt(s.AuthorizeURL(stack.Web, stack.WebRedirect, "read", stack.NewPKCE(), nil), "", ""); loc.Query().Get("code") == "" {
		t.Fatalf("no code for the first request: %s", loc)
	}
	s.Clock.Advance(5 * time.Minute)

	mustSignIn := func(t *testing.T, u string) {
		t.Helper()
		p := b.MustGet(u)
		loc := p.Header.Get("Location")
		if p.Status != http.StatusSeeOther || !strings.Contains(loc, "/sign-in") || !strings.Contains(loc, "prompt=login") {
			t.Fatalf("a stale sign-in passed: %d %q %s", p.Status, loc, p.Text())
		}
	}
	// sealed returns the login_after the server hands out when it sends this request to sign in.
	sealed := func(t *testing.T, u string) string {
		t.Helper()
		p := b.MustGet(u)
		loc, err := url.Parse(p.Header.Get("Location"))
		if err != nil {
			t.Fatal(err)
		}
		back, err := url.Parse(loc.Query().Get("return_to"))
		if err != nil {
			t.Fatal(err)
		}
		v := back.Query().Get("login_after")
		if v == "" {
			t.Fatalf("no login_after in the sign-in's return_to %q", back)
		}
		return v
	}

	for _, force := range []url.Values{{"prompt": {"login"}}, {"max_age": {"0"}}} {
		t.Run(force.Encode(), func(t *testing.T) {
			with := func(extra url.Values) url.Values {
				out := url.Values{}
				for k, v := range force {
					out[k] = v
				}
				for k, v := range extra {
					out[k] = v
				}
				return out
			}
			for name, v := range map[string]string{
				"the time of the old sign-in": strconv.FormatInt(signedInAt.Unix(), 10),
				"a time long ago":             "1",
				"garbage":                     "not-a-time",
			} {
				t.Run(name, func(t *testing.T) {
					mustSignIn(t, s.AuthorizeURL(stack.Web, stack.WebRedirect, "read", stack.NewPKCE(), with(url.Values{"login_after": {v}})))
				})
			}
			t.Run("sealed for another request", func(t *testing.T) {
				other := sealed(t, s.AuthorizeURL(stack.Web, stack.WebRedirect, "read", stack.NewPKCE(), with(nil)))
				mustSignIn(t, s.AuthorizeURL(stack.Web, stack.WebRedirect, "read", stack.NewPKCE(), with(url.Values{"login_after": {other}})))
			})
			t.Run("sealed for this request, then signed in, then expired", func(t *testing.T) {
				pk := stack.NewPKCE()
				u := s.AuthorizeURL(stack.Web, stack.WebRedirect, "read", pk, with(nil))
				back := s.AuthorizeURL(stack.Web, stack.WebRedirect, "read", pk, with(url.Values{"login_after": {sealed(t, u)}}))
				s.Clock.Advance(time.Second)
				b.MustFillSignIn(b.MustGet(s.Issuer+"/sign-in?prompt=login"), stack.AliceEmail, stack.AlicePassword)
				// The genuine return from that sign-in gets its code.
				if loc, _ := b.MustAuthorizeAt(back, "", ""); loc.Query().Get("code") == "" {
					t.Fatalf("no code after signing in for the request: %s", loc)
				}
				// The same address much later, with that sign-in grown old: sign in again.
				s.Clock.Advance(time.Hour)
				mustSignIn(t, back)
			})
		})
	}
}

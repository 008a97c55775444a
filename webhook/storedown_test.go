package webhook_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"latchkey.dev/latchkey/test/stack"
)

// When the store cannot say who is signed in, pages answer 503 with a plain explanation instead
// of a sign-in form that could not work either, and never redirect.
func TestPagesDuringStoreOutage(t *testing.T) {
	t.Parallel()
	s := stack.New(t, stack.Options{})
	alice := s.Browser()
	alice.SignInPage("", stack.AliceEmail, stack.AlicePassword)
	if pg := alice.MustGet(s.Issuer + "/account"); pg.Status != http.StatusOK {
		t.Fatalf("account page before the outage: %d", pg.Status)
	}

	// A consent form loaded before the outage and answered during it.
	consent := alice.MustGet(s.AuthorizeURL(stack.Web, stack.WebRedirect, "read", stack.NewPKCE(), url.Values{"prompt": {"consent"}}))
	allow, ok := consent.FindForm("Allow")
	if !strings.Contains(consent.Text(), "Where access goes") || !ok {
		t.Fatalf("consent page before the outage: %d %s", consent.Status, consent.Text())
	}

	s.Store().Close()
	pg, err := alice.Submit(allow)
	if err != nil {
		t.Fatal(err)
	}
	if pg.Status != http.StatusServiceUnavailable || pg.Header.Get("Location") != "" {
		t.Errorf("consent answered during the outage: %d Location %q, want 503 and no redirect", pg.Status, pg.Header.Get("Location"))
	}
	for name, u := range map[string]string{
		"account":   s.Issuer + "/account",
		"authorize": s.AuthorizeURL(stack.Web, stack.WebRedirect, "openid", stack.NewPKCE(), url.Values{"state": {"s"}}),
	} {
		pg := alice.MustGet(u)
		if pg.Status != http.StatusServiceUnavailable || pg.Header.Get("Location") != "" {
			t.Errorf("%s during the outage: %d Location %q, want 503 and no redirect", name, pg.Status, pg.Header.Get("Location"))
		}
		if !strings.Contains(pg.Text(), "Try again in a moment") {
			t.Errorf("%s during the outage does not say to try again: %s", name, pg.Text())
		}
	}
}

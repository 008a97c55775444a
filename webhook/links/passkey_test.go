package links_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/test/stack"
)

// The link's own person, signed in a minute ago with a password, in a project that requires
// a phishing-resistant sign-in: refused with the reason and a passkey sign-in that comes back
// to the link; nothing offered, nothing started. A password typed into a look-alike page must
// not be enough to connect an account.
func TestPasswordSessionRefusedWhenPasskeyRequired(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	h.Project.SignIn.RequirePhishingResistant = true
	subject := h.AccessToken(stack.AliceEmail, stack.Agent)
	link := h.LinkPath(h.AgentExchange(subject).Str("connect_uri"))

	b := h.Browser()
	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	p := b.MustGet(link)
	if p.Status != http.StatusForbidden || !strings.Contains(p.Text(), "Sign in with a passkey to continue") {
		t.Fatalf("password session at the link: %d %s", p.Status, p.Text())
	}
	if strings.Contains(p.Text(), "Connect GitHub") {
		t.Fatalf("the refusal offers to connect: %s", p.Text())
	}
	i := strings.Index(p.Body, "Sign in with a passkey</a>")
	j := strings.LastIndex(p.Body[:max(i, 0)], `href="`)
	if i < 0 || j < 0 {
		t.Fatalf("no passkey sign-in on the page: %s", p.Body)
	}
	to, _, _ := strings.Cut(p.Body[j+len(`href="`):], `"`)
	to = strings.ReplaceAll(to, "&amp;", "&")
	u, err := url.Parse(to)
	if err != nil || u.Path != "/team/demo/sign-in" || u.Query().Get("return_to") != link || u.Query().Get("passkey") != "1" {
		t.Fatalf("passkey sign-in link %q", to)
	}
	if n := h.CountRows("callback_states") + h.CountRows("connections"); n != 0 {
		t.Fatalf("%d callback states or connections after the refusal", n)
	}
}

package signin_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
)

// Signing in with the company's OpenID provider: success, and a provider that refuses Latchkey
// (a wrong client secret) as a failure.
func TestAuditTrailOfUpstreamSignIn(t *testing.T) {
	t.Parallel()
	s := stack.New(t, stack.Options{})
	idp := stack.NewIDP(t, s.Clock.Now)
	sink := s.NewAuditSink()
	provider := func(secret string) {
		s.Update(func(p *config.Project) {
			p.SignIn.OIDC = &config.OIDCProvider{Issuer: idp.URL, ClientID: stack.IDPClientID, ClientSecret: secret, Label: "Corp SSO"}
		})
	}
	through := func(b *stack.Browser) stack.Page {
		p := b.MustGet(s.Issuer + "/sign-in/oidc?return_to=" + url.QueryEscape("/team/demo/account"))
		for range 5 {
			if (p.Status != http.StatusFound && p.Status != http.StatusSeeOther) || strings.HasPrefix(p.Header.Get("Location"), "/team/demo/account") {
				break
			}
			p = b.MustGet(p.Location())
		}
		return p
	}
	provider("wrong-secret")
	if p := through(s.Browser()); p.Status != http.StatusBadGateway {
		t.Fatalf("with a wrong client secret: %d", p.Status)
	}
	provider(stack.IDPClientSecret)
	if p := through(s.Browser()); p.Status != http.StatusSeeOther {
		t.Fatalf("sign-in: %d %s", p.Status, p.Text())
	}
	recs := s.TrailTo(sink, events.SignInFailed, events.SignInSucceeded)
	stack.ExpectAudit(t, recs[events.SignInFailed], "anonymous", "", "", store.OutcomeFailed, "upstream_error")
	carol := recs[events.SignInSucceeded].Actor
	stack.ExpectAudit(t, recs[events.SignInSucceeded], carol, carol, "", store.OutcomeSuccess, "")
	if recs[events.SignInSucceeded].Details["method"] != "oidc" || recs[events.SignInFailed].Details["method"] != "oidc" {
		t.Errorf("method: %v / %v", recs[events.SignInSucceeded].Details, recs[events.SignInFailed].Details)
	}
}

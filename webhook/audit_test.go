package webhook_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/events/audittest"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
)

// The person's side of the audit trail: signing in and out, consent, the tokens issued for
// each grant, refresh-token reuse, revocation at /revoke and on the account page.
func TestAuditTrailOfAPerson(t *testing.T) {
	t.Parallel()
	s := stack.New(t, stack.Options{})
	sink := s.NewAuditSink()
	b := s.Browser()

	// A wrong password, then an address nobody has: refused, and neither password nor the
	// unknown name is written anywhere.
	const wrong, typo = "not-alices-password-7f3a", "correct-horse-in-the-name-field"
	if p := b.SignInPage("", stack.AliceEmail, wrong); !strings.Contains(p.Body, "do not match") {
		t.Fatalf("wrong password: %d", p.Status)
	}
	b.SignInPage("", typo+"@example.com", wrong)
	s.TrailTo(sink, events.SignInFailed)
	failed := s.AuditOf(events.SignInFailed)
	if len(failed) != 2 {
		t.Fatalf("%d signin.failed records", len(failed))
	}
	stack.ExpectAudit(t, failed[1], "anonymous", "", "", store.OutcomeRefused, "bad_password")
	stack.ExpectAudit(t, failed[0], "anonymous", "", "", store.OutcomeRefused, "unknown_person")
	if failed[1].Details["username"] != "alice@example.com" || failed[0].Details["username_digest"] == "" {
		t.Errorf("details %v / %v", failed[1].Details, failed[0].Details)
	}
	for _, w := range []string{wrong, typo} {
		if audittest.Contains(t, s.Store(), sink, stack.ProjectKey, w) {
			t.Errorf("%q was written to the audit log or sent to a sink", w)
		}
	}

	// Sign in, deny an app, then allow one and use its tokens.
	b.SignInPage("", stack.AliceEmail, stack.AlicePassword)
	pk := stack.NewPKCE()
	p := b.MustGet(s.AuthorizeURL(stack.Web, stack.WebRedirect, "read", pk, url.Values{"prompt": {"consent"}}))
	if p.Status != http.StatusOK || !strings.Contains(p.Body, "Where access goes") {
		t.Fatalf("consent page: %d %s", p.Status, p.Body)
	}
	if d, _ := b.Press(p, "Deny"); d.Status != http.StatusSeeOther || !strings.Contains(d.Header.Get("Location"), "error=access_denied") {
		t.Fatalf("deny: %d %s", d.Status, d.Header.Get("Location"))
	}
	first := s.CodeFlowAs(b, stack.Web, stack.WebSecret, "read", stack.AliceEmail, stack.AlicePassword)
	s.Clock.Advance(time.Minute)
	second := s.RefreshAs(stack.Web, stack.WebSecret, first.Str("refresh_token"))
	if second.Status != http.StatusOK {
		t.Fatalf("refresh: %s", second.Raw)
	}
	cc := s.Token(url.Values{"grant_type": {"client_credentials"}, "scope": {"read"}}, stack.Service, stack.ServiceSecret)
	if cc.Status != http.StatusOK {
		t.Fatalf("client_credentials: %s", cc.Raw)
	}
	if r := s.MustPost("/revoke", url.Values{"token": {second.Str("access_token")}}, stack.Web, stack.WebSecret); r.Status != http.StatusOK {
		t.Fatalf("revoke: %s", r.Raw)
	}
	recs := s.TrailTo(sink, events.SignInSucceeded, events.ConsentDenied, events.ConsentGranted, events.TokenIssued, events.TokenRevoked)
	alice := recs[events.SignInSucceeded].Actor
	stack.ExpectAudit(t, recs[events.SignInSucceeded], alice, alice, "", store.OutcomeSuccess, "")
	stack.ExpectAudit(t, recs[events.ConsentDenied], alice, "web", "web", store.OutcomeRefused, "denied_by_person")
	stack.ExpectAudit(t, recs[events.ConsentGranted], alice, "web", "web", store.OutcomeSuccess, "")
	stack.ExpectAudit(t, recs[events.TokenRevoked], "client:web", alice, "web", store.OutcomeSuccess, "")

	// One token.issued per grant type, naming the grant.
	grants := map[string]store.AuditRecord{}
	for _, r := range s.AuditOf(events.TokenIssued) {
		grants[r.Details["grant_type"]] = r
	}
	stack.ExpectAudit(t, grants["authorization_code"], "client:web", alice, "web", store.OutcomeSuccess, "")
	stack.ExpectAudit(t, grants["refresh_token"], "client:web", alice, "web", store.OutcomeSuccess, "")
	stack.ExpectAudit(t, grants["client_credentials"], "client:svc", "client:svc", "svc", store.OutcomeSuccess, "")
	if len(grants) != 3 {
		t.Errorf("token.issued grant types: %v", grants)
	}

	// The first refresh token, presented after the grace window: reuse.
	s.Clock.Advance(config.DefaultLifetimes().RefreshGrace + time.Second)
	if r := s.RefreshAs(stack.Web, stack.WebSecret, first.Str("refresh_token")); r.Status != http.StatusBadRequest {
		t.Fatalf("reuse: %d", r.Status)
	}
	// A code presented twice.
	pk2 := stack.NewPKCE()
	loc, _ := b.MustAuthorizeAt(s.AuthorizeURL(stack.Web, stack.WebRedirect, "read", pk2, nil), stack.AliceEmail, stack.AlicePassword)
	redeem := url.Values{"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")},
		"redirect_uri": {"https://app.example/cb"}, "code_verifier": {pk2.Verifier}}
	s.Token(redeem, stack.Web, stack.WebSecret)
	if r := s.Token(redeem, stack.Web, stack.WebSecret); r.Status != http.StatusBadRequest {
		t.Fatalf("replayed code: %d", r.Status)
	}
	recs = s.TrailTo(sink, events.RefreshReuse, "code.replay")
	stack.ExpectAudit(t, recs[events.RefreshReuse], "client:web", alice, "web", store.OutcomeRefused, "")
	stack.ExpectAudit(t, recs["code.replay"], "client:web", alice, "web", store.OutcomeRefused, "")

	// The account page: Alice revokes the app; then she signs out.
	acct := b.MustGet(s.Issuer + "/account")
	csrf := acct.Hidden().Get("csrf_token")
	if csrf == "" {
		t.Fatalf("no form on the account page: %s", acct.Body)
	}
	if r := b.MustPost(s.Issuer+"/account/apps/revoke", url.Values{"csrf_token": {csrf}, "client_id": {"web"}}); r.Status != http.StatusSeeOther {
		t.Fatalf("revoke app: %d %s", r.Status, r.Body)
	}
	if r, _ := b.Press(b.MustGet(s.Issuer+"/sign-out"), "Sign out"); r.Status != http.StatusOK {
		t.Fatalf("sign out: %d", r.Status)
	}
	recs = s.TrailTo(sink, "grant.revoked", events.SignedOut)
	stack.ExpectAudit(t, recs["grant.revoked"], alice, "client:web", "web", store.OutcomeSuccess, "")
	stack.ExpectAudit(t, recs[events.SignedOut], alice, alice, "", store.OutcomeSuccess, "")
}

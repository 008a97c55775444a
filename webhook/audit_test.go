package webhook_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/events/audittest"
	"latchkey.dev/latchkey/internal/store"
)

// withAuditSink adds an event sink to the harness's project and returns it.
func (h *harness) withAuditSink() *audittest.Sink {
	h.t.Helper()
	sink := audittest.NewSink(h.t, h.clock.Now)
	h.update(func(p *config.Project) { p.EventSinks = append(p.EventSinks, sink.Config()) })
	return sink
}

// trail checks each action in the audit log and at the sink (internal/events/audittest).
func (h *harness) trail(sink *audittest.Sink, actions ...string) map[string]store.AuditRecord {
	h.t.Helper()
	return audittest.Trail(h.t, h.store, h.holder, h.clock.Now, sink, projectKey, actions...)
}

func expect(t *testing.T, r store.AuditRecord, actor, subject, client, outcome, reason string) {
	t.Helper()
	if r.Actor != actor || r.Target != subject || r.ClientID != client || r.Outcome != outcome || r.Reason != reason {
		t.Errorf("%s: actor %q subject %q client %q outcome %q reason %q; want %q %q %q %q %q", r.Action,
			r.Actor, r.Target, r.ClientID, r.Outcome, r.Reason, actor, subject, client, outcome, reason)
	}
}

// The person's side of the audit trail: signing in and out, consent, the tokens issued for
// each grant, refresh-token reuse, revocation at /revoke and on the account page.
func TestAuditTrailOfAPerson(t *testing.T) {
	h := newHarness(t)
	sink := h.withAuditSink()
	b := h.browser()

	// A wrong password, then an address nobody has: refused, and neither password nor the
	// unknown name is written anywhere.
	const wrong, typo = "not-alices-password-7f3a", "correct-horse-in-the-name-field"
	if p := b.signIn("", "alice@example.com", wrong); !strings.Contains(p.body, "do not match") {
		t.Fatalf("wrong password: %d", p.status)
	}
	b.signIn("", typo+"@example.com", wrong)
	h.trail(sink, events.SignInFailed)
	failed := h.audit(events.SignInFailed)
	if len(failed) != 2 {
		t.Fatalf("%d signin.failed records", len(failed))
	}
	expect(t, failed[1], "anonymous", "", "", store.OutcomeRefused, "bad_password")
	expect(t, failed[0], "anonymous", "", "", store.OutcomeRefused, "unknown_person")
	if failed[1].Details["username"] != "alice@example.com" || failed[0].Details["username_digest"] == "" {
		t.Errorf("details %v / %v", failed[1].Details, failed[0].Details)
	}
	for _, s := range []string{wrong, typo} {
		if audittest.Contains(t, h.store, sink, projectKey, s) {
			t.Errorf("%q was written to the audit log or sent to a sink", s)
		}
	}

	// Sign in, deny an app, then allow one and use its tokens.
	b.signIn("", "alice@example.com", alicePass)
	pk := newPKCE()
	p := b.get(authorizeURL(h, "web", "https://app.example/cb", "read", pk, url.Values{"prompt": {"consent"}}))
	if p.status != http.StatusOK || !strings.Contains(p.body, "Where access goes") {
		t.Fatalf("consent page: %d %s", p.status, p.body)
	}
	deny := p.hidden()
	deny.Set("decision", "deny")
	if d := b.post(h.base+"/authorize", deny); d.status != http.StatusSeeOther || !strings.Contains(d.location(), "error=access_denied") {
		t.Fatalf("deny: %d %s", d.status, d.location())
	}
	first := h.codeFlow(b, "web", webSecret, "read", "alice@example.com", alicePass)
	h.clock.Advance(time.Minute)
	second := h.refresh("web", webSecret, first.str("refresh_token"))
	if second.status != http.StatusOK {
		t.Fatalf("refresh: %s", second.raw)
	}
	cc := h.token(url.Values{"grant_type": {"client_credentials"}, "scope": {"read"}}, "svc", svcSecret)
	if cc.status != http.StatusOK {
		t.Fatalf("client_credentials: %s", cc.raw)
	}
	if r := h.postForm("/revoke", url.Values{"token": {second.str("access_token")}}, "web", webSecret); r.status != http.StatusOK {
		t.Fatalf("revoke: %s", r.raw)
	}
	recs := h.trail(sink, events.SignInSucceeded, events.ConsentDenied, events.ConsentGranted, events.TokenIssued, events.TokenRevoked)
	alice := recs[events.SignInSucceeded].Actor
	expect(t, recs[events.SignInSucceeded], alice, alice, "", store.OutcomeSuccess, "")
	expect(t, recs[events.ConsentDenied], alice, "web", "web", store.OutcomeRefused, "denied_by_person")
	expect(t, recs[events.ConsentGranted], alice, "web", "web", store.OutcomeSuccess, "")
	expect(t, recs[events.TokenRevoked], "client:web", alice, "web", store.OutcomeSuccess, "")

	// One token.issued per grant type, naming the grant.
	grants := map[string]store.AuditRecord{}
	for _, r := range h.audit(events.TokenIssued) {
		grants[r.Details["grant_type"]] = r
	}
	expect(t, grants["authorization_code"], "client:web", alice, "web", store.OutcomeSuccess, "")
	expect(t, grants["refresh_token"], "client:web", alice, "web", store.OutcomeSuccess, "")
	expect(t, grants["client_credentials"], "client:svc", "client:svc", "svc", store.OutcomeSuccess, "")
	if len(grants) != 3 {
		t.Errorf("token.issued grant types: %v", grants)
	}

	// The first refresh token, presented after the grace window: reuse.
	h.clock.Advance(config.DefaultLifetimes().RefreshGrace + time.Second)
	if r := h.refresh("web", webSecret, first.str("refresh_token")); r.status != http.StatusBadRequest {
		t.Fatalf("reuse: %d", r.status)
	}
	// A code presented twice.
	pk2 := newPKCE()
	loc, _ := b.authorize(authorizeURL(h, "web", "https://app.example/cb", "read", pk2, nil), "alice@example.com", alicePass)
	redeem := url.Values{"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")},
		"redirect_uri": {"https://app.example/cb"}, "code_verifier": {pk2.verifier}}
	h.token(redeem, "web", webSecret)
	if r := h.token(redeem, "web", webSecret); r.status != http.StatusBadRequest {
		t.Fatalf("replayed code: %d", r.status)
	}
	recs = h.trail(sink, events.RefreshReuse, "code.replay")
	expect(t, recs[events.RefreshReuse], "client:web", alice, "web", store.OutcomeRefused, "")
	expect(t, recs["code.replay"], "client:web", alice, "web", store.OutcomeRefused, "")

	// The account page: Alice revokes the app; then she signs out.
	acct := b.get(h.base + "/account")
	csrf := acct.hidden().Get("csrf_token")
	if csrf == "" {
		t.Fatalf("no form on the account page: %s", acct.body)
	}
	if r := b.post(h.base+"/account/apps/revoke", url.Values{"csrf_token": {csrf}, "client_id": {"web"}}); r.status != http.StatusSeeOther {
		t.Fatalf("revoke app: %d %s", r.status, r.body)
	}
	out := b.get(h.base + "/sign-out")
	if r := b.post(h.base+"/sign-out", url.Values{"csrf_token": {out.hidden().Get("csrf_token")}}); r.status != http.StatusOK {
		t.Fatalf("sign out: %d", r.status)
	}
	recs = h.trail(sink, "grant.revoked", events.SignedOut)
	expect(t, recs["grant.revoked"], alice, "client:web", "web", store.OutcomeSuccess, "")
	expect(t, recs[events.SignedOut], alice, alice, "", store.OutcomeSuccess, "")
}

// The client's side: dynamic registration, its updates and deletion, and the redirect policy
// refusing it at consent and at refresh.
func TestAuditTrailOfClients(t *testing.T) {
	h := newHarness(t)
	sink := h.withAuditSink()
	r := h.jsonReq(http.MethodPost, h.base+"/register", "", `{"client_name":"Helper","redirect_uris":["https://helper.example/cb"],"token_endpoint_auth_method":"none"}`)
	if r.status != http.StatusCreated {
		t.Fatalf("register: %s", r.raw)
	}
	id, tok, uri := r.str("client_id"), r.str("registration_access_token"), r.str("registration_client_uri")
	if u := h.jsonReq(http.MethodPut, uri, tok, `{"client_id":"`+id+`","client_name":"Helper 2","redirect_uris":["https://helper.example/cb"],"token_endpoint_auth_method":"none"}`); u.status != http.StatusOK {
		t.Fatalf("update: %s", u.raw)
	}

	// Alice has a refresh token for "web"; then only recognised apps may connect.
	b := h.browser()
	first := h.codeFlow(b, "web", webSecret, "read", "alice@example.com", alicePass)
	h.onlyRecognised(true)
	if p := b.get(authorizeURL(h, id, "https://helper.example/cb", "read", newPKCE(), nil)); p.status != http.StatusForbidden {
		t.Fatalf("consent under the policy: %d", p.status)
	}
	if r := h.refresh("web", webSecret, first.str("refresh_token")); r.status != http.StatusBadRequest {
		t.Fatalf("refresh under the policy: %d", r.status)
	}
	req, _ := http.NewRequest(http.MethodDelete, uri, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	if d := h.send(req); d.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", d.status, d.raw)
	}
	recs := h.trail(sink, "client.registered", "client.updated", "client.deleted", events.ConsentRefusedByPolicy, "refresh.refused")
	for _, a := range []string{"client.registered", "client.updated", "client.deleted"} {
		expect(t, recs[a], "client:"+id, id, id, store.OutcomeSuccess, "")
	}
	alice := h.audit(events.SignInSucceeded)[0].Actor
	expect(t, recs[events.ConsentRefusedByPolicy], alice, id, id, store.OutcomeRefused, "only_recognised_apps")
	expect(t, recs["refresh.refused"], "client:web", alice, "web", store.OutcomeRefused, "only_recognised_apps")
}

// Signing in with the company's OpenID provider: success, and a provider that refuses Latchkey
// (a wrong client secret) as a failure.
func TestAuditTrailOfUpstreamSignIn(t *testing.T) {
	h := newHarness(t)
	idp := newFakeIDP(t, h.clock.Now)
	sink := h.withAuditSink()
	provider := func(secret string) {
		h.update(func(p *config.Project) {
			p.SignIn.OIDC = &config.OIDCProvider{Issuer: idp.srv.URL, ClientID: "latchkey", ClientSecret: secret, Label: "Corp SSO"}
		})
	}
	through := func(b *browser) page {
		p := b.get(h.base + "/sign-in/oidc?return_to=" + url.QueryEscape("/team/demo/account"))
		for range 5 {
			if (p.status != http.StatusFound && p.status != http.StatusSeeOther) || strings.HasPrefix(p.location(), "/team/demo/account") {
				break
			}
			p = b.get(p.location())
		}
		return p
	}
	provider("wrong-secret")
	if p := through(h.browser()); p.status != http.StatusBadGateway {
		t.Fatalf("with a wrong client secret: %d", p.status)
	}
	provider("idp-secret")
	if p := through(h.browser()); p.status != http.StatusSeeOther {
		t.Fatalf("sign-in: %d %s", p.status, p.body)
	}
	recs := h.trail(sink, events.SignInFailed, events.SignInSucceeded)
	expect(t, recs[events.SignInFailed], "anonymous", "", "", store.OutcomeFailed, "upstream_error")
	carol := recs[events.SignInSucceeded].Actor
	expect(t, recs[events.SignInSucceeded], carol, carol, "", store.OutcomeSuccess, "")
	if recs[events.SignInSucceeded].Details["method"] != "oidc" || recs[events.SignInFailed].Details["method"] != "oidc" {
		t.Errorf("method: %v / %v", recs[events.SignInSucceeded].Details, recs[events.SignInFailed].Details)
	}
}

// Failed client authentication at the token endpoint: each way of failing is recorded with its
// reason, the claimed client id and the method, while every one of them answers the same
// invalid_client (no oracle for which client ids exist). A malformed request is not recorded.
func TestAuditTrailOfClientAuthentication(t *testing.T) {
	h := newHarness(t)
	sink := h.withAuditSink()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	// Someone else's key, in the name of "web", which authenticates with a secret.
	forged, err := jwt.Signed(signer).Claims(jwt.Claims{Issuer: "web", Subject: "web", Audience: jwt.Audience{h.base},
		Expiry: jwt.NewNumericDate(h.clock.Now().Add(time.Minute)), ID: "j1"}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	form := func(kv ...string) url.Values {
		f := url.Values{"grant_type": {"client_credentials"}}
		for i := 0; i < len(kv); i += 2 {
			f.Set(kv[i], kv[i+1])
		}
		return f
	}
	attempts := []struct {
		name                    string
		form                    url.Values
		user, pass              string
		reason, method, claimed string
	}{
		{"a wrong secret", form(), "web", "not-the-secret", "wrong_secret", "client_secret_basic", "web"},
		{"an unknown client", form(), "nobody", "x", "unknown_client", "client_secret_basic", "nobody"},
		{"a wrong secret in the form", form("client_id", "web", "client_secret", "nope"), "", "", "wrong_secret", "client_secret_post", "web"},
		{"no credentials from a confidential client", form("client_id", "web"), "", "", "credentials_required", "none", "web"},
		{"an assertion signed by another key", form("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
			"client_assertion", forged), "", "", "method_not_allowed", "client_assertion", "web"},
	}
	var answer string
	for _, a := range attempts {
		r := h.token(a.form, a.user, a.pass)
		if r.status != http.StatusUnauthorized || r.str("error") != "invalid_client" {
			t.Fatalf("%s: %d %s, want 401 invalid_client", a.name, r.status, r.raw)
		}
		if a.method != "client_assertion" && a.method != "none" {
			if answer == "" {
				answer = r.str("error_description")
			} else if d := r.str("error_description"); d != answer {
				t.Errorf("%s is answered %q, another failure %q: the answer tells them apart", a.name, d, answer)
			}
		}
	}
	// Two methods at once is a malformed request, not a failed authentication.
	if r := h.token(form("client_secret", "x"), "web", webSecret); r.status != http.StatusBadRequest {
		t.Fatalf("two methods: %d %s", r.status, r.raw)
	}

	h.trail(sink, events.ClientAuthFailed) // reaches the sink, like every record
	recs, err := h.store.ListAudit(t.Context(), projectKey, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		if r.Action == events.ClientAuthFailed {
			if r.Outcome != store.OutcomeRefused || r.Details["endpoint"] != "/"+projectKey+"/token" {
				t.Errorf("record %+v", r)
			}
			got = append(got, r.Reason+" "+r.Details["method"]+" "+r.Target+" "+r.Actor)
		}
	}
	var want []string
	for _, a := range attempts {
		want = append(want, a.reason+" "+a.method+" "+a.claimed+" client:"+a.claimed)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("client.authentication_failed records:\n got %q\nwant %q", got, want)
	}
}

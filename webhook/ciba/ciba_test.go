package ciba_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/authzdetails"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/ciba"
)

// The agent of these tests: a declared, confidential OAuthClient allowed the ciba grant.
const (
	opsBot       = "lkc_ops-bot"
	opsBotName   = "Ops Bot"
	opsBotSecret = "lk_cs_ops-bot-secret-for-ciba-tests-0123456789abcdef"
	otherBot     = "lkc_other-bot"
	otherSecret  = "lk_cs_other-bot-secret-for-ciba-tests-0123456789abcd"
)

// newStack is the shared installation with two CIBA agents declared in its Project.
func newStack(t *testing.T, o stack.Options) *stack.Stack { return newStackTB(t, o) }

func newStackB(b *testing.B) *stack.Stack { return newStackTB(b, stack.Options{}) }

func newStackTB(t testing.TB, o stack.Options) *stack.Stack {
	t.Helper()
	if o.DSN == "" {
		o.DSN = "sqlite:" + t.TempDir() + "/latchkey.db"
	}
	s := stack.New(t, o)
	s.Project.Clients[opsBot] = &config.Client{
		ID: opsBot, SecretHash: secret.Hash(opsBotSecret), Name: opsBotName,
		GrantTypes: []string{ciba.GrantType, "refresh_token"}, Scopes: []string{"openid", "email", "deploy"},
		TokenEndpointAuthMethod: "client_secret_basic",
	}
	s.Project.Clients[otherBot] = &config.Client{
		ID: otherBot, SecretHash: secret.Hash(otherSecret), Name: "Other Bot",
		GrantTypes: []string{ciba.GrantType}, TokenEndpointAuthMethod: "client_secret_basic",
	}
	s.PersonID(stack.AliceEmail)
	s.PersonID(stack.MalloryEmail)
	return s
}

// ask is Ops Bot asking the person login_hint names.
func ask(t *testing.T, s *stack.Stack, form url.Values) stack.Answer {
	t.Helper()
	if !form.Has("scope") {
		form.Set("scope", "openid deploy")
	}
	return s.MustPost(ciba.Path, form, opsBot, opsBotSecret)
}

func mustAsk(t *testing.T, s *stack.Stack, form url.Values) string {
	t.Helper()
	a := ask(t, s, form)
	if a.Status != http.StatusOK || a.Str("auth_req_id") == "" {
		t.Fatalf("backchannel authentication: %d %s", a.Status, a.Raw)
	}
	if a.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("Cache-Control = %q", a.Header.Get("Cache-Control"))
	}
	return a.Str("auth_req_id")
}

func poll(t *testing.T, s *stack.Stack, id, client, secret string) stack.Answer {
	t.Helper()
	return s.MustPost("/token", url.Values{"grant_type": {ciba.GrantType}, "auth_req_id": {id}}, client, secret)
}

func wantError(t *testing.T, a stack.Answer, status int, code string) {
	t.Helper()
	if a.Status != status || a.Str("error") != code {
		t.Fatalf("answer %d %s, want %d %s", a.Status, a.Raw, status, code)
	}
}

// signedIn is a browser signed in as email, showing the approvals page.
func signedIn(t *testing.T, s *stack.Stack, email, password string) (*stack.Browser, stack.Page) {
	t.Helper()
	b := s.Browser()
	if err := b.SignIn(email, password); err != nil {
		t.Fatal(err)
	}
	return b, approvals(t, b)
}

func approvals(t *testing.T, b *stack.Browser) stack.Page {
	t.Helper()
	pg, err := b.Get(b.Issuer + ciba.PagePath)
	if err != nil {
		t.Fatal(err)
	}
	if pg.Status != http.StatusOK {
		t.Fatalf("approvals page: %d %s", pg.Status, pg.Location())
	}
	return pg
}

func press(t *testing.T, b *stack.Browser, pg stack.Page, label string) stack.Page {
	t.Helper()
	res, err := b.Press(pg, label)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestApprovedRequestRedeemsOnce tells the story: Ops Bot asks alice, polls (pending, then too
// fast: slow_down), alice approves on her page, the poll returns her token, and the same
// auth_req_id is refused afterwards.
func TestApprovedRequestRedeemsOnce(t *testing.T) {
	s := newStack(t, stack.Options{})
	id := mustAsk(t, s, url.Values{"login_hint": {stack.AliceEmail}, "binding_message": {"Deploy v2 to production"}})
	wantError(t, poll(t, s, id, opsBot, opsBotSecret), 400, "authorization_pending")
	// Sooner than the interval: slow_down, and the interval grows.
	wantError(t, poll(t, s, id, opsBot, opsBotSecret), 400, "slow_down")
	s.Clock.Advance(ciba.Interval + ciba.SlowDownStep)
	wantError(t, poll(t, s, id, opsBot, opsBotSecret), 400, "authorization_pending")

	b, pg := signedIn(t, s, stack.AliceEmail, stack.AlicePassword)
	for _, want := range []string{opsBotName, "Deploy v2 to production", "Where access goes"} {
		if !strings.Contains(pg.Body, want) {
			t.Fatalf("approvals page lacks %q", want)
		}
	}
	res := press(t, b, pg, "Approve")
	if res.Status != http.StatusSeeOther || !strings.Contains(res.Location(), "done=approved") {
		t.Fatalf("approve: %d %s", res.Status, res.Location())
	}

	s.Clock.Advance(time.Minute)
	tok := poll(t, s, id, opsBot, opsBotSecret)
	// No refresh token, though Ops Bot has the refresh_token grant: none may outlive the approval.
	if tok.Status != http.StatusOK || tok.Str("access_token") == "" || tok.Str("refresh_token") != "" {
		t.Fatalf("token: %d %s", tok.Status, tok.Raw)
	}
	if tok.Str("scope") != "openid deploy" {
		t.Fatalf("scope = %q", tok.Str("scope"))
	}
	stored, err := s.Admin.GetToken(context.Background(), secret.Hash(tok.Str("access_token")))
	if err != nil || stored.Subject != s.PersonID(stack.AliceEmail) || stored.ClientID != opsBot {
		t.Fatalf("stored token: %+v %v", stored, err)
	}
	// Replay: used once.
	wantError(t, poll(t, s, id, opsBot, opsBotSecret), 400, "invalid_grant")
}

// TestDeniedRequestEndsWithAccessDenied: the person's denial reaches the agent once.
func TestDeniedRequestEndsWithAccessDenied(t *testing.T) {
	s := newStack(t, stack.Options{})
	id := mustAsk(t, s, url.Values{"login_hint": {s.PersonID(stack.AliceEmail)}})
	b, pg := signedIn(t, s, stack.AliceEmail, stack.AlicePassword)
	press(t, b, pg, "Deny")
	wantError(t, poll(t, s, id, opsBot, opsBotSecret), 400, "access_denied")
	wantError(t, poll(t, s, id, opsBot, opsBotSecret), 400, "invalid_grant")
}

// TestAttackOtherPersonDecides: mallory's session posting alice's request id changes nothing;
// her page never shows alice's request.
func TestAttackOtherPersonDecides(t *testing.T) {
	s := newStack(t, stack.Options{})
	id := mustAsk(t, s, url.Values{"login_hint": {stack.AliceEmail}, "binding_message": {"alice only"}})
	alice, alicePage := signedIn(t, s, stack.AliceEmail, stack.AlicePassword)
	action, fields, ok := alicePage.Form("Approve")
	if !ok {
		t.Fatal("no Approve button on alice's page")
	}
	mallory, malloryPage := signedIn(t, s, stack.MalloryEmail, stack.MalloryPassword)
	if strings.Contains(malloryPage.Body, "alice only") || strings.Contains(malloryPage.Body, fields.Get("id")) {
		t.Fatal("mallory's page shows alice's request")
	}
	// Mallory's own form token with alice's request id.
	account, err := mallory.Get(mallory.Issuer + "/account")
	if err != nil || account.Hidden().Get("csrf_token") == "" {
		t.Fatalf("mallory's account page: %d %v", account.Status, err)
	}
	forged := url.Values{"csrf_token": {account.Hidden().Get("csrf_token")}, "id": {fields.Get("id")}, "decision": {"approve"}}
	res, err := mallory.Post(action, forged)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Location(), "done=gone") {
		t.Fatalf("mallory's approval: %d %s", res.Status, res.Location())
	}
	wantError(t, poll(t, s, id, opsBot, opsBotSecret), 400, "authorization_pending")
	if pg := approvals(t, alice); !strings.Contains(pg.Body, "alice only") {
		t.Fatal("alice's request is no longer waiting for her")
	}
	// Alice's form replayed from mallory's browser fails the anti-forgery check.
	res, err = mallory.Post(action, fields)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != http.StatusForbidden {
		t.Fatalf("alice's form from mallory's browser: %d", res.Status)
	}
	wantError(t, poll(t, s, id, opsBot, opsBotSecret), 400, "slow_down")
}

// TestAttackOtherClientPolls: another client polling Ops Bot's auth_req_id gets invalid_grant,
// and its poll neither spends nor slows the request.
func TestAttackOtherClientPolls(t *testing.T) {
	s := newStack(t, stack.Options{})
	id := mustAsk(t, s, url.Values{"login_hint": {stack.AliceEmail}})
	b, pg := signedIn(t, s, stack.AliceEmail, stack.AlicePassword)
	press(t, b, pg, "Approve")
	wantError(t, poll(t, s, id, otherBot, otherSecret), 400, "invalid_grant")
	if tok := poll(t, s, id, opsBot, opsBotSecret); tok.Status != http.StatusOK {
		t.Fatalf("owner's poll after another client's: %d %s", tok.Status, tok.Raw)
	}
}

// TestApprovalAfterExpiry: an expired request can be neither approved nor redeemed.
func TestApprovalAfterExpiry(t *testing.T) {
	s := newStack(t, stack.Options{})
	id := mustAsk(t, s, url.Values{"login_hint": {stack.AliceEmail}, "requested_expiry": {"60"}})
	b, pg := signedIn(t, s, stack.AliceEmail, stack.AlicePassword)
	s.Clock.Advance(61 * time.Second)
	res := press(t, b, pg, "Approve")
	if !strings.Contains(res.Location(), "done=gone") {
		t.Fatalf("approval after expiry: %d %s", res.Status, res.Location())
	}
	wantError(t, poll(t, s, id, opsBot, opsBotSecret), 400, "expired_token")
	wantError(t, poll(t, s, id, opsBot, opsBotSecret), 400, "invalid_grant")

	// Approved in time but redeemed too late: expired_token all the same.
	id = mustAsk(t, s, url.Values{"login_hint": {stack.AliceEmail}, "requested_expiry": {"60"}})
	press(t, b, approvals(t, b), "Approve")
	s.Clock.Advance(61 * time.Second)
	wantError(t, poll(t, s, id, opsBot, opsBotSecret), 400, "expired_token")
}

// TestBindingMessageShownEscaped: markup in a binding message is shown as text.
func TestBindingMessageShownEscaped(t *testing.T) {
	s := newStack(t, stack.Options{})
	mustAsk(t, s, url.Values{"login_hint": {stack.AliceEmail}, "binding_message": {`<img src=x onerror=alert(1)><b>urgent</b>`}})
	_, pg := signedIn(t, s, stack.AliceEmail, stack.AlicePassword)
	if strings.Contains(pg.Body, "<img src=x") || strings.Contains(pg.Body, "<b>urgent") {
		t.Fatal("binding message rendered as markup")
	}
	if !strings.Contains(pg.Body, "&lt;img src=x onerror=alert(1)&gt;&lt;b&gt;urgent&lt;/b&gt;") {
		t.Fatal("binding message not shown escaped")
	}
	// Control characters and overlong messages are refused.
	wantError(t, ask(t, s, url.Values{"login_hint": {stack.AliceEmail}, "binding_message": {"line\nbreak"}}), 400, "invalid_binding_message")
	wantError(t, ask(t, s, url.Values{"login_hint": {stack.AliceEmail}, "binding_message": {strings.Repeat("x", ciba.MaxBindingMessage+1)}}), 400, "invalid_binding_message")
}

// TestFloodingRateLimited: a client asks at most ClientBurst times at once.
func TestFloodingRateLimited(t *testing.T) {
	s := newStack(t, stack.Options{})
	for i := range ciba.ClientBurst {
		if a := ask(t, s, url.Values{"login_hint": {stack.AliceEmail}}); a.Status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, a.Status, a.Raw)
		}
	}
	a := ask(t, s, url.Values{"login_hint": {stack.AliceEmail}})
	wantError(t, a, http.StatusTooManyRequests, "temporarily_unavailable")
	if a.Header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After")
	}
	// Another client's allowance is its own.
	if a := s.MustPost(ciba.Path, url.Values{"login_hint": {stack.AliceEmail}, "scope": {"openid"}}, otherBot, otherSecret); a.Status != http.StatusOK {
		t.Fatalf("other client: %d %s", a.Status, a.Raw)
	}
}

// TestBlockedAgentRefused: after alice blocks Ops Bot its waiting request is denied, its new
// ones are refused at once with access_denied and no event, and mallory is still asked.
func TestBlockedAgentRefused(t *testing.T) {
	s := newStack(t, stack.Options{})
	id := mustAsk(t, s, url.Values{"login_hint": {stack.AliceEmail}})
	b, pg := signedIn(t, s, stack.AliceEmail, stack.AlicePassword)
	if res := press(t, b, pg, "Deny and block this agent"); !strings.Contains(res.Location(), "done=blocked") {
		t.Fatalf("block: %d %s", res.Status, res.Location())
	}
	wantError(t, poll(t, s, id, opsBot, opsBotSecret), 400, "access_denied")
	before := countActions(t, s, "approval.requested")
	wantError(t, ask(t, s, url.Values{"login_hint": {stack.AliceEmail}}), http.StatusForbidden, "access_denied")
	if n := countActions(t, s, "approval.requested"); n != before {
		t.Fatalf("a blocked request was announced: %d events, had %d", n, before)
	}
	mustAsk(t, s, url.Values{"login_hint": {stack.MalloryEmail}})
	// Unblocked, Ops Bot may ask alice again.
	pg = approvals(t, b)
	if !strings.Contains(pg.Body, opsBotName) {
		t.Fatal("blocked agent not listed")
	}
	press(t, b, pg, "Unblock")
	mustAsk(t, s, url.Values{"login_hint": {stack.AliceEmail}})
}

// TestRequestAnnouncedToSinks: each new request is an audit record, which every event sink
// receives, naming the person and the page where they answer.
func TestRequestAnnouncedToSinks(t *testing.T) {
	s := newStack(t, stack.Options{})
	mustAsk(t, s, url.Values{"login_hint": {stack.AliceEmail}, "binding_message": {"Deploy?"}})
	recs, err := s.Admin.ListAudit(context.Background(), stack.ProjectKey, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Action != "approval.requested" {
			continue
		}
		if r.Target != s.PersonID(stack.AliceEmail) || r.Details["url"] != s.Issuer+ciba.PagePath ||
			r.Details["agent"] != opsBotName || r.Details["binding_message"] != "Deploy?" {
			t.Fatalf("record: %+v", r)
		}
		return
	}
	t.Fatal("no approval.requested record")
}

func countActions(t *testing.T, s *stack.Stack, action string) int {
	t.Helper()
	recs, err := s.Admin.ListAudit(context.Background(), stack.ProjectKey, 1000)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if r.Action == action {
			n++
		}
	}
	return n
}

// TestOnlyDeclaredConfidentialClients: a client cannot register itself for the grant, and a
// self-registered client, or a declared one without the grant, is refused with
// unauthorized_client.
func TestOnlyDeclaredConfidentialClients(t *testing.T) {
	s := newStack(t, stack.Options{})
	regClient := registerClient(t, s)
	a := s.MustPost(ciba.Path, url.Values{"login_hint": {stack.AliceEmail}, "scope": {"openid"}}, regClient.id, regClient.secret)
	wantError(t, a, 400, "unauthorized_client")
	a = s.MustPost(ciba.Path, url.Values{"login_hint": {stack.AliceEmail}, "scope": {"openid"}}, stack.Agent, stack.AgentSecret)
	wantError(t, a, 400, "unauthorized_client")
	a = s.MustPost("/token", url.Values{"grant_type": {ciba.GrantType}, "auth_req_id": {"lk_ar_x"}}, regClient.id, regClient.secret)
	wantError(t, a, 400, "unauthorized_client")
}

// TestRequestErrors: every malformed request gets its CIBA Core §13 error.
func TestRequestErrors(t *testing.T) {
	s := newStack(t, stack.Options{})
	cases := []struct {
		name string
		form url.Values
		code string
	}{
		{"no hint", url.Values{}, "invalid_request"},
		{"id_token_hint", url.Values{"id_token_hint": {"x"}}, "invalid_request"},
		{"login_hint_token", url.Values{"login_hint_token": {"x"}}, "invalid_request"},
		{"user_code", url.Values{"login_hint": {stack.AliceEmail}, "user_code": {"1234"}}, "invalid_request"},
		{"unknown person", url.Values{"login_hint": {"nobody@example.com"}}, "unknown_user_id"},
		{"no openid", url.Values{"login_hint": {stack.AliceEmail}, "scope": {"deploy"}}, "invalid_scope"},
		{"scope beyond the client's", url.Values{"login_hint": {stack.AliceEmail}, "scope": {"openid admin"}}, "invalid_scope"},
		{"expiry zero", url.Values{"login_hint": {stack.AliceEmail}, "requested_expiry": {"0"}}, "invalid_request"},
		{"expiry too long", url.Values{"login_hint": {stack.AliceEmail}, "requested_expiry": {"86401"}}, "invalid_request"},
		{"details not an array", url.Values{"login_hint": {stack.AliceEmail}, "authorization_details": {`{"type":"x"}`}}, "invalid_authorization_details"},
		{"detail without type", url.Values{"login_hint": {stack.AliceEmail}, "authorization_details": {`[{"amount":1}]`}}, "invalid_authorization_details"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, ask(t, s, tc.form), 400, tc.code)
		})
	}
	wantError(t, poll(t, s, "", opsBot, opsBotSecret), 400, "invalid_request")
	wantError(t, poll(t, s, "lk_ar_unknown", opsBot, opsBotSecret), 400, "invalid_grant")
}

// TestAuthorizationDetailsShownInWords: the details an agent asks for, of a type the Project
// declares, are on the page in words, and the approved ones are carried by the token; a type
// the Project does not declare is refused.
func TestAuthorizationDetailsShownInWords(t *testing.T) {
	s := newStack(t, stack.Options{})
	types, err := authzdetails.NewTypes([]authzdetails.Type{
		{Name: "deployment", Label: "Deployment", Actions: []string{"deploy"}, Identifier: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Project.AuthorizationDetails = types
	const detail = `[{"type":"deployment","actions":["deploy"],"identifier":"api-v2"}]`
	wantError(t, ask(t, s, url.Values{"login_hint": {stack.AliceEmail}, "authorization_details": {`[{"type":"payment"}]`}}), 400, "invalid_authorization_details")
	id := mustAsk(t, s, url.Values{"login_hint": {stack.AliceEmail}, "authorization_details": {detail}})
	b, pg := signedIn(t, s, stack.AliceEmail, stack.AlicePassword)
	if !strings.Contains(pg.Body, "Deployment — may: deploy; identifier: api-v2") {
		t.Fatalf("details not shown in words:\n%s", pg.Body)
	}
	press(t, b, pg, "Approve")
	tok := poll(t, s, id, opsBot, opsBotSecret)
	if tok.Status != http.StatusOK || !strings.Contains(string(tok.Raw), `"authorization_details":`+detail) {
		t.Fatalf("token: %d %s", tok.Status, tok.Raw)
	}
	stored, err := s.Admin.GetToken(context.Background(), secret.Hash(tok.Str("access_token")))
	if err != nil || stored.AuthorizationDetails != detail {
		t.Fatalf("stored token details: %q %v", stored.AuthorizationDetails, err)
	}
}

// TestApprovalNeedsRecentSignIn: a sign-in older than the Project's recent window sends the
// person to sign in again, and their stale form decides nothing.
func TestApprovalNeedsRecentSignIn(t *testing.T) {
	s := newStack(t, stack.Options{})
	id := mustAsk(t, s, url.Values{"login_hint": {stack.AliceEmail}, "requested_expiry": {"86400"}})
	b, pg := signedIn(t, s, stack.AliceEmail, stack.AlicePassword)
	s.Clock.Advance(s.Project.Lifetimes.RecentSignIn + time.Minute)
	res := press(t, b, pg, "Approve")
	if res.Status != http.StatusSeeOther || !regexp.MustCompile(`/sign-in\?.*prompt=login`).MatchString(res.Location()) {
		t.Fatalf("stale approval: %d %s", res.Status, res.Location())
	}
	res, err := b.Get(b.Issuer + ciba.PagePath)
	if err != nil || res.Status != http.StatusSeeOther {
		t.Fatalf("stale page: %d %v", res.Status, err)
	}
	wantError(t, poll(t, s, id, opsBot, opsBotSecret), 400, "authorization_pending")
}

// TestMetadataAdvertisesCIBA: discovery names the endpoint, the modes and the grant.
func TestMetadataAdvertisesCIBA(t *testing.T) {
	s := newStack(t, stack.Options{})
	req, _ := http.NewRequest(http.MethodGet, s.Issuer+"/.well-known/openid-configuration", nil)
	a, err := stack.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if a.Str("backchannel_authentication_endpoint") != s.Issuer+ciba.Path {
		t.Fatalf("endpoint = %v", a.Body["backchannel_authentication_endpoint"])
	}
	if v, ok := a.Body["backchannel_user_code_parameter_supported"].(bool); !ok || v {
		t.Fatalf("user code = %v", a.Body["backchannel_user_code_parameter_supported"])
	}
	modes, _ := a.Body["backchannel_token_delivery_modes_supported"].([]any)
	grants, _ := a.Body["grant_types_supported"].([]any)
	if len(modes) != 2 || modes[0] != "poll" || modes[1] != "ping" || !contains(grants, ciba.GrantType) {
		t.Fatalf("modes %v, grants %v", modes, grants)
	}
}

func contains(l []any, s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}

type registered struct{ id, secret string }

// registerClient registers a client at run time (RFC 7591) that claims the ciba grant.
func registerClient(t *testing.T, s *stack.Stack) registered {
	t.Helper()
	do := func(grants string) stack.Answer {
		body := `{"client_name":"Self Bot","redirect_uris":["http://127.0.0.1/cb"],"grant_types":[` + grants + `],"token_endpoint_auth_method":"client_secret_basic"}`
		req, _ := http.NewRequest(http.MethodPost, s.Issuer+"/register", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		a, err := stack.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	wantError(t, do(`"authorization_code","urn:openid:params:grant-type:ciba"`), 400, "invalid_client_metadata")
	a := do(`"authorization_code"`)
	if a.Str("client_id") == "" || a.Str("client_secret") == "" {
		t.Fatalf("registration: %d %s", a.Status, a.Raw)
	}
	return registered{a.Str("client_id"), a.Str("client_secret")}
}

// TestApprovalEndsWithAccess: an approval redeemed after the person left the password file
// yields nothing.
func TestApprovalEndsWithAccess(t *testing.T) {
	s := newStack(t, stack.Options{})
	id := mustAsk(t, s, url.Values{"login_hint": {stack.AliceEmail}})
	b, pg := signedIn(t, s, stack.AliceEmail, stack.AlicePassword)
	press(t, b, pg, "Approve")
	// The password file is replaced, never written in place (test/stack's admit).
	ps := map[string]config.PasswordUser{}
	for k, v := range s.Project.SignIn.Passwords {
		if k != stack.AliceEmail {
			ps[k] = v
		}
	}
	s.Project.SignIn.Passwords = ps
	wantError(t, poll(t, s, id, opsBot, opsBotSecret), 400, "invalid_grant")
	wantError(t, ask(t, s, url.Values{"login_hint": {stack.AliceEmail}}), 400, "unknown_user_id")
}

// TestApprovalBoundsTokenLifetime: a request approved for two minutes yields an access token
// that ends with the approval: expires_in at most what is left of it, no refresh token, and
// inactive at introspection once the approval's time is up (though the Project's access token
// lifetime is longer).
func TestApprovalBoundsTokenLifetime(t *testing.T) {
	s := newStack(t, stack.Options{})
	if s.Project.Lifetimes.AccessToken <= 2*time.Minute {
		t.Fatalf("the Project's access token lifetime %s does not exceed the approval", s.Project.Lifetimes.AccessToken)
	}
	id := mustAsk(t, s, url.Values{"login_hint": {stack.AliceEmail}, "requested_expiry": {"120"}})
	b, pg := signedIn(t, s, stack.AliceEmail, stack.AlicePassword)
	press(t, b, pg, "Approve")
	s.Clock.Advance(30 * time.Second)
	tok := poll(t, s, id, opsBot, opsBotSecret)
	if tok.Status != http.StatusOK || tok.Str("refresh_token") != "" {
		t.Fatalf("token: %d %s", tok.Status, tok.Raw)
	}
	if in, _ := tok.Body["expires_in"].(float64); in <= 0 || in > 90 {
		t.Fatalf("expires_in = %v, want at most the 90 s left of the approval", tok.Body["expires_in"])
	}
	active := func() bool {
		intro := s.MustPost("/introspect", url.Values{"token": {tok.Str("access_token")}}, opsBot, opsBotSecret)
		if intro.Status != http.StatusOK {
			t.Fatalf("introspection: %d %s", intro.Status, intro.Raw)
		}
		v, _ := intro.Body["active"].(bool)
		return v
	}
	s.Clock.Advance(85 * time.Second)
	if !active() {
		t.Fatal("token inactive before the approval ended")
	}
	s.Clock.Advance(6 * time.Second)
	if active() {
		t.Fatal("token still active after the approval ended")
	}
}

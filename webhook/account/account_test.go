package account_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/account"
	"latchkey.dev/latchkey/webhook/ciba"
)

// connect signs email in and connects their GitHub account login through the account page, in
// one browser, returning the browser.
func connect(t *testing.T, h *stack.Stack, email, password, login string) *stack.Browser {
	t.Helper()
	b := h.Browser()
	b.MustSignIn(email, password)
	res := b.PressOnAccount("Connect GitHub")
	if res.Status != http.StatusSeeOther {
		t.Fatalf("Connect answered %d: %s", res.Status, res.Text())
	}
	b.SignInGitHub(login)
	h.GitHub.Approve(login, stack.GitHubClientID)
	done := b.MustFollow(b.MustGet(res.Location()))
	if done.Status != http.StatusOK || !strings.Contains(done.Text(), "Connected") {
		t.Fatalf("callback answered %d: %s", done.Status, done.Text())
	}
	return b
}

func TestAccountNeedsSignIn(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	b := h.Browser()
	res := b.Account()
	if res.Status != http.StatusSeeOther || !strings.Contains(res.Location(), "/team/demo/sign-in?return_to=%2Fteam%2Fdemo%2Faccount") {
		t.Errorf("answered %d, Location %q", res.Status, res.Location())
	}
	// Actions too: nothing happens without a session.
	for _, path := range []string{"/account/connect", "/account/disconnect", "/account/agents/remove", "/account/apps/revoke"} {
		res := b.MustPost(h.Issuer+path, url.Values{"connector": {h.Connector.Key}})
		if res.Status != http.StatusSeeOther || !strings.Contains(res.Location(), "/sign-in") {
			t.Errorf("%s answered %d, Location %q", path, res.Status, res.Location())
		}
	}
	if h.CountRows("callback_states") != 0 {
		t.Error("a connection was started without a sign-in")
	}
}

func TestAccountListsConnectionsByTheirNameAtTheService(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	b := h.Browser()
	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)

	empty := b.Account()
	if empty.Status != http.StatusOK || !strings.Contains(empty.Text(), "You have not connected any service yet") {
		t.Fatalf("account page: %d %s", empty.Status, empty.Text())
	}
	if _, _, ok := empty.Form("Connect GitHub"); !ok {
		t.Error("no Connect GitHub button before connecting")
	}
	// Connect answers with a redirect to GitHub, which the page's form-action must allow.
	if csp := empty.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "form-action 'self' "+h.GitHubURL) {
		t.Errorf("CSP %q does not let the Connect form go on to GitHub", csp)
	}
	if got := empty.Header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control = %q", got)
	}

	b = connect(t, h, stack.AliceEmail, stack.AlicePassword, stack.AliceLogin)
	alice := h.Person(stack.AliceEmail)
	conn := h.Connections(stack.AliceEmail)[0]
	ctx := context.Background()
	if err := h.Store().AllowAgent(ctx, store.AgentPermission{
		Project: stack.ProjectKey, Subject: alice.ID, Connector: h.Connector.Key, ClientID: "repo-helper",
		ConnectionID: conn.ID, CreatedAt: h.Clock.Now(),
	}); err != nil {
		t.Fatal(err)
	}
	if err := h.Store().UpsertGrant(ctx, store.Grant{Project: stack.ProjectKey, Subject: alice.ID, ClientID: "repo-helper",
		Scopes: []string{"openid"}, CreatedAt: h.Clock.Now(), UpdatedAt: h.Clock.Now()}); err != nil {
		t.Fatal(err)
	}

	page := b.Account()
	text := page.Text()
	for _, want := range []string{
		stack.AliceLogin + " at GitHub — connected 30 November 2026 — active",
		"Agents that may use it: Repo Helper repo-helper Remove access",
		"Apps you have allowed Repo Helper repo-helper — since 30 November 2026 Revoke",
		"Signed in as " + stack.AliceEmail,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("account page lacks %q:\n%s", want, text)
		}
	}
	if _, _, ok := page.Form("Connect GitHub"); ok {
		t.Error("Connect GitHub offered for a connected service")
	}
	if _, _, ok := page.Form("Reconnect GitHub"); ok {
		t.Error("Reconnect offered for a working connection")
	}

	// Each state of a connection is said in words (docs/connection-health.md); every state but
	// active offers Reconnect, which starts a "reconnect" attempt.
	for _, tc := range []struct {
		state store.ConnectionStatus
		words string
	}{
		{store.ConnectionExpiring, "expires soon: reconnect to keep it working"},
		{store.ConnectionRevokedUpstream, "access revoked at GitHub: reconnect to use it again"},
		{store.ConnectionNeedsReconnect, "needs reconnecting"},
	} {
		if _, err := h.Store().UpdateConnection(ctx, stack.ProjectKey, conn.ID, func(c store.Connection) (store.Connection, error) {
			c.Status = tc.state
			return c, nil
		}); err != nil {
			t.Fatal(err)
		}
		page = b.Account()
		if !strings.Contains(page.Text(), stack.AliceLogin+" at GitHub — connected 30 November 2026 — "+tc.words) {
			t.Errorf("%s connection not shown: %s", tc.state, page.Text())
		}
		if _, _, ok := page.Form("Reconnect GitHub"); !ok {
			t.Errorf("%s connection: no Reconnect", tc.state)
		}
	}
	res := b.PressOnAccount("Reconnect GitHub")
	if res.Status != http.StatusSeeOther || !strings.HasPrefix(res.Location(), h.GitHubURL) {
		t.Fatalf("Reconnect answered %d %q", res.Status, res.Location())
	}
	if rec := h.Audit()[0]; rec.Action != "connection.started" || rec.Details["purpose"] != "reconnect" {
		t.Errorf("audit record = %+v", rec)
	}
	done := b.MustFollow(b.MustGet(res.Location()))
	if !strings.Contains(done.Text(), "Connected") {
		t.Fatalf("reconnect: %s", done.Text())
	}
	conns := h.Connections(stack.AliceEmail)
	if len(conns) != 1 || conns[0].ID != conn.ID || conns[0].Status != store.ConnectionActive {
		t.Errorf("reconnect did not update the connection in place: %+v", conns)
	}
	if _, err := h.Store().FindPermission(ctx, stack.ProjectKey, alice.ID, h.Connector.Key, "repo-helper"); err != nil {
		t.Errorf("reconnect lost the agent's permission: %v", err)
	}
}

func TestDisconnectRevokesAtTheService(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	b := connect(t, h, stack.AliceEmail, stack.AlicePassword, stack.AliceLogin)
	alice := h.Person(stack.AliceEmail)
	conn := h.Connections(stack.AliceEmail)[0]
	if err := h.Store().AllowAgent(context.Background(), store.AgentPermission{Project: stack.ProjectKey, Subject: alice.ID,
		Connector: h.Connector.Key, ClientID: "repo-helper", ConnectionID: conn.ID, CreatedAt: h.Clock.Now()}); err != nil {
		t.Fatal(err)
	}
	if n := h.GitHub.ActiveTokens(stack.AliceLogin); n != 1 {
		t.Fatalf("GitHub holds %d tokens for alice before disconnecting", n)
	}

	res := b.MustFollow(b.PressOnAccount("Disconnect"))
	if res.Status != http.StatusOK || !strings.Contains(res.Text(), "The account was disconnected") || !strings.Contains(res.Text(), "Connect GitHub") {
		t.Errorf("after disconnect: %d %s", res.Status, res.Text())
	}
	if n := h.GitHub.ActiveTokens(stack.AliceLogin); n != 0 {
		t.Errorf("GitHub still holds %d tokens; disconnect must revoke", n)
	}
	if h.GitHub.Approved(stack.AliceLogin, stack.GitHubClientID) {
		t.Error("GitHub still remembers the approval")
	}
	if len(h.Connections(stack.AliceEmail)) != 0 || h.CountRows("agent_permissions") != 0 {
		t.Error("connection or permissions left behind")
	}
	if rec := h.Audit()[0]; rec.Action != "connection.disconnected" || rec.Actor != alice.ID || rec.Details["revoked"] != "yes" {
		t.Errorf("audit record = %+v", rec)
	}
}

func TestDisconnectWhenTheServiceIsDown(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	b := connect(t, h, stack.AliceEmail, stack.AlicePassword, stack.AliceLogin)
	// The service cannot be reached: the person is disconnected all the same.
	broken := *h.Connector
	broken.RevocationURL = "http://127.0.0.1:1/applications/{client_id}/grant"
	p := *h.Project
	p.Connectors = map[string]*config.Connector{broken.Key: &broken}
	h.Holder().Store(&config.Snapshot{Projects: map[string]*config.Project{stack.ProjectKey: &p}, Version: 2})

	res := b.MustFollow(b.PressOnAccount("Disconnect"))
	if res.Status != http.StatusOK || len(h.Connections(stack.AliceEmail)) != 0 {
		t.Errorf("disconnect with the service down: %d %s", res.Status, res.Text())
	}
	if rec := h.Audit()[0]; rec.Details["revoked"] != "failed" {
		t.Errorf("audit record = %+v", rec)
	}
}

func TestActionsNeedTheFormToken(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	b := connect(t, h, stack.AliceEmail, stack.AlicePassword, stack.AliceLogin)
	action, fields, _ := b.Account().Form("Disconnect")

	cases := []struct {
		name   string
		form   url.Values
		origin string
	}{
		{"no token", without(fields, "csrf_token"), ""},
		{"wrong token", with(fields, "csrf_token", "forged"), ""},
		{"another site", fields, "http://attacker.example"},
	}
	for _, tc := range cases {
		res := b.MustPostFrom(action, tc.form, tc.origin)
		if res.Status != http.StatusForbidden {
			t.Errorf("%s: answered %d", tc.name, res.Status)
		}
	}
	if len(h.Connections(stack.AliceEmail)) != 1 || h.GitHub.ActiveTokens(stack.AliceLogin) != 1 {
		t.Error("a forged request disconnected the account")
	}
}

func TestOnlyTheOwnerCanDisconnect(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	connect(t, h, stack.AliceEmail, stack.AlicePassword, stack.AliceLogin)
	aliceConn := h.Connections(stack.AliceEmail)[0]
	mallory := h.Browser()
	mallory.MustSignIn(stack.MalloryEmail, stack.MalloryPassword)
	_, fields, _ := mallory.Account().Form("Connect GitHub")
	form := url.Values{"csrf_token": {fields.Get("csrf_token")}, "connection_id": {aliceConn.ID}}
	mallory.MustPost(h.Issuer+"/account/disconnect", form)
	if len(h.Connections(stack.AliceEmail)) != 1 || h.GitHub.ActiveTokens(stack.AliceLogin) != 1 {
		t.Error("Mallory disconnected Alice's account")
	}
}

func TestRemoveAgentAndRevokeApp(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	b := connect(t, h, stack.AliceEmail, stack.AlicePassword, stack.AliceLogin)
	alice := h.Person(stack.AliceEmail)
	conn := h.Connections(stack.AliceEmail)[0]
	ctx := context.Background()
	allow := func() {
		if err := h.Store().AllowAgent(ctx, store.AgentPermission{Project: stack.ProjectKey, Subject: alice.ID,
			Connector: h.Connector.Key, ClientID: "repo-helper", ConnectionID: conn.ID, CreatedAt: h.Clock.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	allow()
	res := b.MustFollow(b.PressOnAccount("Remove access"))
	if !strings.Contains(res.Text(), "The agent can no longer use that account") || strings.Contains(res.Text(), "Remove access") {
		t.Errorf("after Remove access: %s", res.Text())
	}
	if _, err := h.Store().FindPermission(ctx, stack.ProjectKey, alice.ID, h.Connector.Key, "repo-helper"); err == nil {
		t.Error("permission still there")
	}
	if len(h.Connections(stack.AliceEmail)) != 1 {
		t.Error("removing an agent's access disconnected the account")
	}
	if rec := h.Audit()[0]; rec.Action != "permission.removed" || rec.Target != "client:repo-helper" {
		t.Errorf("audit record = %+v", rec)
	}

	// Revoking an app ends its consent and its permissions to use connected accounts.
	allow()
	if err := h.Store().UpsertGrant(ctx, store.Grant{Project: stack.ProjectKey, Subject: alice.ID, ClientID: "repo-helper",
		Scopes: []string{"openid"}, CreatedAt: h.Clock.Now(), UpdatedAt: h.Clock.Now()}); err != nil {
		t.Fatal(err)
	}
	res = b.MustFollow(b.PressOnAccount("Revoke"))
	if !strings.Contains(res.Text(), "The app's access was revoked") || !strings.Contains(res.Text(), "You have not allowed any app yet") {
		t.Errorf("after Revoke: %s", res.Text())
	}
	if _, err := h.Store().GetGrant(ctx, stack.ProjectKey, alice.ID, "repo-helper"); err == nil {
		t.Error("grant still there")
	}
	if _, err := h.Store().FindPermission(ctx, stack.ProjectKey, alice.ID, h.Connector.Key, "repo-helper"); err == nil {
		t.Error("a revoked app may still use the connected account")
	}
}

// Connecting needs a recent sign-in, as on a connect link: a browser left signed in is not
// enough to attach an account to this person.
func TestConnectNeedsARecentSignIn(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	b := h.Browser()
	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	action, fields, _ := b.Account().Form("Connect GitHub")
	h.Clock.Advance(16 * time.Minute)
	res := b.MustPost(action, fields)
	if res.Status != http.StatusSeeOther || !strings.Contains(res.Location(), "/sign-in?") || !strings.Contains(res.Location(), "prompt=login") {
		t.Errorf("stale sign-in: %d %q", res.Status, res.Location())
	}
	if h.CountRows("callback_states") != 0 {
		t.Error("a connection was started on a stale sign-in")
	}
	if res := b.MustPost(action, url.Values{"csrf_token": {fields.Get("csrf_token")}, "connector": {"nope/nope"}}); res.Status != http.StatusSeeOther {
		t.Errorf("unknown connector on a stale sign-in answered %d", res.Status)
	}
	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	_, fields, _ = b.Account().Form("Connect GitHub")
	if res := b.MustPost(action, url.Values{"csrf_token": {fields.Get("csrf_token")}, "connector": {"nope/nope"}}); res.Status != http.StatusBadRequest {
		t.Errorf("unknown connector answered %d", res.Status)
	}
}

func TestNoticesComeOnlyFromTheirList(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	b := h.Browser()
	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	res := b.MustGet(h.Issuer + "/account?done=" + url.QueryEscape("Call us at 555 0100"))
	if strings.Contains(res.Body, "555") {
		t.Error("the page shows text from its address")
	}
}

func without(v url.Values, k string) url.Values {
	out := url.Values{}
	for kk, vs := range v {
		if kk != k {
			out[kk] = vs
		}
	}
	return out
}

func with(v url.Values, k, val string) url.Values {
	out := without(v, k)
	out.Set(k, val)
	return out
}

// Where the project requires a phishing-resistant sign-in, Connect on the account page needs a
// passkey sign-in, as a connect link does: the person playing the attacker typed Alice's
// password into a look-alike page a minute ago and signs in with it. Connect sends that browser
// to sign in with a passkey and starts nothing; after a passkey sign-in it goes to the service.
func TestConnectNeedsAPasskeyWhereRequired(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true, PublicHost: "localhost"})
	h.Project.SignIn.RequirePhishingResistant = true
	b := h.Browser()
	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	res := b.PressOnAccount("Connect GitHub")
	loc, _ := url.Parse(res.Location())
	if res.Status != http.StatusSeeOther || loc == nil || loc.Path != "/team/demo/sign-in" || loc.Query().Get("passkey") != "1" ||
		loc.Query().Get("return_to") != "/team/demo/account" {
		t.Fatalf("Connect on a password sign-in: %d %q", res.Status, res.Location())
	}
	if n := h.CountRows("callback_states"); n != 0 {
		t.Fatalf("%d connection attempts started on a password sign-in", n)
	}

	b.SignInWithPasskey(stack.AliceEmail)
	res = b.PressOnAccount("Connect GitHub")
	if res.Status != http.StatusSeeOther || !strings.HasPrefix(res.Location(), h.GitHubURL+"/login/oauth/authorize?") {
		t.Fatalf("Connect on a passkey sign-in: %d %q", res.Status, res.Location())
	}
	if n := h.CountRows("callback_states"); n != 1 {
		t.Fatalf("%d connection attempts after a passkey sign-in, want 1", n)
	}
}

// TestAccountLinksToWaitingApprovals: the account page links to the "Waiting for you" page with
// the number of requests waiting for the signed-in person (an expired one is not counted), and
// mallory's page links there without a count of alice's requests.
func TestAccountLinksToWaitingApprovals(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	alice := h.Browser()
	alice.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	mallory := h.Browser()
	mallory.MustSignIn(stack.MalloryEmail, stack.MalloryPassword)
	now := h.Clock.Now()
	for i, ends := range []time.Duration{time.Hour, 10 * time.Minute, -time.Minute} {
		if err := h.Store().CreateApproval(context.Background(), store.Approval{
			Hash: []byte{byte(i), 1, 2, 3}, ID: "request-" + string(rune('a'+i)), Project: stack.ProjectKey, ClientID: "lkc_ops-bot",
			Subject: h.Person(stack.AliceEmail).ID, Scopes: []string{"openid"}, DeliveryMode: "poll", Status: store.ApprovalPending,
			Interval: 5 * time.Second, CreatedAt: now.Add(-2 * time.Minute), ExpiresAt: now.Add(ends),
		}); err != nil {
			t.Fatal(err)
		}
	}
	if account.ApprovalsPath != ciba.PagePath {
		t.Fatalf("the account page links to %s, the approvals page is at %s", account.ApprovalsPath, ciba.PagePath)
	}
	link := `<a href="/team/demo/account/approvals">`
	if pg := alice.Account(); !strings.Contains(pg.Body, link+"Waiting for you (2)</a>") {
		t.Fatalf("alice's account page lacks the link with the count 2: %s", pg.Text())
	}
	pg := mallory.Account()
	if !strings.Contains(pg.Body, link+"Waiting for you</a>") || strings.Contains(pg.Text(), "Waiting for you (") {
		t.Fatalf("mallory's account page: %s", pg.Text())
	}
}

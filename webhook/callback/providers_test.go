package callback_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/upstream/fakeoauth"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/exchange"
)

// providerStory is one provider's row: what its story must show. The story runs the provider's
// fake (internal/upstream/fakeoauth) behind the real account page, callback, token exchange and
// vault; docs/providers/README.md's table is generated from what the stories ran.
type providerStory struct {
	shape fakeoauth.Shape
	// ttl is how long the provider's access tokens live; 0: they do not expire and come
	// without a refresh token, so there is nothing to refresh.
	ttl time.Duration
	// rotates: every refresh answer carries a new refresh token and the one used stops working.
	// Otherwise the refresh token is kept and works again.
	rotates bool
	// revokes: the provider has a revocation endpoint and Disconnect ends the tokens there.
	// Otherwise Disconnect must send the provider nothing at all.
	revokes bool
	// why explains, in the table, a step the provider does not have.
	why map[string]string
	// after, when set, checks what an agent does next with the token it was handed.
	after func(t *testing.T, sv *stack.FakeService, token string)
}

var providerStories = []providerStory{
	{shape: fakeoauth.GitHub, why: map[string]string{stepRefresh: "OAuth app tokens do not expire", stepRotation: "no refresh token", stepRevoke: "no revocation URL in the preset"}},
	{shape: fakeoauth.Slack, ttl: 12 * time.Hour, rotates: true, revokes: true},
	{shape: fakeoauth.Notion, revokes: true, why: map[string]string{stepRefresh: "tokens do not expire", stepRotation: "no refresh token"}},
	{shape: fakeoauth.Linear, ttl: 24 * time.Hour, rotates: true, why: map[string]string{stepRevoke: "no revocation URL in the preset"}},
	{shape: fakeoauth.GHES, ttl: 8 * time.Hour, rotates: true, revokes: true},
	{shape: fakeoauth.GitLab, ttl: 2 * time.Hour, rotates: true, revokes: true},
	{shape: fakeoauth.Atlassian, ttl: time.Hour, rotates: true, why: map[string]string{stepRevoke: "no revocation endpoint"}, after: atlassianSites},
	{shape: fakeoauth.Bitbucket, ttl: 2 * time.Hour, why: map[string]string{stepRevoke: "no revocation endpoint"}},
	{shape: fakeoauth.Asana, ttl: time.Hour, revokes: true},
	{shape: fakeoauth.Salesforce, revokes: true, why: map[string]string{stepRefresh: "no expires_in", stepRotation: "refresh token kept, never used"}},
	{shape: fakeoauth.Google, ttl: time.Hour, revokes: true},
	{shape: fakeoauth.Microsoft, ttl: time.Hour, rotates: true, why: map[string]string{stepRevoke: "no revocation endpoint"}},
	{shape: fakeoauth.Box, ttl: time.Hour, rotates: true, revokes: true},
	{shape: fakeoauth.Dropbox, ttl: 4 * time.Hour, revokes: true},
	{shape: fakeoauth.Zoom, ttl: time.Hour, rotates: true, revokes: true},
	// Figma's tokens last 90 days; a day keeps the story within the agent token's lifetime.
	{shape: fakeoauth.Figma, ttl: 24 * time.Hour, why: map[string]string{stepRevoke: "no revocation endpoint"}},
	{shape: fakeoauth.Airtable, ttl: time.Hour, rotates: true, why: map[string]string{stepRevoke: "no revocation endpoint"}},
	{shape: fakeoauth.Zendesk, ttl: 30 * time.Minute, rotates: true, why: map[string]string{stepRevoke: "revocation is not RFC 7009"}},
	{shape: fakeoauth.HubSpot, ttl: 30 * time.Minute, why: map[string]string{stepRevoke: "only with the token in the URL path"}},
}

// The steps of a story, the columns of the table.
const (
	stepConnect   = "connect"
	stepExchange  = "exchange"
	stepRefresh   = "refresh"
	stepRotation  = "rotation"
	stepRevoke    = "revoke"
	stepReconnect = "reconnect"
)

var storySteps = []string{stepConnect, stepExchange, stepRefresh, stepRotation, stepRevoke, stepReconnect}

// TestProviderStories runs every provider's story: Alice connects from the account page
// through the provider's authorization to the callback; token exchange hands the agent the
// live token the provider issued; once it expires, one refresh at the provider renews it (and
// the rotated refresh token is the one used next, where the provider rotates); after she
// removes the app at the provider, the connection needs reconnecting and reconnecting keeps
// its id and the agent's permission; Disconnect revokes at the provider, or calls nothing
// where the provider has no revocation.
func TestProviderStories(t *testing.T) {
	runProviderStories(t)
}

// runProviderStories runs the stories and returns, per provider, the steps each one exercised
// and what the table says of them. A step is recorded only once its assertions passed.
func runProviderStories(t *testing.T) map[fakeoauth.Shape]map[string]string {
	var mu sync.Mutex
	ran := map[fakeoauth.Shape]map[string]string{}
	for _, st := range providerStories {
		t.Run(string(st.shape), func(t *testing.T) {
			cells := map[string]string{}
			runProviderStory(t, st, func(step, cell string) { cells[step] = cell })
			mu.Lock()
			ran[st.shape] = cells
			mu.Unlock()
		})
	}
	return ran
}

func runProviderStory(t *testing.T, st providerStory, done func(step, cell string)) {
	h := stack.New(t, stack.Options{Audit: true, Services: []fakeoauth.Shape{st.shape}, ServiceTokenTTL: st.ttl})
	sv := h.Services[st.shape]
	paths := fakeoauth.PathsOf(st.shape)
	requestsTo := func(path string, match func(fakeoauth.Request) bool) []fakeoauth.Request {
		var out []fakeoauth.Request
		for _, r := range sv.Fake.Requests() {
			if r.Path == path && (match == nil || match(r)) {
				out = append(out, r)
			}
		}
		return out
	}
	refreshes := func() []fakeoauth.Request {
		return requestsTo(sv.Fake.RefreshPath(), func(r fakeoauth.Request) bool { return r.Params.Get("grant_type") == "refresh_token" })
	}

	// Connect.
	b := h.Browser()
	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	u, _ := url.Parse(sv.URL)
	b.Jar.SetCookies(u, []*http.Cookie{sv.Fake.SessionCookie(stack.AliceLogin)})
	connectThroughProvider(t, b, sv, paths, "Connect "+sv.Connector.DisplayName)
	conn := aliceConnection(t, h, sv)
	if want := sv.Fake.AccountID(stack.AliceLogin); conn.AccountID != want || conn.Status != store.ConnectionActive {
		t.Fatalf("connection = %+v; want Alice's account %s", conn, want)
	}
	if st.ttl == 0 && conn.Expiry != nil {
		t.Fatalf("a token without expires_in was stored as expiring at %v", conn.Expiry)
	}
	done(stepConnect, "yes")

	// Token exchange.
	subject := agentToken(t, h, conn)
	last := exchangeFor(t, h, subject, sv.Connector.Audience)
	if !sv.Fake.Live(last) {
		t.Fatalf("token exchange handed out %q, not a live token the provider issued", last)
	}
	if st.after != nil {
		st.after(t, sv, last)
	}
	done(stepExchange, "yes")

	// Refresh, twice: the second shows which refresh token the first one left behind.
	if st.ttl > 0 {
		var used []string
		for i := 1; i <= 2; i++ {
			h.Clock.Advance(st.ttl + time.Minute)
			next := exchangeFor(t, h, subject, sv.Connector.Audience)
			if next == last || !sv.Fake.Live(next) {
				t.Fatalf("after expiry token exchange handed out %q (before %q); want a refreshed live token", next, last)
			}
			last = next
			rs := refreshes()
			if len(rs) != i {
				t.Fatalf("%d refresh requests after %d expiries, want one each", len(rs), i)
			}
			used = append(used, rs[i-1].Params.Get("refresh_token"))
		}
		done(stepRefresh, "yes")
		switch {
		case st.rotates && used[0] != used[1] && !sv.Fake.LiveRefresh(used[0]) && !sv.Fake.LiveRefresh(used[1]):
			done(stepRotation, "rotates")
		case !st.rotates && used[0] == used[1] && sv.Fake.LiveRefresh(used[0]):
			done(stepRotation, "kept")
		default:
			t.Fatalf("refresh tokens used %q, still working %v %v; rotates = %v", used, sv.Fake.LiveRefresh(used[0]), sv.Fake.LiveRefresh(used[1]), st.rotates)
		}
	}

	// Alice removes the app at the provider. Where tokens expire the next refresh is refused
	// and token exchange asks for a reconnect; where they never do, nothing tells Latchkey, so
	// the story marks the connection broken as a rejected token would.
	sv.Fake.RevokeAll(stack.AliceLogin)
	if st.ttl > 0 {
		h.Clock.Advance(st.ttl + time.Minute)
		status, body := exchangeAnswer(t, h, subject, sv.Connector.Audience)
		if status != http.StatusBadRequest || body["reason"] != exchange.ReasonReconnectRequired {
			t.Fatalf("after the provider refused the refresh, token exchange answered %d %v; want reconnect_required", status, body)
		}
	} else {
		if _, err := h.Store().UpdateConnection(context.Background(), stack.ProjectKey, conn.ID, func(c store.Connection) (store.Connection, error) {
			c.Status = store.ConnectionRevokedUpstream
			return c, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	connectThroughProvider(t, b, sv, paths, "Reconnect "+sv.Connector.DisplayName)
	again := aliceConnection(t, h, sv)
	if again.ID != conn.ID || again.Status != store.ConnectionActive {
		t.Fatalf("after reconnecting the connection is %+v; want %s active again", again, conn.ID)
	}
	last = exchangeFor(t, h, subject, sv.Connector.Audience)
	if !sv.Fake.Live(last) {
		t.Fatalf("after reconnecting token exchange handed out %q, not a live token", last)
	}
	done(stepReconnect, "yes")

	// Disconnect.
	before := len(sv.Fake.Requests())
	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	if gone := b.PressOnAccount("Disconnect"); gone.Status/100 != 3 && gone.Status != http.StatusOK {
		t.Fatalf("Disconnect answered %d", gone.Status)
	}
	if n := len(h.Connections(stack.AliceEmail)); n != 0 {
		t.Fatalf("%d connections left after Disconnect", n)
	}
	if st.revokes {
		if sv.Fake.Live(last) {
			t.Fatal("the provider still honours the token after Alice disconnected")
		}
		carries := func(r fakeoauth.Request) bool {
			// Dropbox's token revokes itself as the request's Bearer credential.
			if r.Header.Get("Authorization") == "Bearer "+last {
				return true
			}
			for _, v := range r.Params {
				if len(v) > 0 && v[0] == last {
					return true
				}
			}
			return false
		}
		if len(requestsTo(sv.Fake.RevokePath(), carries)) == 0 {
			t.Fatal("no revocation of the access token reached the provider")
		}
		if rec := h.Trail("connection.disconnected")["connection.disconnected"]; rec.Details["revoked"] != "yes" {
			t.Fatalf("the disconnection was recorded with revoked=%q; want yes", rec.Details["revoked"])
		}
		done(stepRevoke, "yes")
	} else {
		if sent := sv.Fake.Requests()[before:]; len(sent) != 0 {
			t.Fatalf("Disconnect sent %d requests to a provider without revocation (first %s %s)", len(sent), sent[0].Method, sent[0].Path)
		}
		if rec := h.Trail("connection.disconnected")["connection.disconnected"]; rec.Details["revoked"] != "not_supported" {
			t.Fatalf("the disconnection was recorded with revoked=%q; want not_supported", rec.Details["revoked"])
		}
	}
	if st.shape == fakeoauth.Notion {
		for _, r := range sv.Fake.Requests() {
			if r.Path != paths.Authorize && r.Header.Get("Notion-Version") != fakeoauth.NotionVersion {
				t.Errorf("%s %s without Notion-Version", r.Method, r.Path)
			}
		}
	}
}

// atlassianSites: the token handed out finds the Atlassian sites it reaches (their cloud ids
// are in every Jira and Confluence API URL) at accessible-resources.
func atlassianSites(t *testing.T, sv *stack.FakeService, token string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, sv.URL+fakeoauth.AccessibleResourcesPath, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sites []struct{ ID, URL string }
	if err := json.NewDecoder(resp.Body).Decode(&sites); err != nil || resp.StatusCode != http.StatusOK || len(sites) != 1 || sites[0].ID == "" {
		t.Fatalf("accessible-resources answered %d %+v (%v)", resp.StatusCode, sites, err)
	}
}

// connectThroughProvider presses label on the account page (Alice is signed in at Latchkey and
// at the provider), follows the provider's authorization back to the callback, and checks
// that the connection was made.
func connectThroughProvider(t *testing.T, b *stack.Browser, sv *stack.FakeService, paths fakeoauth.Paths, label string) {
	t.Helper()
	res := b.PressOnAccount(label)
	if res.Status != http.StatusSeeOther || !strings.HasPrefix(res.Location(), sv.URL+paths.Authorize+"?") {
		t.Fatalf("%s answered %d, Location %q", label, res.Status, res.Location())
	}
	back := b.MustGet(res.Location())
	if back.Status != http.StatusFound || !strings.HasPrefix(back.Location(), sv.Connector.CallbackURL+"?") {
		t.Fatalf("the provider answered %d, Location %q: %s", back.Status, back.Location(), back.Body)
	}
	if done := b.MustGet(back.Location()); done.Status != http.StatusOK || !strings.Contains(done.Text(), "onnected") {
		t.Fatalf("callback answered %d: %s", done.Status, done.Text())
	}
}

func aliceConnection(t *testing.T, h *stack.Stack, sv *stack.FakeService) store.Connection {
	t.Helper()
	for _, c := range h.Connections(stack.AliceEmail) {
		if c.Connector == sv.Connector.Key {
			return c
		}
	}
	t.Fatalf("Alice has no connection to %s", sv.Connector.Key)
	return store.Connection{}
}

// agentToken issues Alice a Latchkey access token for the Agent client and lets the Agent use
// her connection, as her consent would.
func agentToken(t *testing.T, h *stack.Stack, conn store.Connection) string {
	t.Helper()
	ctx := context.Background()
	tok := secret.New(secret.PrefixAccessToken)
	now := h.Clock.Now()
	if err := h.Store().CreateTokens(ctx, store.Token{
		Hash: secret.Hash(tok), Kind: store.AccessToken, Project: stack.ProjectKey, ClientID: stack.ServicesAgent,
		Subject: conn.Subject, Scopes: []string{"openid"}, FamilyID: secret.New(""),
		AuthTime: now, IssuedAt: now, ExpiresAt: now.Add(30 * 24 * time.Hour),
	}); err != nil {
		t.Fatal(err)
	}
	if err := h.Store().AllowAgent(ctx, store.AgentPermission{
		Project: stack.ProjectKey, Subject: conn.Subject, Connector: conn.Connector, ClientID: stack.ServicesAgent, ConnectionID: conn.ID, CreatedAt: now,
	}); err != nil {
		t.Fatal(err)
	}
	return tok
}

// exchangeAnswer is the Agent's token exchange (RFC 8693) for audience.
func exchangeAnswer(t *testing.T, h *stack.Stack, subject, audience string) (int, map[string]any) {
	t.Helper()
	form := url.Values{
		"grant_type": {exchange.GrantType}, "subject_token": {subject}, "subject_token_type": {exchange.TokenTypeAccessToken},
		"requested_token_type": {exchange.TokenTypeAccessToken}, "audience": {audience},
	}
	req, _ := http.NewRequest(http.MethodPost, h.Issuer+"/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(stack.ServicesAgent, url.QueryEscape(stack.ServicesAgentSecret))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

// exchangeFor is a token exchange that must succeed; it returns the token.
func exchangeFor(t *testing.T, h *stack.Stack, subject, audience string) string {
	t.Helper()
	status, body := exchangeAnswer(t, h, subject, audience)
	at, _ := body["access_token"].(string)
	if status != http.StatusOK || at == "" {
		t.Fatalf("token exchange answered %d %v", status, body)
	}
	// Slack calls its user tokens "user"; the agent must be told how to send it.
	if body["token_type"] != "Bearer" {
		t.Errorf("token_type = %v, want Bearer", body["token_type"])
	}
	return at
}

// ---------------------------------------------------------------------------------------------
// The table of docs/providers/README.md

var update = flag.Bool("update", false, "rewrite docs/providers/README.md's provider table from the stories")

const (
	providersReadme = "../../docs/providers/README.md"
	tableBegin      = "<!-- provider-table:begin (generated: go test ./webhook/callback -run TestProviderTable -update) -->"
	tableEnd        = "<!-- provider-table:end -->"
)

// TestProviderTable runs the stories and checks that docs/providers/README.md's table says
// what they exercised: a step is "yes" only where that provider's story ran it and passed.
// With -update it rewrites the table instead.
func TestProviderTable(t *testing.T) {
	ran := runProviderStories(t)
	if t.Failed() {
		t.Fatal("a story failed; the table is neither checked nor rewritten")
	}
	table := providerTable(ran)
	readme, err := os.ReadFile(providersReadme)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := bytes.Cut(readme, []byte(tableBegin))
	_, after, ok2 := bytes.Cut(rest, []byte(tableEnd))
	if !ok1 || !ok2 {
		t.Fatalf("%s lacks the markers %q and %q", providersReadme, tableBegin, tableEnd)
	}
	want := append(append(append(append([]byte{}, before...), tableBegin+"\n"+table...), tableEnd...), after...)
	if *update {
		if err := os.WriteFile(providersReadme, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(readme, want) {
		t.Errorf("the provider table in %s is not what the stories ran; run go test ./webhook/callback -run TestProviderTable -update\nwant:\n%s", providersReadme, table)
	}
}

// providerTable renders one row per story, in the order of providerStories.
func providerTable(ran map[fakeoauth.Shape]map[string]string) string {
	var sb strings.Builder
	sb.WriteString("| provider | " + strings.Join(storySteps, " | ") + " |\n|---" + strings.Repeat("|---", len(storySteps)) + "|\n")
	for _, st := range providerStories {
		name := "`" + string(st.shape) + "`"
		if _, err := os.Stat("../../docs/providers/" + string(st.shape) + ".md"); err == nil {
			name = fmt.Sprintf("[%#q](%s.md)", st.shape, st.shape)
		}
		sb.WriteString("| " + name)
		for _, step := range storySteps {
			cell := ran[st.shape][step]
			if cell == "" {
				cell = "—"
				if why := st.why[step]; why != "" {
					cell += " (" + why + ")"
				}
			}
			sb.WriteString(" | " + cell)
		}
		sb.WriteString(" |\n")
	}
	return sb.String()
}

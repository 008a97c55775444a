package exchange_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/exchange"
)

const plainSecret = "lk_cs_plain-secret-for-tests-0123456789abcdefghijklm"

func form(subject string, change func(url.Values)) url.Values {
	f := url.Values{
		"grant_type":           {exchange.GrantType},
		"subject_token":        {subject},
		"subject_token_type":   {exchange.TokenTypeAccessToken},
		"requested_token_type": {exchange.TokenTypeAccessToken},
		"audience":             {stack.Audience},
	}
	if change != nil {
		change(f)
	}
	return f
}

func TestExchangeErrors(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	ctx := context.Background()
	h.AccessToken(stack.AliceEmail, stack.Agent) // issued with the others; alice below is a newer one
	expired := h.AccessToken(stack.AliceEmail, stack.Agent)
	revoked := h.AccessToken(stack.AliceEmail, stack.Agent)
	if err := h.Store().RevokeToken(ctx, secret.Hash(revoked), h.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	h.Clock.Advance(30 * time.Minute)
	alice := h.AccessToken(stack.AliceEmail, stack.Agent) // the others are 30 minutes older
	h.Clock.Advance(31 * time.Minute)                     // expired is dead now, alice lives
	forAnother := h.AccessToken(stack.AliceEmail, stack.Copycat)
	h.Project.Clients["plain"] = &config.Client{ID: "plain", SecretHash: secret.Hash(plainSecret), GrantTypes: []string{"authorization_code"}}
	copycatOwn := h.AccessToken(stack.AliceEmail, stack.Copycat)
	registeredOwn := h.AccessToken(stack.AliceEmail, stack.Registered)
	machine := secret.New(secret.PrefixAccessToken)
	now := h.Clock.Now()
	if err := h.Store().CreateTokens(ctx, store.Token{
		Hash: secret.Hash(machine), Kind: store.AccessToken, Project: stack.ProjectKey, ClientID: stack.Agent,
		FamilyID: "cc", IssuedAt: now, ExpiresAt: now.Add(time.Hour),
	}); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name           string
		client, secret string
		form           url.Values
		status         int
		code           string
	}{
		{"unknown subject token", stack.Agent, stack.AgentSecret, form("lk_at_nonsense", nil), 400, "invalid_grant"},
		{"expired subject token", stack.Agent, stack.AgentSecret, form(expired, nil), 400, "invalid_grant"},
		{"revoked subject token", stack.Agent, stack.AgentSecret, form(revoked, nil), 400, "invalid_grant"},
		{"client_credentials token", stack.Agent, stack.AgentSecret, form(machine, nil), 400, "invalid_grant"},
		{"token of another client", stack.Agent, stack.AgentSecret, form(forAnother, nil), 400, "invalid_grant"},
		{"MCP server with a token not for it", stack.MCP, stack.MCPSecret, form(alice, nil), 400, "invalid_grant"},
		{"unknown audience", stack.Agent, stack.AgentSecret, form(alice, func(f url.Values) { f.Set("audience", "gitlab") }), 400, "invalid_target"},
		{"unknown resource", stack.Agent, stack.AgentSecret, form(alice, func(f url.Values) { f.Del("audience"); f.Set("resource", "https://gitlab.example") }), 400, "invalid_target"},
		{"no audience", stack.Agent, stack.AgentSecret, form(alice, func(f url.Values) { f.Del("audience") }), 400, "invalid_target"},
		{"two audiences, one unknown", stack.Agent, stack.AgentSecret, form(alice, func(f url.Values) { f.Add("audience", "gitlab") }), 400, "invalid_target"},
		{"client not permitted for the connector", stack.Copycat, stack.CopycatSecret, form(copycatOwn, nil), 400, "unauthorized_client"},
		{"registered client", stack.Registered, stack.RegisteredSecret, form(registeredOwn, nil), 400, "unauthorized_client"},
		{"no subject token", stack.Agent, stack.AgentSecret, form("", func(f url.Values) { f.Del("subject_token") }), 400, "invalid_request"},
		{"no subject token type", stack.Agent, stack.AgentSecret, form(alice, func(f url.Values) { f.Del("subject_token_type") }), 400, "invalid_request"},
		{"id token as subject", stack.Agent, stack.AgentSecret, form(alice, func(f url.Values) { f.Set("subject_token_type", "urn:ietf:params:oauth:token-type:id_token") }), 400, "invalid_request"},
		{"refresh token requested", stack.Agent, stack.AgentSecret, form(alice, func(f url.Values) { f.Set("requested_token_type", "urn:ietf:params:oauth:token-type:refresh_token") }), 400, "invalid_request"},
		{"another client's actor token", stack.Agent, stack.AgentSecret, form(alice, func(f url.Values) {
			f.Set("actor_token", copycatOwn)
			f.Set("actor_token_type", exchange.TokenTypeAccessToken)
		}), 400, "invalid_request"},
		{"actor token without its type", stack.Agent, stack.AgentSecret, form(alice, func(f url.Values) { f.Set("actor_token", alice) }), 400, "invalid_request"},
		{"actor token type without a token", stack.Agent, stack.AgentSecret, form(alice, func(f url.Values) { f.Set("actor_token_type", exchange.TokenTypeAccessToken) }), 400, "invalid_request"},
		{"wrong client secret", stack.Agent, "lk_cs_wrong", form(alice, nil), 401, "invalid_client"},
		{"grant not allowed for the client", "plain", plainSecret, form(alice, nil), 400, "unauthorized_client"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := h.ExchangeForm(tc.client, tc.secret, tc.form)
			if a.Status != tc.status || a.Str("error") != tc.code {
				t.Fatalf("got %d %s, want %d %s", a.Status, a.Raw, tc.status, tc.code)
			}
			if a.Header.Get("Cache-Control") != "no-store" {
				t.Errorf("Cache-Control %q", a.Header.Get("Cache-Control"))
			}
			if _, ok := a.Body["connect_uri"]; ok {
				t.Errorf("an error other than the refusal carries a link: %s", a.Raw)
			}
		})
	}
	// None of them made a link.
	if n := h.CountRows("links"); n != 0 {
		t.Fatalf("%d links made by bad requests", n)
	}
	// And the live token still works.
	if a := h.AgentExchange(alice); a.Str("reason") != "connect_required" {
		t.Fatalf("valid request: %d %s", a.Status, a.Raw)
	}
}

// An MCP server exchanges the token its caller presented to it: the agent is the caller, and
// the link is for the caller's person and agent.
func TestMCPServerExchangesItsCallersToken(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	conn := h.ConnectDirectly(stack.AliceEmail, "2002", "alice-gh", "gho_alice")
	subject := h.AccessToken(stack.AliceEmail, stack.Registered, stack.MCPResource)
	a := h.ExchangeAs(stack.MCP, stack.MCPSecret, subject, stack.Audience)
	if a.Status != 400 || a.Str("reason") != "allow_required" ||
		a.Str("connect_message") != "Open this link to let Repo Helper use your GitHub account." {
		t.Fatalf("refusal: %d %s", a.Status, a.Raw)
	}
	// Allowing the agent (the registered client the token was issued to) is what counts, not
	// the MCP server.
	h.Allow(stack.AliceEmail, stack.MCP, conn)
	if a := h.ExchangeAs(stack.MCP, stack.MCPSecret, subject, stack.Audience); a.Status != 400 {
		t.Fatalf("allowing the MCP server let the agent through: %s", a.Raw)
	}
	h.Allow(stack.AliceEmail, stack.Registered, conn)
	a = h.ExchangeAs(stack.MCP, stack.MCPSecret, subject, stack.Audience)
	if a.Status != 200 || a.Str("access_token") != "gho_alice" {
		t.Fatalf("exchange: %d %s", a.Status, a.Raw)
	}
	if _, ok := a.Body["expires_in"]; ok {
		t.Errorf("a token that does not expire has expires_in: %s", a.Raw)
	}
	// The resource may also be named by the token's audience holding the client id.
	byID := h.AccessToken(stack.AliceEmail, stack.Registered, stack.MCP)
	if a := h.ExchangeAs(stack.MCP, stack.MCPSecret, byID, stack.Audience); a.Status != 200 {
		t.Fatalf("audience by client id: %d %s", a.Status, a.Raw)
	}
	// Another declared client may not present a token issued for the MCP server.
	if a := h.ExchangeAs(stack.Agent, stack.AgentSecret, subject, stack.Audience); a.Str("error") != "invalid_grant" {
		t.Fatalf("token for the MCP server used by another client: %s", a.Raw)
	}
}

func TestExpiringTokenReportsExpiresIn(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour, AccessTokenTTL: time.Hour})
	b := h.Browser()
	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	b.SignInGitHub(stack.AliceLogin)
	h.GitHub.Approve(stack.AliceLogin, stack.GitHubClientID)
	b.MustFollow(b.PressOnAccount("Connect GitHub"))
	conns := h.Connections(stack.AliceEmail)
	h.Allow(stack.AliceEmail, stack.Agent, conns[0])
	subject := h.AccessToken(stack.AliceEmail, stack.Agent)

	h.Clock.Advance(10 * time.Minute)
	a := h.AgentExchange(subject)
	if a.Status != 200 || a.Str("expires_in") != "3000" {
		t.Fatalf("exchange: %d %s, want expires_in 3000", a.Status, a.Raw)
	}
	// After expiry the vault refreshes once, and the agent gets the new token.
	h.Clock.Advance(time.Hour)
	subject = h.AccessToken(stack.AliceEmail, stack.Agent)
	b2 := h.AgentExchange(subject)
	if b2.Status != 200 || b2.Str("access_token") == a.Str("access_token") || h.GitHub.RefreshCalls() != 1 {
		t.Fatalf("after expiry: %d %s (refreshes %d)", b2.Status, b2.Raw, h.GitHub.RefreshCalls())
	}
}

// The exchange reads the agent's permissions and the connections they name on every request: a
// moved default hands out the other account's token at once, and a withdrawn
// permission, a connection marked broken and a disconnected account are refused on the very
// next request.
func TestEveryExchangeSeesTheLatestPermission(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	ctx := context.Background()
	alice := h.PersonID(stack.AliceEmail)
	work := h.ConnectDirectly(stack.AliceEmail, "1", "alice-work", "gho_work")
	home := h.ConnectDirectly(stack.AliceEmail, "2", "alice-home", "gho_home")
	subject := h.AccessToken(stack.AliceEmail, stack.Agent)
	want := func(step, status, got string) {
		t.Helper()
		a := h.AgentExchange(subject)
		if a.Str("access_token")+a.Str("reason") != got || strconv.Itoa(a.Status) != status {
			t.Fatalf("%s: %d %s, want %s %s", step, a.Status, a.Raw, status, got)
		}
	}

	want("connected, not allowed", "400", exchange.ReasonAllowRequired)
	h.Allow(stack.AliceEmail, stack.Agent, work)
	want("allowed", "200", "gho_work")
	// A second account allowed: the agent naming none still gets the default (the first
	// connected), and the other one as soon as the person makes it the default.
	h.Allow(stack.AliceEmail, stack.Agent, home)
	want("a second account allowed", "200", "gho_work")
	if err := h.Store().SetDefaultConnection(ctx, stack.ProjectKey, alice, home.ID); err != nil {
		t.Fatal(err)
	}
	want("the default moved", "200", "gho_home")

	// Another agent's permission is not this agent's.
	if err := h.Store().DeletePermission(ctx, stack.ProjectKey, alice, h.Connector.Key, stack.Agent); err != nil {
		t.Fatal(err)
	}
	h.Allow(stack.AliceEmail, stack.MCP, home)
	want("withdrawn", "400", exchange.ReasonAllowRequired)

	h.Allow(stack.AliceEmail, stack.Agent, home)
	want("allowed again", "200", "gho_home")
	// An expiring connection still hands out its live token; one that needs its person asks
	// for a reconnect (docs/connection-health.md).
	for _, tc := range []struct {
		state        store.ConnectionStatus
		status, body string
	}{
		{store.ConnectionExpiring, "200", "gho_home"},
		{store.ConnectionNeedsReconnect, "400", exchange.ReasonReconnectRequired},
		{store.ConnectionRevokedUpstream, "400", exchange.ReasonReconnectRequired},
	} {
		if _, err := h.Store().UpdateConnection(ctx, stack.ProjectKey, home.ID, func(c store.Connection) (store.Connection, error) {
			c.Status = tc.state
			return c, nil
		}); err != nil {
			t.Fatal(err)
		}
		want(string(tc.state), tc.status, tc.body)
	}

	for _, c := range []store.Connection{home, work} {
		if err := h.Store().DeleteConnection(ctx, stack.ProjectKey, c.ID); err != nil {
			t.Fatal(err)
		}
	}
	want("disconnected", "400", exchange.ReasonConnectRequired)
}

func TestRefusalSurvivesAnUnknownAgentName(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	h.Project.Clients[stack.Agent].Name = ""
	a := h.AgentExchange(h.AccessToken(stack.AliceEmail, stack.Agent))
	if want := "Open this link to connect your GitHub account and let repo-helper use it."; a.Str("connect_message") != want {
		t.Fatalf("connect_message %q, want %q", a.Str("connect_message"), want)
	}
}

func BenchmarkExchangeToken(b *testing.B) {
	h := stack.New(b, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	conn := h.ConnectDirectly(stack.AliceEmail, "2002", "alice-gh", "gho_alice")
	h.Allow(stack.AliceEmail, stack.Agent, conn)
	f := form(h.AccessToken(stack.AliceEmail, stack.Agent), nil).Encode()
	bench(b, h, f, http.StatusOK)
}

func BenchmarkExchangeRefusal(b *testing.B) {
	h := stack.New(b, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	f := form(h.AccessToken(stack.AliceEmail, stack.Agent), nil).Encode()
	bench(b, h, f, http.StatusBadRequest)
}

func bench(b *testing.B, h *stack.Stack, body string, want int) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodPost, h.Issuer+"/token", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.SetBasicAuth(stack.Agent, stack.AgentSecret)
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				b.Fatalf("status %d, want %d", resp.StatusCode, want)
			}
		}
	})
}

// A public client proves nothing but its id, which anyone can send. Even when it holds a
// person's token issued to it and lists the connector (an OAuthClient written before the API
// server refused that, or a client that registered itself as public), token exchange refuses
// it as unauthenticated (RFC 8693 §5), and makes no link.
func TestPublicClientsNeverExchange(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	ctx := context.Background()
	h.Project.Clients["public-agent"] = &config.Client{
		ID: "public-agent", Name: "Public agent", RedirectURIs: []string{"http://127.0.0.1/cb"},
		GrantTypes:              []string{"authorization_code", exchange.GrantType},
		TokenEndpointAuthMethod: "none", Connectors: []string{h.Connector.Key},
	}
	now := h.Clock.Now()
	if err := h.Store().CreateClient(ctx, store.Client{
		Project: stack.ProjectKey, ID: "public-dcr", Name: "Registered public agent",
		RedirectURIs: []string{"http://127.0.0.1/cb"}, GrantTypes: []string{"authorization_code", exchange.GrantType},
		ResponseTypes: []string{"code"}, TokenEndpointAuthMethod: "none", CreatedAt: now, UpdatedAt: now,
	}); err != nil {
		t.Fatal(err)
	}
	h.ConnectDirectly(stack.AliceEmail, "2002", "alice-gh", "gho_alice")
	for _, client := range []string{"public-agent", "public-dcr"} {
		t.Run(client, func(t *testing.T) {
			f := form(h.AccessToken(stack.AliceEmail, client), func(f url.Values) { f.Set("client_id", client) })
			resp, err := http.PostForm(h.Issuer+"/token", f)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body map[string]any
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusUnauthorized || body["error"] != "invalid_client" ||
				!strings.Contains(body["error_description"].(string), "public client") {
				t.Fatalf("public client exchanging: %d %v, want 401 invalid_client", resp.StatusCode, body)
			}
			if _, ok := body["connect_uri"]; ok {
				t.Errorf("the refusal carries a link: %v", body)
			}
		})
	}
	if n := h.CountRows("links"); n != 0 {
		t.Fatalf("%d links made for public clients", n)
	}
}

// A connection whose sealing key was removed (too early, or with a lost keys Secret) cannot be
// opened: the exchange asks the person to reconnect instead of failing with a server error.
func TestUnreadableConnectionAsksToReconnect(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	conn := h.ConnectDirectly(stack.AliceEmail, "1", "alice", "gho_sealed")
	h.Allow(stack.AliceEmail, stack.Agent, conn)
	subject := h.AccessToken(stack.AliceEmail, stack.Agent)
	if a := h.AgentExchange(subject); a.Status != 200 {
		t.Fatalf("before: %d %s", a.Status, a.Raw)
	}
	if _, err := h.Store().UpdateConnection(context.Background(), stack.ProjectKey, conn.ID, func(c store.Connection) (store.Connection, error) {
		c.KeyID = "removed-key"
		return c, nil
	}); err != nil {
		t.Fatal(err)
	}
	if a := h.AgentExchange(subject); a.Status != 400 || a.Str("reason") != exchange.ReasonReconnectRequired || a.Str("connect_uri") == "" {
		t.Fatalf("sealed with a removed key: %d %s, want reconnect_required with a link", a.Status, a.Raw)
	}
}

// unrecordedStore cannot store the records of what a client is handed.
type unrecordedStore struct{ store.Store }

func (unrecordedStore) AppendAuditBatched(context.Context, store.AuditRecord) error {
	return errors.New("the database refused the write")
}

// An agent is never handed a person's upstream token that the audit log does not show
// (docs/decisions/0054): when the token.exchanged record cannot be stored, the exchange fails
// with server_error and the token stays in Latchkey.
func TestNoUpstreamTokenWithoutItsRecord(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour, Store: func(s store.Store) store.Store { return unrecordedStore{s} }})
	conn := h.ConnectDirectly(stack.AliceEmail, "2002", "alice-gh", "gho_alice")
	h.Allow(stack.AliceEmail, stack.Agent, conn)
	a := h.AgentExchange(h.AccessToken(stack.AliceEmail, stack.Agent))
	if a.Status != http.StatusInternalServerError || a.Str("error") != "server_error" || strings.Contains(string(a.Raw), "gho_alice") {
		t.Fatalf("exchange whose record failed: %d %s", a.Status, a.Raw)
	}
	for _, r := range h.Audit() {
		if r.Action == "token.exchanged" {
			t.Errorf("a token.exchanged record for an exchange that failed: %+v", r)
		}
	}
}

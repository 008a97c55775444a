package exchange_test

import (
	"context"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/test/stack"
)

// sharedHarness makes GitHub an Organisation connector whose shared account Repo Helper may
// use (the Project names it), and connects the shared account unless connect is false.
func sharedHarness(t *testing.T, connect bool) *stack.Stack {
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	h.Connector.Shared = true
	h.Connector.SharedClients = []string{"default/repo-helper"}
	h.Project.Clients[stack.Agent].Source = "default/repo-helper"
	h.Project.Clients[stack.MCP].Source = "default/github-tools"
	if connect {
		saveShared(t, h, "svc-1", "acme-bot", "gho_shared", store.ConnectionActive)
	}
	return h
}

func saveShared(t *testing.T, h *stack.Stack, id, login, token string, status store.ConnectionStatus) store.Connection {
	t.Helper()
	now := h.Clock.Now()
	c := store.Connection{
		ID: secret.NewID(), Project: stack.ProjectKey, Subject: store.SharedSubject(h.Connector.Key), Connector: h.Connector.Key,
		AccountID: id, AccountName: login, Status: status, CreatedAt: now, UpdatedAt: now,
	}
	v := &upstream.Vault{Store: h.Store(), Keyring: h.Server().Env().Keyring, Now: h.Clock.Now}
	v.Seal(&c, &oauth2.Token{AccessToken: token, TokenType: "bearer"})
	saved, _, err := h.Store().SaveSharedConnection(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return saved
}

// A member's agent gets the shared account's token, never the member's own, and the record of
// the handout names both the member and the shared account.
func TestSharedExchange(t *testing.T) {
	h := sharedHarness(t, true)
	// Alice's own account, allowed for the agent, is not what an Organisation connector hands out.
	h.Allow(stack.AliceEmail, stack.Agent, h.ConnectDirectly(stack.AliceEmail, "2002", "alice-gh", "gho_alice"))
	a := h.AgentExchange(h.AccessToken(stack.AliceEmail, stack.Agent))
	if a.Status != 200 || a.Str("access_token") != "gho_shared" {
		t.Fatalf("exchange: %d %s", a.Status, a.Raw)
	}
	rec := h.Trail(events.SharedTokenExchanged)[events.SharedTokenExchanged]
	if rec.Target != h.PersonID(stack.AliceEmail) || rec.Details["shared_account"] != "acme-bot" ||
		rec.Details["shared_account_id"] != "svc-1" || rec.Details["agent"] != stack.Agent || rec.ClientID != stack.Agent {
		t.Fatalf("handout record %+v", rec)
	}
	if n := h.CountRows("links"); n != 0 {
		t.Fatalf("%d links made", n)
	}
}

// Attacks on the shared account: every one gets a refusal in OAuth's shape and no token, and
// none gets a connect link (a person cannot connect the shared account).
func TestSharedExchangeRefusals(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, h *stack.Stack) (client, clientSecret, subject string)
		connect bool
		code    string
		reason  string // the audit record's reason
	}{
		{"declared client the Project does not name", func(t *testing.T, h *stack.Stack) (string, string, string) {
			// GitHub tools lists the connector in its own spec.connectors, as any client that
			// exchanges does; only the Project's list admits a client to the shared account.
			return stack.MCP, stack.MCPSecret, h.AccessToken(stack.AliceEmail, stack.Agent, stack.MCPResource)
		}, true, "unauthorized_client", "shared_not_permitted"},
		{"self-registered client the Project's list names", func(t *testing.T, h *stack.Stack) (string, string, string) {
			h.Connector.SharedClients = append(h.Connector.SharedClients, stack.Registered, "default/"+stack.Registered)
			return stack.Registered, stack.RegisteredSecret, h.AccessToken(stack.AliceEmail, stack.Registered)
		}, true, "unauthorized_client", "client_not_permitted"},
		{"person whose access an administrator ended", func(t *testing.T, h *stack.Stack) (string, string, string) {
			tok := h.AccessToken(stack.AliceEmail, stack.Agent)
			if _, err := h.Store().EndPersonAccess(context.Background(), stack.ProjectKey, h.PersonID(stack.AliceEmail), h.Clock.Now()); err != nil {
				t.Fatal(err)
			}
			return stack.Agent, stack.AgentSecret, tok
		}, true, "invalid_grant", "subject_token_invalid"},
		{"person removed from the password file", func(t *testing.T, h *stack.Stack) (string, string, string) {
			tok := h.AccessToken(stack.AliceEmail, stack.Agent)
			delete(h.Project.SignIn.Passwords, stack.AliceEmail)
			return stack.Agent, stack.AgentSecret, tok
		}, true, "invalid_grant", "subject_token_invalid"},
		{"DPoP-bound token without its key", func(t *testing.T, h *stack.Stack) (string, string, string) {
			tok := secret.New(secret.PrefixAccessToken)
			now := h.Clock.Now()
			if err := h.Store().CreateTokens(context.Background(), store.Token{
				Hash: secret.Hash(tok), Kind: store.AccessToken, Project: stack.ProjectKey, ClientID: stack.Agent,
				Subject: h.PersonID(stack.AliceEmail), FamilyID: "f-dpop", JKT: "the-agents-key-thumbprint",
				AuthTime: now, IssuedAt: now, ExpiresAt: now.Add(time.Hour),
			}); err != nil {
				t.Fatal(err)
			}
			return stack.Agent, stack.AgentSecret, tok
		}, true, "invalid_grant", "dpop_key_mismatch"},
		{"no shared account connected", func(t *testing.T, h *stack.Stack) (string, string, string) {
			// Alice's own connection is no stand-in for the organisation's.
			h.Allow(stack.AliceEmail, stack.Agent, h.ConnectDirectly(stack.AliceEmail, "2002", "alice-gh", "gho_alice"))
			return stack.Agent, stack.AgentSecret, h.AccessToken(stack.AliceEmail, stack.Agent)
		}, false, "invalid_grant", "shared_connection_missing"},
		{"shared account broken", func(t *testing.T, h *stack.Stack) (string, string, string) {
			saveShared(t, h, "svc-1", "acme-bot", "gho_shared", store.ConnectionRevokedUpstream)
			return stack.Agent, stack.AgentSecret, h.AccessToken(stack.AliceEmail, stack.Agent)
		}, false, "invalid_grant", "shared_connection_broken"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := sharedHarness(t, tc.connect)
			client, sec, subject := tc.setup(t, h)
			a := h.ExchangeAs(client, sec, subject, stack.Audience)
			if a.Status/100 != 4 || a.Str("error") != tc.code || a.Str("access_token") != "" {
				t.Fatalf("got %d %s, want %s", a.Status, a.Raw, tc.code)
			}
			if _, ok := a.Body["connect_uri"]; ok {
				t.Errorf("a refusal for a shared account carries a link: %s", a.Raw)
			}
			if n := h.CountRows("links"); n != 0 {
				t.Errorf("%d links made", n)
			}
			for _, r := range h.Audit() {
				if r.Action == events.SharedTokenExchanged || r.Action == events.TokenExchanged {
					t.Fatalf("a handout was recorded: %+v", r)
				}
			}
			rec := h.Trail(events.TokenExchangeRefused)[events.TokenExchangeRefused]
			if rec.Reason != tc.reason {
				t.Errorf("refusal recorded with reason %q, want %q", rec.Reason, tc.reason)
			}
		})
	}
}

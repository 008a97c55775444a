package exchange_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/authzdetails"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
)

const (
	repoAPI = "https://api.github.com/repos/acme/api"
	repoWeb = "https://api.github.com/repos/acme/web"
)

// detailsHarness is the links harness whose Project declares github_repository, governing its
// GitHub Connector, and payment_initiation, governing nothing.
func detailsHarness(t *testing.T) *stack.Stack {
	t.Helper()
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	types, err := authzdetails.NewTypes([]authzdetails.Type{
		{Name: "github_repository", Label: "GitHub repository", Connector: h.Connector.Key,
			Actions: []string{"read", "write"}, RequireLocations: true, LocationPrefixes: []string{"https://api.github.com/repos/acme/"}},
		{Name: "payment_initiation", Actions: []string{"initiate"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	h.Project.AuthorizationDetails = types
	conn := h.ConnectDirectly(stack.AliceEmail, "2002", "alice-gh", "gho_alice")
	h.Allow(stack.AliceEmail, stack.Agent, conn)
	return h
}

// tokenWithDetails issues alice's token to the agent carrying details (canonical JSON), living
// life, as a code redemption of an approved request would.
func tokenWithDetails(t *testing.T, h *stack.Stack, details string, life time.Duration) string {
	t.Helper()
	tok := secret.New(secret.PrefixAccessToken)
	now := h.Clock.Now()
	if err := h.Store().CreateTokens(context.Background(), store.Token{
		Hash: secret.Hash(tok), Kind: store.AccessToken, Project: stack.ProjectKey, ClientID: stack.Agent,
		Subject: h.PersonID(stack.AliceEmail), FamilyID: secret.New(""), AuthTime: now, IssuedAt: now,
		ExpiresAt: now.Add(life), AuthorizationDetails: details,
	}); err != nil {
		t.Fatal(err)
	}
	return tok
}

func ghDetail(actions string, locations ...string) string {
	return `{"type":"github_repository","locations":["` + strings.Join(locations, `","`) + `"],"actions":["` +
		strings.ReplaceAll(actions, ",", `","`) + `"]}`
}

// TestExchangeStaysInsideApprovedDetails: alice approved read on acme/api for the agent. The
// agent's exchange for GitHub succeeds within that, carries it in the answer, and ends no later
// than the approval; asking for write, another repository, a type nobody declared, or details
// for a token that carries none is refused with invalid_authorization_details and audited.
func TestExchangeStaysInsideApprovedDetails(t *testing.T) {
	h := detailsHarness(t)
	approved := "[" + ghDetail("read", repoAPI) + "]"
	subject := tokenWithDetails(t, h, approved, 20*time.Minute)

	a := h.AgentExchange(subject)
	if a.Status != 200 || a.Str("access_token") != "gho_alice" {
		t.Fatalf("exchange within the approval: %d %s", a.Status, a.Raw)
	}
	if got := a.Str("expires_in"); got != "1200" {
		t.Errorf("expires_in = %q, want 1200: the approval ends with the subject token", got)
	}
	if !strings.Contains(string(a.Raw), `"authorization_details":`+approved) {
		t.Errorf("answer does not carry the approved details: %s", a.Raw)
	}
	exchangeWith := func(details string) stack.Answer {
		return h.ExchangeForm(stack.Agent, stack.AgentSecret, form(subject, func(f url.Values) { f.Set("authorization_details", details) }))
	}
	if a := exchangeWith("[" + ghDetail("read", repoAPI) + "]"); a.Status != 200 {
		t.Fatalf("exchange naming exactly the approval: %d %s", a.Status, a.Raw)
	}
	for name, details := range map[string]string{
		"widening: write":              "[" + ghDetail("read,write", repoAPI) + "]",
		"widening: another repository": "[" + ghDetail("read", repoWeb) + "]",
		"widening: dropping locations": `[{"type":"github_repository","actions":["read"]}]`,
		"type the project lacks":       `[{"type":"account_information","actions":["read"]}]`,
		"another connector's type":     `[{"type":"payment_initiation","actions":["initiate"]}]`,
		"not JSON":                     `[{"type":`,
	} {
		if a := exchangeWith(details); a.Status != 400 || a.Str("error") != "invalid_authorization_details" || a.Str("access_token") != "" {
			t.Errorf("%s: %d %s, want invalid_authorization_details", name, a.Status, a.Raw)
		}
	}
	refused := 0
	for _, r := range h.Audit() {
		if r.Action == events.TokenExchangeRefused && r.Reason == "authorization_details_exceeded" {
			refused++
		}
	}
	if refused != 6 {
		t.Errorf("%d refusals audited as authorization_details_exceeded, want 6", refused)
	}

	// A token without details for GitHub exchanges as before, but cannot claim details it
	// was never given.
	plain := tokenWithDetails(t, h, `[{"type":"payment_initiation","actions":["initiate"]}]`, time.Hour)
	if a := h.AgentExchange(plain); a.Status != 200 || a.Body["authorization_details"] != nil {
		t.Fatalf("token without GitHub details: %d %s", a.Status, a.Raw)
	}
	if a := h.ExchangeForm(stack.Agent, stack.AgentSecret, form(plain, func(f url.Values) {
		f.Set("authorization_details", "["+ghDetail("read", repoAPI)+"]")
	})); a.Str("error") != "invalid_authorization_details" {
		t.Fatalf("details asked with a token that carries none: %s", a.Raw)
	}
}

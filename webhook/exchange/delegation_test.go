package exchange_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/exchange"
)

// delegated stores a live access token of alice issued to holder for the MCP server's resource,
// carrying act and may_act as an issuance would (oauth.Mint), and returns it.
func delegated(h *stack.Stack, holder string, act, mayAct *store.Actor) string {
	h.T.Helper()
	tok := secret.New(secret.PrefixAccessToken)
	now := h.Clock.Now()
	if err := h.Store().CreateTokens(context.Background(), store.Token{
		Hash: secret.Hash(tok), Kind: store.AccessToken, Project: stack.ProjectKey, ClientID: holder,
		Subject: h.PersonID(stack.AliceEmail), Scopes: []string{"openid"}, Audience: []string{stack.MCPResource},
		FamilyID: secret.New(""), AuthTime: now, IssuedAt: now, ExpiresAt: now.Add(time.Hour), Act: act, MayAct: mayAct,
	}); err != nil {
		h.T.Fatal(err)
	}
	return tok
}

// clientToken stores a live client_credentials token of client.
func clientToken(h *stack.Stack, client string) string {
	h.T.Helper()
	tok := secret.New(secret.PrefixAccessToken)
	now := h.Clock.Now()
	if err := h.Store().CreateTokens(context.Background(), store.Token{
		Hash: secret.Hash(tok), Kind: store.AccessToken, Project: stack.ProjectKey, ClientID: client,
		FamilyID: secret.New(""), IssuedAt: now, ExpiresAt: now.Add(time.Hour),
	}); err != nil {
		h.T.Fatal(err)
	}
	return tok
}

func withActor(subject, actor string) url.Values {
	return form(subject, func(f url.Values) {
		f.Set("actor_token", actor)
		f.Set("actor_token_type", exchange.TokenTypeAccessToken)
	})
}

// lastExchange is the newest token-exchange audit record (handed out or refused).
func lastExchange(t *testing.T, h *stack.Stack) store.AuditRecord {
	t.Helper()
	for _, r := range h.Audit() { // newest first
		if r.Action == events.TokenExchanged || r.Action == events.TokenExchangeRefused {
			return r
		}
	}
	t.Fatal("no token exchange record")
	return store.AuditRecord{}
}

func actors(t *testing.T, h *stack.Stack, conn store.Connection) []store.ConnectionActor {
	t.Helper()
	got, err := h.Store().ListConnectionActors(context.Background(), stack.ProjectKey, []string{conn.ID})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// An MCP server exchanging its caller's token acts for the person through the caller: the
// handout's audit record says so (act "github-tools repo-helper"), and so does the connection,
// beside the caller's own use of it. An actor token of the MCP server's own confirms the
// client authentication.
func TestDelegationChainRecorded(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	conn := h.ConnectDirectly(stack.AliceEmail, "2002", "alice-gh", "gho_alice")
	h.Allow(stack.AliceEmail, stack.Agent, conn)
	subject := delegated(h, stack.Agent, &store.Actor{Sub: stack.Agent, ClientName: stack.AgentName}, nil)

	// Introspection shows the chain stored with the token, to the resource server it is for.
	intro := introspect(t, h, stack.MCP, stack.MCPSecret, subject)
	if act, _ := intro["act"].(map[string]any); act["sub"] != stack.Agent || act["client_name"] != stack.AgentName {
		t.Fatalf("introspection act: %v", intro)
	}
	if a := h.AgentExchange(subject); a.Status != 200 {
		t.Fatalf("the holder's own exchange: %d %s", a.Status, a.Raw)
	}
	if rec := lastExchange(t, h); rec.Details["act"] != stack.Agent {
		t.Fatalf("holder's exchange act %q, want %q", rec.Details["act"], stack.Agent)
	}
	h.Clock.Advance(time.Minute)
	a := h.ExchangeForm(stack.MCP, stack.MCPSecret, withActor(subject, clientToken(h, stack.MCP)))
	if a.Status != 200 || a.Str("access_token") != "gho_alice" {
		t.Fatalf("MCP server's exchange with its own actor token: %d %s", a.Status, a.Raw)
	}
	rec := lastExchange(t, h)
	if rec.Action != events.TokenExchanged || rec.Details["act"] != stack.MCP+" "+stack.Agent || rec.ClientID != stack.MCP ||
		rec.Target != h.PersonID(stack.AliceEmail) {
		t.Fatalf("handout record %+v, want act %q by %s for alice", rec, stack.MCP+" "+stack.Agent, stack.MCP)
	}
	got := actors(t, h, conn)
	if len(got) != 2 || got[0].ClientID != stack.MCP || got[0].Via != stack.Agent || !got[0].LastUsedAt.Equal(h.Clock.Now()) ||
		got[1].ClientID != stack.Agent || got[1].Via != "" {
		t.Fatalf("connection actors %+v", got)
	}
	// A replica writes the same actor at most once a minute: a later use past that moves its time.
	first := h.Clock.Now()
	h.Clock.Advance(30 * time.Second)
	h.ExchangeAs(stack.MCP, stack.MCPSecret, subject, stack.Audience)
	if got := actors(t, h, conn); !got[0].LastUsedAt.Equal(first) {
		t.Fatalf("written again within the minute: %+v", got[0])
	}
	h.Clock.Advance(time.Minute)
	h.ExchangeAs(stack.MCP, stack.MCPSecret, subject, stack.Audience)
	if got := actors(t, h, conn); !got[0].LastUsedAt.Equal(h.Clock.Now()) {
		t.Fatalf("a use past the minute not recorded: %+v", got[0])
	}
}

// Attacks on the actor token: another client's token (the agent's own, or a person's token
// issued to another client), a refresh-looking or unknown value, a revoked token of the
// requester. Each is invalid_request (RFC 8693 §2.2.2), nothing is handed out and no actor is
// recorded.
func TestActorTokenMustBeTheClientsOwn(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	conn := h.ConnectDirectly(stack.AliceEmail, "2002", "alice-gh", "gho_alice")
	h.Allow(stack.AliceEmail, stack.Agent, conn)
	subject := delegated(h, stack.Agent, &store.Actor{Sub: stack.Agent}, nil)
	revoked := clientToken(h, stack.MCP)
	if err := h.Store().RevokeToken(context.Background(), secret.Hash(revoked), h.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	for name, actor := range map[string]string{
		"the agent's client token":           clientToken(h, stack.Agent),
		"the person's token held by agent":   subject,
		"another client's person token":      h.AccessToken(stack.AliceEmail, stack.Copycat),
		"an unknown token":                   "lk_at_nonsense",
		"the MCP server's own revoked token": revoked,
	} {
		t.Run(name, func(t *testing.T) {
			a := h.ExchangeForm(stack.MCP, stack.MCPSecret, withActor(subject, actor))
			if a.Status != 400 || a.Str("error") != "invalid_request" || a.Str("access_token") != "" {
				t.Fatalf("got %d %s, want invalid_request", a.Status, a.Raw)
			}
			if rec := lastExchange(t, h); rec.Reason != "actor_token_invalid" {
				t.Fatalf("audit reason %q", rec.Reason)
			}
		})
	}
	if got := actors(t, h, conn); len(got) != 0 {
		t.Fatalf("a refused exchange recorded actors %+v", got)
	}
}

// may_act (RFC 8693 §4.4): a token whose may_act names one agent is exchanged by that agent and
// by its holder, and refused to every other client, even one its audience names.
func TestMayActLimitsWhoExchanges(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	conn := h.ConnectDirectly(stack.AliceEmail, "2002", "alice-gh", "gho_alice")
	h.Allow(stack.AliceEmail, stack.Agent, conn)
	forOther := delegated(h, stack.Agent, &store.Actor{Sub: stack.Agent}, &store.Actor{Sub: "lkc_other_server"})
	forMCP := delegated(h, stack.Agent, &store.Actor{Sub: stack.Agent}, &store.Actor{Sub: stack.MCP})

	a := h.ExchangeAs(stack.MCP, stack.MCPSecret, forOther, stack.Audience)
	if a.Status != 400 || a.Str("error") != "invalid_grant" || a.Str("connect_uri") != "" {
		t.Fatalf("a client may_act does not name: %d %s", a.Status, a.Raw)
	}
	if rec := lastExchange(t, h); rec.Reason != "may_act_mismatch" {
		t.Fatalf("audit reason %q", rec.Reason)
	}
	if a := h.AgentExchange(forOther); a.Status != 200 {
		t.Fatalf("the holder itself: %d %s", a.Status, a.Raw)
	}
	if a := h.ExchangeAs(stack.MCP, stack.MCPSecret, forMCP, stack.Audience); a.Status != 200 {
		t.Fatalf("the client may_act names: %d %s", a.Status, a.Raw)
	}
}

// A chain is bounded: an exchange that would make it longer than five agents is refused.
func TestActChainTooDeep(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	conn := h.ConnectDirectly(stack.AliceEmail, "2002", "alice-gh", "gho_alice")
	h.Allow(stack.AliceEmail, stack.Agent, conn)
	chain := func(n int) *store.Actor {
		a := &store.Actor{Sub: stack.Agent}
		for i := 1; i < n; i++ {
			a = &store.Actor{Sub: "lkc_hop" + string(rune('0'+i)), Act: a}
		}
		return a
	}
	if a := h.ExchangeAs(stack.MCP, stack.MCPSecret, delegated(h, stack.Agent, chain(4), nil), stack.Audience); a.Status != 200 {
		t.Fatalf("a fifth agent: %d %s", a.Status, a.Raw)
	}
	a := h.ExchangeAs(stack.MCP, stack.MCPSecret, delegated(h, stack.Agent, chain(5), nil), stack.Audience)
	if a.Status != 400 || a.Str("error") != "invalid_grant" {
		t.Fatalf("a sixth agent: %d %s", a.Status, a.Raw)
	}
	if rec := lastExchange(t, h); rec.Reason != "act_too_deep" {
		t.Fatalf("audit reason %q", rec.Reason)
	}
}

// An act or may_act written into a presented token counts for nothing: the chain is the one
// stored with the token. An unsigned JWT claiming to be the MCP server's own token with a
// chain of its choosing is an unknown subject token.
func TestForgedActIgnored(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	conn := h.ConnectDirectly(stack.AliceEmail, "2002", "alice-gh", "gho_alice")
	h.Allow(stack.AliceEmail, stack.Agent, conn)
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	forged := enc(map[string]string{"alg": "none", "typ": "at+jwt"}) + "." + enc(map[string]any{
		"iss": h.Issuer, "sub": h.PersonID(stack.AliceEmail), "client_id": stack.Agent, "aud": stack.MCPResource,
		"exp": h.Clock.Now().Add(time.Hour).Unix(), "act": map[string]any{"sub": stack.Agent, "client_name": stack.AgentName},
		"may_act": map[string]any{"sub": stack.MCP},
	}) + "."
	if a := h.ExchangeAs(stack.MCP, stack.MCPSecret, forged, stack.Audience); a.Status != 400 || a.Str("error") != "invalid_grant" {
		t.Fatalf("forged token: %d %s", a.Status, a.Raw)
	}
	// A real token's stored may_act holds however its holder describes it elsewhere.
	genuine := delegated(h, stack.Agent, &store.Actor{Sub: stack.Agent}, &store.Actor{Sub: "lkc_other_server"})
	if a := h.ExchangeAs(stack.MCP, stack.MCPSecret, genuine, stack.Audience); a.Str("error") != "invalid_grant" {
		t.Fatalf("stored may_act not honoured: %d %s", a.Status, a.Raw)
	}
	if got := actors(t, h, conn); len(got) != 0 {
		t.Fatalf("actors recorded %+v", got)
	}
}

func introspect(t *testing.T, h *stack.Stack, client, clientSecret, token string) map[string]any {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.Issuer+"/introspect", strings.NewReader(url.Values{"token": {token}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(client), url.QueryEscape(clientSecret))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out["active"] != true {
		t.Fatalf("introspection: %d %v %v", resp.StatusCode, out, err)
	}
	return out
}

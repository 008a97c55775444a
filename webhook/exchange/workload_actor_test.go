package exchange_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/spiffe/go-spiffe/v2/bundle/jwtbundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/exchange"
	"latchkey.dev/latchkey/webhook/oauth"
)

const mcpWorkload = "spiffe://example.org/ns/tools/sa/github-tools"

// workloadMCP makes the MCP server a workload_identity client of a SPIFFE trust domain and
// returns a JWT-SVID signer for that domain.
func workloadMCP(t *testing.T, h *stack.Stack) func(sub string) string {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// JWT-SVIDs are checked on the wall clock too (go-spiffe): the server's clock starts there.
	if d := time.Since(h.Clock.Now()); d > 0 {
		h.Clock.Advance(d)
	}
	td := spiffeid.RequireTrustDomainFromString("example.org")
	mcp := *h.Project.Clients[stack.MCP]
	mcp.SecretHash, mcp.TokenEndpointAuthMethod = nil, "workload_identity"
	mcp.Workload = &config.Workload{SPIFFEID: mcpWorkload,
		SPIFFEBundle: jwtbundle.FromJWTAuthorities(td, map[string]crypto.PublicKey{"k1": key.Public()})}
	h.Project.Clients[stack.MCP] = &mcp
	return func(sub string) string {
		s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "k1"))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := jwt.Signed(s).Claims(jwt.Claims{Subject: sub, Audience: jwt.Audience{h.Issuer},
			Expiry: jwt.NewNumericDate(time.Now().Add(5 * time.Minute)), IssuedAt: jwt.NewNumericDate(time.Now())}).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
}

// exchangeAsWorkload posts a token exchange authenticated by a JWT-SVID, with an actor token.
func exchangeAsWorkload(t *testing.T, h *stack.Stack, svid, subject, actor, actorType string) stack.Answer {
	t.Helper()
	f := form(subject, func(f url.Values) {
		f.Set("client_id", stack.MCP)
		f.Set("client_assertion_type", oauth.SPIFFEAssertionType)
		f.Set("client_assertion", svid)
		f.Set("actor_token", actor)
		f.Set("actor_token_type", actorType)
	})
	resp, err := http.Post(h.Issuer+"/token", "application/x-www-form-urlencoded", strings.NewReader(f.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := stack.Answer{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	if err := json.Unmarshal(raw, &a.Body); err != nil {
		t.Fatalf("token endpoint answered %d with %q: %v", resp.StatusCode, raw, err)
	}
	return a
}

// A workload's own token as actor_token (type jwt): the MCP server, running as a SPIFFE
// workload, exchanges its caller's token and presents its JWT-SVID as the actor; the handout's
// record names the workload beside the chain of clients.
func TestWorkloadActorToken(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	conn := h.ConnectDirectly(stack.AliceEmail, "2002", "alice-gh", "gho_alice")
	h.Allow(stack.AliceEmail, stack.Agent, conn)
	svid := workloadMCP(t, h)
	subject := delegated(h, stack.Agent, &store.Actor{Sub: stack.Agent, ClientName: stack.AgentName}, nil)
	own := svid(mcpWorkload)
	a := exchangeAsWorkload(t, h, own, subject, own, exchange.TokenTypeJWT)
	if a.Status != 200 || a.Str("access_token") != "gho_alice" {
		t.Fatalf("exchange with the workload's own token as actor: %d %s", a.Status, a.Raw)
	}
	rec := lastExchange(t, h)
	if rec.Action != events.TokenExchanged || rec.Details["actor_workload"] != mcpWorkload || rec.Details["act"] != stack.MCP+" "+stack.Agent {
		t.Fatalf("handout record %+v, want actor_workload %q", rec.Details, mcpWorkload)
	}
}

// Attacks on a workload actor token: another workload's JWT-SVID (of the same trust domain), or
// a jwt actor token from a client that has no workload identity. Each is invalid_request and
// nothing is handed out.
func TestWorkloadActorTokenMustBeTheClientsOwn(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	conn := h.ConnectDirectly(stack.AliceEmail, "2002", "alice-gh", "gho_alice")
	h.Allow(stack.AliceEmail, stack.Agent, conn)
	svid := workloadMCP(t, h)
	subject := delegated(h, stack.Agent, &store.Actor{Sub: stack.Agent}, nil)

	a := exchangeAsWorkload(t, h, svid(mcpWorkload), subject, svid("spiffe://example.org/ns/tools/sa/other"), exchange.TokenTypeJWT)
	if a.Status != 400 || a.Str("error") != "invalid_request" || a.Str("access_token") != "" {
		t.Fatalf("another workload's actor token: %d %s", a.Status, a.Raw)
	}
	a = h.ExchangeForm(stack.Agent, stack.AgentSecret, form(subject, func(f url.Values) {
		f.Set("actor_token", svid(mcpWorkload))
		f.Set("actor_token_type", exchange.TokenTypeJWT)
	}))
	if a.Status != 400 || a.Str("error") != "invalid_request" || a.Str("access_token") != "" {
		t.Fatalf("a jwt actor token from a client without a workload: %d %s", a.Status, a.Raw)
	}
	if rec := lastExchange(t, h); rec.Reason != "actor_token_invalid" {
		t.Fatalf("record reason %q", rec.Reason)
	}
}

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/auth/extauth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"

	"latchkey.dev/latchkey/examples/repohelper"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/netguard"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	latchkey "latchkey.dev/latchkey/mcp"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/exchange"
	"latchkey.dev/latchkey/webhook/idjag"
)

// Enterprise-Managed Authorization (docs/enterprise-idjag.md) in front of Repo Helper. A second
// Project on the same Latchkey, corp/sso, is the company's identity provider: people sign in
// there, and its "chat-agent" client may exchange their ID token for an ID-JAG naming Repo
// Helper's Project (team/demo) as audience. team/demo knows the agent as "enterprise-agent", a
// declared client with the JWT bearer grant, and trusts corp/sso's ID-JAGs for the people of
// its own domain. The MCP client is the Go SDK's auth/extauth EnterpriseHandler.
const (
	ssoKey          = "corp/sso"
	ssoClient       = "chat-agent"
	ssoSecret       = "lk_cs_chat-agent-secret-for-tests-0123456789abcdef"
	entClient       = "enterprise-agent"
	entClientSecret = "lk_cs_enterprise-agent-secret-for-tests-0123456789"
	partnerIDP      = "https://idp.partner.example"
)

// withIDP adds corp/sso to the stack and declares the enterprise agent at team/demo; trusted
// says whether team/demo lists corp/sso among the issuers whose ID-JAGs it redeems. It returns
// corp/sso's issuer.
func (s *mcpStack) withIDP(t *testing.T, trusted bool) string {
	t.Helper()
	idp := s.Front.URL + "/" + ssoKey
	// ID tokens and ID-JAGs are signed with the Project's key, published at its jwks.json.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sso := &config.Project{
		Key: ssoKey, Namespace: "corp", Name: "sso", DisplayName: "Acme SSO", Issuer: idp,
		SignIn:      s.Project.SignIn, // the company's people, Alice among them
		Lifetimes:   config.DefaultLifetimes(),
		SigningKeys: []config.SigningKey{{ID: "sso-1", Algorithm: "ES256", Private: key}},
		Clients: map[string]*config.Client{ssoClient: {
			ID: ssoClient, SecretHash: secret.Hash(ssoSecret), Name: mcpAgentName,
			RedirectURIs: []string{s.AgentRedirect}, Scopes: []string{"openid", "email"},
			GrantTypes:              []string{"authorization_code", exchange.GrantType},
			TokenEndpointAuthMethod: "client_secret_basic",
		}},
		Redirects: config.DefaultRedirectRules(),
		IdentityAssertions: config.IdentityAssertions{Audiences: map[string]*config.AssertionAudience{s.Issuer: {
			Issuer:    s.Issuer,
			Clients:   map[string]config.AssertionClient{ssoClient: {ResourceClientID: entClient}},
			Resources: []string{s.MCPURL},
		}}},
	}

	p := *s.Project
	p.Clients = maps.Clone(p.Clients)
	p.Clients[entClient] = &config.Client{
		ID: entClient, SecretHash: secret.Hash(entClientSecret), Name: mcpAgentName,
		RedirectURIs: []string{"http://127.0.0.1/callback"}, GrantTypes: []string{idjag.GrantJWTBearer},
		TokenEndpointAuthMethod: "client_secret_post",
	}
	// team/demo trusts another identity provider in any case, for the same client, so that an
	// untrusted corp/sso is refused by name and not because nothing is trusted.
	partnerKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p.IdentityAssertions.Issuers = map[string]*config.AssertionIssuer{partnerIDP: {
		Issuer: partnerIDP, Clients: []string{entClient}, Subject: config.AssertionSubjectSub,
		JWKS: &jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &partnerKey.PublicKey, KeyID: "partner-1", Algorithm: "ES256", Use: "sig"}}},
	}}
	if trusted {
		p.IdentityAssertions.Issuers[idp] = &config.AssertionIssuer{
			Issuer: idp, JWKSURI: idp + "/jwks.json", Clients: []string{entClient},
			// Alice of the ID-JAG is the Alice who signs in to team/demo with her password.
			Subject: config.AssertionSubjectEmail, EmailDomains: []string{"example.com"},
			AllowedNetworks: netguard.Loopback,
		}
	}
	s.Project = &p
	s.Holder().Store(&config.Snapshot{Projects: map[string]*config.Project{p.Key: &p, ssoKey: sso}, Version: 10})
	return idp
}

// audited returns the audit record of action in project, or fails the test.
func (s *mcpStack) audited(t *testing.T, project, action string) store.AuditRecord {
	t.Helper()
	recs, err := s.Store().ListAudit(t.Context(), project, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Action == action {
			return r
		}
	}
	t.Errorf("no %s audit record in %s", action, project)
	return store.AuditRecord{}
}

// visits records every address a browser loads.
type visits struct {
	mu   sync.Mutex
	urls []string
	next http.RoundTripper
}

func (v *visits) RoundTrip(r *http.Request) (*http.Response, error) {
	v.mu.Lock()
	v.urls = append(v.urls, r.URL.String())
	v.mu.Unlock()
	return v.next.RoundTrip(r)
}

func (v *visits) list() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.urls)
}

// enterpriseClient connects the Go SDK's MCP client to Repo Helper with the EnterpriseHandler:
// on Repo Helper's 401 it signs the person in at corp/sso (OpenID Connect, in their browser),
// exchanges the ID token there for an ID-JAG, and redeems that at team/demo. It returns the
// session, or the error Connect gave.
func (s *mcpStack) enterpriseClient(t *testing.T, pp *mcpPerson, idp string, elicit func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error)) (*sdk.ClientSession, error) {
	t.Helper()
	signIn := func(ctx context.Context) (*oauth2.Token, error) {
		return extauth.PerformOIDCLogin(ctx, &extauth.OIDCLoginConfig{
			IssuerURL:   idp,
			Credentials: &oauthex.ClientCredentials{ClientID: ssoClient, ClientSecretAuth: &oauthex.ClientSecretAuth{ClientSecret: ssoSecret}},
			RedirectURL: s.AgentRedirect,
			Scopes:      []string{"openid", "email"},
		}, func(_ context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
			final := pp.walk(t, args.URL)
			loc, err := url.Parse(final.Location())
			if err != nil || !strings.HasPrefix(final.Location(), s.AgentRedirect) {
				return nil, errors.New("the sign-in at the identity provider did not come back to the agent: " + final.Text())
			}
			return &auth.AuthorizationResult{Code: loc.Query().Get("code"), State: loc.Query().Get("state")}, nil
		})
	}
	h, err := extauth.NewEnterpriseHandler(&extauth.EnterpriseHandlerConfig{
		IdPIssuerURL:     idp,
		IdPCredentials:   &oauthex.ClientCredentials{ClientID: ssoClient, ClientSecretAuth: &oauthex.ClientSecretAuth{ClientSecret: ssoSecret}},
		MCPAuthServerURL: s.Issuer,
		MCPResourceURI:   s.MCPURL,
		MCPCredentials:   &oauthex.ClientCredentials{ClientID: entClient, ClientSecretAuth: &oauthex.ClientSecretAuth{ClientSecret: entClientSecret}},
		IDTokenFetcher:   signIn,
	})
	if err != nil {
		t.Fatal(err)
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "chat-agent", Version: "1.0.0"}, &sdk.ClientOptions{
		Capabilities:       &sdk.ClientCapabilities{Elicitation: &sdk.ElicitationCapabilities{URL: &sdk.URLElicitationCapabilities{}}},
		ElicitationHandler: elicit,
	})
	cs, err := c.Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: s.MCPURL, OAuthHandler: h},
		&sdk.ClientSessionOptions{ProtocolVersion: latchkey.ProtocolInputRequired})
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

// The company's agent reaches Repo Helper for Alice without her ever being asked at Repo
// Helper's authorization server: she signs in at the company's identity provider, and the
// client does the rest. It lists the tools and calls one as Alice; the connect link Repo Helper
// relays is hers (GitHub is connected once, as for any client), and the retried call lists her
// repositories.
func TestMCPEnterpriseManagedAuthorization(t *testing.T) {
	s := newMCPStack(t)
	idp := s.withIDP(t, true)
	alice := s.alice()
	seen := &visits{next: http.DefaultTransport}
	alice.B.C.Transport = seen

	shown := make(chan elicited)
	cs, err := s.enterpriseClient(t, alice, idp, personInTheLoop(shown))
	if err != nil {
		t.Fatalf("connecting with enterprise-managed authorization: %v", err)
	}
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatalf("ListTools: %v", err)
	}
	if !slices.ContainsFunc(tools.Tools, func(tl *sdk.Tool) bool { return tl.Name == repohelper.ToolName }) {
		t.Fatalf("tools = %+v, want %s", tools.Tools, repohelper.ToolName)
	}
	for _, u := range seen.list() {
		if !strings.HasPrefix(u, idp+"/") {
			t.Errorf("before any tool call, the person's browser loaded %s: only the identity provider's sign-in was expected", u)
		}
	}

	res, links, err := callAsPerson(t, cs, shown, func(p *sdk.ElicitParams) {
		wantDone(t, alice.OpenLink(t, p.URL))
	})
	wantRepos(t, res, err)
	if len(links) != 1 {
		t.Errorf("the client showed %d links, want 1 (connecting GitHub)", len(links))
	}
	wantAliceConnected(t, s)
	for _, u := range seen.list() {
		if strings.HasPrefix(u, s.Issuer+"/authorize") || strings.HasPrefix(u, s.Issuer+"/par") {
			t.Errorf("the person was sent to Repo Helper's authorization server: %s", u)
		}
	}

	// Repo Helper's Project redeemed the company's ID-JAG, and the company's Project audited
	// issuing it.
	if r := s.audited(t, stack.ProjectKey, idjag.ActionRedeemed); r.ClientID != entClient || r.Target != s.Person(stack.AliceEmail).ID {
		t.Errorf("redemption audited as %+v, want %s acting for alice", r, entClient)
	}
	s.audited(t, ssoKey, idjag.ActionIssued)
}

// An identity provider team/demo does not trust gets the agent nothing there: the SDK's client
// signs Alice in at corp/sso and gets an ID-JAG, but team/demo refuses to redeem it, the client
// has no token, and Repo Helper answers 401 to the MCP call.
func TestAttackMCPEnterpriseUntrustedIdP(t *testing.T) {
	s := newMCPStack(t)
	idp := s.withIDP(t, false)
	alice := s.alice()

	cs, err := s.enterpriseClient(t, alice, idp, nil)
	if err == nil {
		cs.Close()
		t.Fatal("an MCP client connected to Repo Helper with an ID-JAG from an identity provider its Project does not trust")
	}
	if !strings.Contains(err.Error(), "JWT bearer grant failed") || !strings.Contains(err.Error(), "invalid_grant") ||
		!strings.Contains(err.Error(), "issuer is not trusted") {
		t.Errorf("Connect error = %v, want the JWT bearer grant refused with invalid_grant: issuer not trusted", err)
	}
	s.audited(t, stack.ProjectKey, idjag.ActionRefused)

	// What the client sends without a token is refused by Repo Helper.
	req, _ := http.NewRequest(http.MethodPost, s.MCPURL, strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"chat-agent","version":"1.0.0"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("initialize without a token: %d, want 401", resp.StatusCode)
	}
}

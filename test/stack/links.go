package stack

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/oauth2"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/webhook/exchange"
	"latchkey.dev/latchkey/webhook/links"
)

// The agents of the connect-link stories (Options.Links) besides Repo Helper.
const (
	// MCP is an MCP server that exchanges its callers' tokens; tokens for MCPResource are its.
	MCP         = "github-tools"
	MCPSecret   = "lk_cs_github-tools-secret-for-tests-0123456789abcd"
	MCPResource = "https://mcp.example.test/mcp"

	// Copycat is a declared client that may not exchange for any connector.
	Copycat       = "copycat"
	CopycatSecret = "lk_cs_copycat-secret-for-tests-0123456789abcdefghij"

	// Registered is a dynamically registered client that asked for token exchange.
	Registered       = "dcr-client"
	RegisteredSecret = "lk_cs_dcr-client-secret-for-tests-0123456789abcdefg"
)

// setUpLinks adds Options.Links' clients, the "ops" sink and the security-event registry.
func (s *Stack) setUpLinks() {
	s.Registry = prometheus.NewRegistry()
	s.Sink = NewSink(s.T)
	gh := s.Connector.Key
	te := []string{exchange.GrantType}
	p := s.Project
	// Repo Helper of the link stories is declared without a scope list: it may ask for any of
	// the project's scopes (the step-up stories ask for more than the code flow's).
	p.Clients[Agent].Scopes = nil
	p.Clients[MCP] = &config.Client{
		ID: MCP, SecretHash: secret.Hash(MCPSecret), Name: "GitHub tools", GrantTypes: te,
		TokenEndpointAuthMethod: "client_secret_basic", Connectors: []string{gh}, Resources: []string{MCPResource},
	}
	p.Clients[Copycat] = &config.Client{
		ID: Copycat, SecretHash: secret.Hash(CopycatSecret), Name: "Copycat", GrantTypes: te,
		TokenEndpointAuthMethod: "client_secret_basic",
	}
	p.EventSinks = append(p.EventSinks, config.EventSink{Name: SinkName, URL: s.Sink.URL, HMACKey: []byte(SinkKey)})
	now := s.Clock.Now()
	if err := s.Admin.CreateClient(context.Background(), store.Client{
		Project: ProjectKey, ID: Registered, SecretHash: secret.Hash(RegisteredSecret), Name: AgentName,
		RedirectURIs: []string{"https://evil.example/cb"}, GrantTypes: []string{"authorization_code", exchange.GrantType},
		ResponseTypes: []string{"code"}, TokenEndpointAuthMethod: "client_secret_basic", CreatedAt: now, UpdatedAt: now,
	}); err != nil {
		s.T.Fatal(err)
	}
}

// ExchangeAs asks the token endpoint for the subject token's owner's token at audience,
// authenticating as client; the answer must be JSON.
func (s *Stack) ExchangeAs(client, clientSecret, subjectToken, audience string) Answer {
	s.T.Helper()
	return s.ExchangeForm(client, clientSecret, url.Values{
		"grant_type":           {exchange.GrantType},
		"subject_token":        {subjectToken},
		"subject_token_type":   {exchange.TokenTypeAccessToken},
		"requested_token_type": {exchange.TokenTypeAccessToken},
		"audience":             {audience},
	})
}

// ExchangeForm posts any form to the token endpoint with Basic client authentication; an
// answer that is not JSON fails the test.
func (s *Stack) ExchangeForm(client, clientSecret string, form url.Values) Answer {
	s.T.Helper()
	req, err := http.NewRequest(http.MethodPost, s.Issuer+"/token", strings.NewReader(form.Encode()))
	if err != nil {
		s.T.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(client), url.QueryEscape(clientSecret))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.T.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := Answer{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	if err := json.Unmarshal(raw, &a.Body); err != nil {
		s.T.Fatalf("token endpoint answered %d with %q: %v", resp.StatusCode, raw, err)
	}
	return a
}

// AgentExchange is Repo Helper exchanging the person's token (issued to it) for GitHub.
func (s *Stack) AgentExchange(subjectToken string) Answer {
	s.T.Helper()
	return s.ExchangeAs(Agent, AgentSecret, subjectToken, Audience)
}

// ConnectDirectly stores a working connection of the person to GitHub as the callback would,
// holding token (which the fake GitHub did not issue; for tests that only read it back).
func (s *Stack) ConnectDirectly(email, accountID, login, token string) store.Connection {
	s.T.Helper()
	now := s.Clock.Now()
	c := store.Connection{
		ID: secret.New("")[:22], Project: ProjectKey, Subject: s.PersonID(email), Connector: s.Connector.Key,
		AccountID: accountID, AccountName: login, Status: store.ConnectionActive, CreatedAt: now, UpdatedAt: now,
	}
	v := &upstream.Vault{Store: s.Admin, Keyring: s.Keyring, Now: s.Clock.Now}
	v.Seal(&c, &oauth2.Token{AccessToken: token, TokenType: "bearer"})
	saved, err := s.Admin.SaveConnection(context.Background(), c)
	if err != nil {
		s.T.Fatal(err)
	}
	return saved
}

// Allow lets agent use the connection, as the link page's Allow does.
func (s *Stack) Allow(email, agent string, conn store.Connection) {
	s.T.Helper()
	if err := s.Admin.AllowAgent(context.Background(), store.AgentPermission{
		Project: ProjectKey, Subject: s.PersonID(email), Connector: conn.Connector, ClientID: agent,
		ConnectionID: conn.ID, CreatedAt: s.Clock.Now(),
	}); err != nil {
		s.T.Fatal(err)
	}
}

// LinkPath turns a connect_uri into a path on Latchkey.
func (s *Stack) LinkPath(connectURI string) string {
	s.T.Helper()
	if !strings.HasPrefix(connectURI, s.Issuer+links.PathPrefix) {
		s.T.Fatalf("connect_uri %q is not under %s", connectURI, s.Issuer+links.PathPrefix)
	}
	return strings.TrimPrefix(connectURI, s.Front.URL)
}

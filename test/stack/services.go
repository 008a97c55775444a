package stack

import (
	"net/http/httptest"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/upstream/fakeoauth"
	"latchkey.dev/latchkey/webhook/exchange"
)

// FakeService is a running fake service (Options.Services) and its connector.
type FakeService struct {
	Fake      *fakeoauth.Server
	URL       string
	Connector *config.Connector
}

// ServicesAgent is the confidential client that exchanges tokens for every connector of the
// project, the Services' included.
const (
	ServicesAgent       = "agent"
	ServicesAgentSecret = "agent-secret-for-callback-tests-0123456789"
)

// startServices starts Options.Services, each with a connector of the same client id and
// secret as GitHub's, and lets ServicesAgent exchange for all connectors.
func (s *Stack) startServices(o Options) {
	s.Services = map[fakeoauth.Shape]*FakeService{}
	for _, shape := range o.Services {
		// The github preset's fake sits beside the fake GitHub the stack always has
		// (default/github, audience github, "GitHub"): its connector takes other names.
		name := string(shape)
		if shape == fakeoauth.GitHub {
			name = "github-preset"
		}
		key := "default/" + name
		cb := s.Issuer + config.CallbackPath("default", name)
		fake := fakeoauth.New(fakeoauth.Options{
			Shape: shape, ClientID: GitHubClientID, ClientSecret: GitHubClientSecret, RedirectURI: cb, Now: s.Clock.Now,
			AccessTokenTTL: o.ServiceTokenTTL,
			Accounts: []fakeoauth.Account{
				{ID: "U0ALICE", Number: AliceGitHubID, Login: AliceLogin, Name: "Alice", Email: AliceEmail},
				{ID: "U0MALLORY", Number: MalloryGitHubID, Login: MalloryLogin, Name: "Mallory", Email: MalloryEmail},
			},
		})
		srv := httptest.NewServer(fake)
		s.T.Cleanup(srv.Close)
		sv := &FakeService{Fake: fake, URL: srv.URL, Connector: fake.Connector(srv.URL, key, cb)}
		if shape == fakeoauth.GitHub {
			sv.Connector.Audience, sv.Connector.DisplayName = name, "GitHub (preset)"
		}
		s.Services[shape] = sv
		s.Project.Connectors[key] = sv.Connector
		s.Project.ConnectorsByAudience[sv.Connector.Audience] = sv.Connector
	}
	if len(o.Services) == 0 {
		return
	}
	agent := &config.Client{
		ID: ServicesAgent, SecretHash: secret.Hash(ServicesAgentSecret), Name: "Agent",
		RedirectURIs: []string{"http://127.0.0.1/agent"},
		GrantTypes:   []string{"authorization_code", exchange.GrantType}, Scopes: []string{"openid"},
		TokenEndpointAuthMethod: "client_secret_basic",
	}
	for key := range s.Project.Connectors {
		agent.Connectors = append(agent.Connectors, key)
	}
	s.Project.Clients[ServicesAgent] = agent
}

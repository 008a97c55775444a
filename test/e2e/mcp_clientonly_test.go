package e2e

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	latchkey "latchkey.dev/latchkey/mcp"
	lkstack "latchkey.dev/latchkey/test/stack"
)

// Client-only tokens against a real Latchkey (test/stack: webhook.New on SQLite, in process),
// introspected at its real endpoint: a token a client got for itself with client_credentials,
// even one an administrator let the client get for this very resource, never passes as a
// person, unless the server's owner opts in with AllowClientOnlyTokens. It lives here rather than
// in the mcp module, which cannot import Latchkey's internal packages; the module's own tests
// cover the same rule against a fake introspection endpoint.
func TestClientOnlyTokensAtLatchkey(t *testing.T) {
	const resource = "https://mcp.example.com/mcp"
	s := lkstack.New(t, lkstack.Options{DSN: "sqlite:" + filepath.Join(t.TempDir(), "latchkey.db")})
	// The SDK's middleware reads token expiry on the wall clock.
	s.Clock.Advance(time.Since(s.Clock.Now()))
	// The administrator lists the MCP server among the service's resources, so Latchkey issues
	// the service a client_credentials token for it.
	s.Project.Clients[lkstack.Service].Resources = []string{resource}

	person := personToken(t, s, resource)
	a := s.MustPost("/token", url.Values{"grant_type": {"client_credentials"}, "resource": {resource}}, lkstack.Service, lkstack.ServiceSecret)
	machine := a.Str("access_token")
	if a.Status != http.StatusOK || machine == "" {
		t.Fatalf("client_credentials for the declared resource: %d %s", a.Status, a.Raw)
	}

	newRS := func(allow bool) *latchkey.ResourceServer {
		return &latchkey.ResourceServer{
			Resource: resource, AuthorizationServer: s.Issuer,
			ClientID: lkstack.Agent, ClientSecret: lkstack.AgentSecret,
			AllowClientOnlyTokens: allow, Now: s.Clock.Now,
		}
	}

	t.Run("by default", func(t *testing.T) {
		rs := newRS(false)
		info, err := rs.Verify(context.Background(), person, nil)
		if err != nil || info.UserID != s.PersonID(lkstack.AliceEmail) || info.Extra[latchkey.TokenInfoSubjectType] != latchkey.SubjectPerson {
			t.Fatalf("a person's token: %+v, %v", info, err)
		}
		if info, err := rs.Verify(context.Background(), machine, nil); !errors.Is(err, auth.ErrInvalidToken) || !strings.Contains(err.Error(), "names no person") {
			t.Fatalf("a client-only token: %+v, %v; want ErrInvalidToken naming no person", info, err)
		}

		// Over HTTP: 401 invalid_token saying why, and the MCP handler never runs.
		reached := false
		srv := httptest.NewServer(rs.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true })))
		defer srv.Close()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/mcp", strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+machine)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		challenge := resp.Header.Values("WWW-Authenticate")
		want := `Bearer resource_metadata="` + rs.MetadataURL() + `", error="invalid_token", error_description="the token names no person`
		if resp.StatusCode != http.StatusUnauthorized || reached || len(challenge) != 1 || !strings.HasPrefix(challenge[0], want) {
			t.Errorf("answer = %d (handler reached: %v) %q %q\nwant 401 with %q…", resp.StatusCode, reached, challenge, body, want)
		}
	})

	t.Run("AllowClientOnlyTokens", func(t *testing.T) {
		rs := newRS(true)
		info, err := rs.Verify(context.Background(), machine, nil)
		if err != nil {
			t.Fatalf("Verify: %v", err)
		}
		if info.UserID != "" || info.Extra[latchkey.TokenInfoSubjectType] != latchkey.SubjectClient || info.Extra[latchkey.TokenInfoClientID] != lkstack.Service {
			t.Errorf("token info = %+v, want no user, subject type client, client %s", info, lkstack.Service)
		}
		// A person's token is still a person's.
		if info, err := rs.Verify(context.Background(), person, nil); err != nil || info.UserID == "" || info.Extra[latchkey.TokenInfoSubjectType] != latchkey.SubjectPerson {
			t.Errorf("a person's token: %+v, %v", info, err)
		}
	})
}

// personToken stores an access token for Alice issued to Repo Helper for resource, as the code
// flow leaves one.
func personToken(t *testing.T, s *lkstack.Stack, resource string) string {
	t.Helper()
	tok := secret.New(secret.PrefixAccessToken)
	now := s.Clock.Now()
	if err := s.Admin.CreateTokens(context.Background(), store.Token{
		Hash: secret.Hash(tok), Kind: store.AccessToken, Project: lkstack.ProjectKey, ClientID: lkstack.Agent,
		Subject: s.PersonID(lkstack.AliceEmail), Scopes: []string{"read"}, Audience: []string{resource},
		FamilyID: secret.New(""), AuthTime: now, IssuedAt: now, ExpiresAt: now.Add(time.Hour),
	}); err != nil {
		t.Fatal(err)
	}
	return tok
}

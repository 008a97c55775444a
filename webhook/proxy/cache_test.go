package proxy_test

import (
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
)

// A withdrawn permission decides the very next proxied call, although the proxy keeps its
// decisions (docs/decisions/0082): each case lets Repo Helper make two calls for alice (the
// second decided from the cache), withdraws one thing the decision rests on the way the
// product does, and the next call is refused. On SQLite, on PostgreSQL, and on PostgreSQL with
// two replicas, where the withdrawal is made on the first and every call goes to the second.
func TestProxyWithdrawalDecidesTheNextCall(t *testing.T) {
	dbs := []struct {
		name     string
		dsn      func(t *testing.T) string
		replicas int
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "latchkey.db") }, 1},
		{"postgres", postgres, 1},
		{"postgres two replicas", postgres, 2},
	}
	cases := []struct {
		name     string
		withdraw func(t *testing.T, s *stack.Stack, st store.Store, token string, conn store.Connection)
		status   int
	}{
		{"access token revoked", func(t *testing.T, s *stack.Stack, st store.Store, token string, _ store.Connection) {
			must(t, st.RevokeToken(context.Background(), secret.Hash(token), s.Clock.Now()))
		}, http.StatusUnauthorized},
		{"consent withdrawn", func(t *testing.T, s *stack.Stack, st store.Store, _ string, _ store.Connection) {
			must(t, st.DeleteGrant(context.Background(), stack.ProjectKey, s.PersonID(stack.AliceEmail), stack.Agent, s.Clock.Now()))
		}, http.StatusUnauthorized},
		{"agent's permission withdrawn", func(t *testing.T, s *stack.Stack, st store.Store, _ string, c store.Connection) {
			must(t, st.DeletePermission(context.Background(), stack.ProjectKey, c.Subject, c.Connector, stack.Agent))
		}, http.StatusForbidden},
		{"account disconnected", func(t *testing.T, _ *stack.Stack, st store.Store, _ string, c store.Connection) {
			must(t, st.DeleteConnection(context.Background(), stack.ProjectKey, c.ID))
		}, http.StatusForbidden},
		{"connection needs reconnecting", func(t *testing.T, _ *stack.Stack, st store.Store, _ string, c store.Connection) {
			_, err := st.UpdateConnection(context.Background(), stack.ProjectKey, c.ID, func(c store.Connection) (store.Connection, error) {
				c.Status = store.ConnectionRevokedUpstream
				return c, nil
			})
			must(t, err)
		}, http.StatusForbidden},
		{"signed out everywhere", func(t *testing.T, s *stack.Stack, st store.Store, _ string, c store.Connection) {
			_, err := st.EndSignIns(context.Background(), stack.ProjectKey, c.Subject, s.Clock.Now())
			must(t, err)
		}, http.StatusUnauthorized},
		{"agent removed from the Project", func(_ *testing.T, s *stack.Stack, _ store.Store, _ string, _ store.Connection) {
			s.Update(func(p *config.Project) {
				p.Clients = maps.Clone(p.Clients)
				delete(p.Clients, stack.Agent)
			})
		}, http.StatusUnauthorized},
		{"person removed from the Project", func(_ *testing.T, s *stack.Stack, _ store.Store, _ string, _ store.Connection) {
			s.Update(func(p *config.Project) {
				p.SignIn.Passwords = maps.Clone(p.SignIn.Passwords)
				delete(p.SignIn.Passwords, stack.AliceEmail)
			})
		}, http.StatusForbidden},
		{"Connector's rules changed", func(_ *testing.T, s *stack.Stack, _ store.Store, _ string, _ store.Connection) {
			s.Update(func(p *config.Project) {
				c := *p.ConnectorsByAudience[stack.Audience]
				c.Proxy = &config.Proxy{BaseURL: c.Proxy.BaseURL, Rules: []config.ProxyRule{{Methods: []string{"GET"}, PathPrefix: "/orgs"}}}
				p.ConnectorsByAudience = maps.Clone(p.ConnectorsByAudience)
				p.ConnectorsByAudience[stack.Audience] = &c
			})
		}, http.StatusForbidden},
	}
	for _, db := range dbs {
		t.Run(db.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					s := stack.New(t, stack.Options{DSN: db.dsn(t), Replicas: db.replicas})
					api := &api{gh: s.GitHub}
					srv := httptest.NewServer(api)
					t.Cleanup(srv.Close)
					s.Connector.Proxy = &config.Proxy{BaseURL: srv.URL, Rules: []config.ProxyRule{{Methods: []string{"GET"}, PathPrefix: "/user"}}}
					conn := s.ConnectGitHub(stack.AliceEmail, stack.AliceLogin)
					must(t, s.Admin.UpsertGrant(context.Background(), store.Grant{
						Project: stack.ProjectKey, Subject: conn.Subject, ClientID: stack.Agent, Scopes: []string{"openid"},
						CreatedAt: s.Clock.Now(), UpdatedAt: s.Clock.Now(),
					}))
					alice := s.AccessToken(stack.AliceEmail, stack.Agent)
					last := len(s.Replicas) - 1
					for range 2 {
						if st := proxied(t, s, last, alice); st != http.StatusOK {
							t.Fatalf("before: %d, want 200", st)
						}
					}
					c.withdraw(t, s, s.Replicas[0].Store, alice, conn)
					if st := proxied(t, s, last, alice); st != c.status {
						t.Fatalf("the call after the withdrawal: %d, want %d", st, c.status)
					}
				})
			}
		})
	}
}

// proxied sends alice's GET /user through the proxy to one replica and returns the status.
func proxied(t *testing.T, s *stack.Stack, replica int, token string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.Issuer+"/proxy/github/user", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set(stack.ReplicaHeader, strconv.Itoa(replica))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func postgres(t *testing.T) string {
	if os.Getenv("LATCHKEY_TEST_POSTGRES_DSN") == "" {
		t.Skip("LATCHKEY_TEST_POSTGRES_DSN is not set")
	}
	return stack.PostgresDSN(t)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

package oauth_test

import (
	"net/http"
	"testing"

	"latchkey.dev/latchkey/test/stack"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
)

// Deleting an OAuthClient resource ends its tokens at once: introspection and userinfo refuse
// them as soon as the snapshot no longer holds the client, while other clients' tokens live on.
func TestDeletedDeclaredClientTokensDie(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{})
	const id, sec = config.DeclaredClientPrefix + "0123456789abcdef", "lk_cs_declared-client-secret-0123456789"
	h.Update(func(p *config.Project) {
		p.Clients = map[string]*config.Client{}
		for k, v := range h.Project.Clients {
			p.Clients[k] = v
		}
		p.Clients[id] = &config.Client{
			ID: id, SecretHash: secret.Hash(sec), Name: "Declared App",
			RedirectURIs: []string{"https://declared.example/cb"},
			GrantTypes:   []string{"authorization_code", "refresh_token"},
		}
	})
	declared := h.CodeFlowAs(h.Browser(), id, sec, "openid", "alice@example.com", stack.AlicePassword)
	other := h.CodeFlowAs(h.Browser(), "web", stack.WebSecret, "openid", "alice@example.com", stack.AlicePassword)
	at, otherAT := declared.Str("access_token"), other.Str("access_token")
	if !h.Active(at) || !h.Active(otherAT) {
		t.Fatal("tokens not active before the client was deleted")
	}

	h.Update(func(p *config.Project) {
		clients := map[string]*config.Client{}
		for k, v := range p.Clients {
			if k != id {
				clients[k] = v
			}
		}
		p.Clients = clients
	})
	if h.Active(at) {
		t.Error("the deleted client's access token is still active at introspection")
	}
	if r := h.Userinfo(at); r.Status != http.StatusUnauthorized {
		t.Errorf("userinfo with the deleted client's token: %d, want 401", r.Status)
	}
	if !h.Active(otherAT) {
		t.Error("another client's token died with it")
	}
}

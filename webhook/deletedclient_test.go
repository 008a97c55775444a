package webhook_test

import (
	"net/http"
	"testing"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
)

// Deleting an OAuthClient resource ends its tokens at once: introspection and userinfo refuse
// them as soon as the snapshot no longer holds the client, while other clients' tokens live on.
func TestDeletedDeclaredClientTokensDie(t *testing.T) {
	h := newHarness(t)
	const id, sec = config.DeclaredClientPrefix + "0123456789abcdef", "lk_cs_declared-client-secret-0123456789"
	h.update(func(p *config.Project) {
		p.Clients = map[string]*config.Client{}
		for k, v := range h.project.Clients {
			p.Clients[k] = v
		}
		p.Clients[id] = &config.Client{
			ID: id, SecretHash: secret.Hash(sec), Name: "Declared App",
			RedirectURIs: []string{"https://declared.example/cb"},
			GrantTypes:   []string{"authorization_code", "refresh_token"},
		}
	})
	declared := h.codeFlow(h.browser(), id, sec, "openid", "alice@example.com", alicePass)
	other := h.codeFlow(h.browser(), "web", webSecret, "openid", "alice@example.com", alicePass)
	at, otherAT := declared.str("access_token"), other.str("access_token")
	if !h.active(at) || !h.active(otherAT) {
		t.Fatal("tokens not active before the client was deleted")
	}

	h.update(func(p *config.Project) {
		clients := map[string]*config.Client{}
		for k, v := range p.Clients {
			if k != id {
				clients[k] = v
			}
		}
		p.Clients = clients
	})
	if h.active(at) {
		t.Error("the deleted client's access token is still active at introspection")
	}
	if r := h.userinfo(at); r.status != http.StatusUnauthorized {
		t.Errorf("userinfo with the deleted client's token: %d, want 401", r.status)
	}
	if !h.active(otherAT) {
		t.Error("another client's token died with it")
	}
}

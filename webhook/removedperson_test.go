package webhook_test

import (
	"maps"
	"net/http"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/config"
)

// Removing a person from the project's password file ends their session and their refresh
// tokens at once; others keep theirs.
func TestRemovedPersonLosesSessionAndRefresh(t *testing.T) {
	h := newHarness(t)
	alice, bob := h.browser(), h.browser()
	aliceTokens := h.codeFlow(alice, "web", webSecret, "openid", "alice@example.com", alicePass)
	bobTokens := h.codeFlow(bob, "web", webSecret, "openid", "bob@example.com", bobPass)
	if pg := alice.get(h.base + "/account"); pg.status != http.StatusOK {
		t.Fatalf("alice's account page before removal: %d", pg.status)
	}

	h.update(func(p *config.Project) {
		p.SignIn.Passwords = maps.Clone(p.SignIn.Passwords)
		delete(p.SignIn.Passwords, "alice@example.com")
	})

	pg := alice.get(h.base + "/account")
	if pg.status == http.StatusOK || !strings.Contains(pg.location(), "/sign-in") {
		t.Errorf("alice's session still works after removal: %d %s", pg.status, pg.location())
	}
	r := h.refresh("web", webSecret, aliceTokens.str("refresh_token"))
	if r.status != http.StatusBadRequest || r.str("error") != "invalid_grant" {
		t.Errorf("alice's refresh after removal: %d %s", r.status, r.raw)
	}
	if r := h.refresh("web", webSecret, bobTokens.str("refresh_token")); r.status != http.StatusOK {
		t.Errorf("bob's refresh: %d %s", r.status, r.raw)
	}
	if pg := bob.get(h.base + "/account"); pg.status != http.StatusOK {
		t.Errorf("bob's account page: %d", pg.status)
	}
}

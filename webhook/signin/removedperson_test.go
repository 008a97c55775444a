package signin_test

import (
	"maps"
	"net/http"
	"strings"
	"testing"

	"latchkey.dev/latchkey/test/stack"

	"latchkey.dev/latchkey/internal/config"
)

// Removing a person from the project's password file ends their session and their refresh
// tokens at once; others keep theirs.
func TestRemovedPersonLosesSessionAndRefresh(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{})
	alice, bob := h.Browser(), h.Browser()
	aliceTokens := h.CodeFlowAs(alice, "web", stack.WebSecret, "openid", "alice@example.com", stack.AlicePassword)
	bobTokens := h.CodeFlowAs(bob, "web", stack.WebSecret, "openid", "bob@example.com", stack.BobPassword)
	if pg := alice.MustGet(h.Issuer + "/account"); pg.Status != http.StatusOK {
		t.Fatalf("alice's account page before removal: %d", pg.Status)
	}

	h.Update(func(p *config.Project) {
		p.SignIn.Passwords = maps.Clone(p.SignIn.Passwords)
		delete(p.SignIn.Passwords, "alice@example.com")
	})

	pg := alice.MustGet(h.Issuer + "/account")
	if pg.Status == http.StatusOK || !strings.Contains(pg.Header.Get("Location"), "/sign-in") {
		t.Errorf("alice's session still works after removal: %d %s", pg.Status, pg.Header.Get("Location"))
	}
	r := h.RefreshAs("web", stack.WebSecret, aliceTokens.Str("refresh_token"))
	if r.Status != http.StatusBadRequest || r.Str("error") != "invalid_grant" {
		t.Errorf("alice's refresh after removal: %d %s", r.Status, r.Raw)
	}
	if r := h.RefreshAs("web", stack.WebSecret, bobTokens.Str("refresh_token")); r.Status != http.StatusOK {
		t.Errorf("bob's refresh: %d %s", r.Status, r.Raw)
	}
	if pg := bob.MustGet(h.Issuer + "/account"); pg.Status != http.StatusOK {
		t.Errorf("bob's account page: %d", pg.Status)
	}
}

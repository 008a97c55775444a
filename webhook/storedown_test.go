package webhook_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// When the store cannot say who is signed in, pages answer 503 with a plain explanation instead
// of a sign-in form that could not work either, and never redirect.
func TestPagesDuringStoreOutage(t *testing.T) {
	h := newHarness(t)
	alice := h.browser()
	alice.signIn("", "alice@example.com", alicePass)
	if pg := alice.get(h.base + "/account"); pg.status != http.StatusOK {
		t.Fatalf("account page before the outage: %d", pg.status)
	}

	// A consent form loaded before the outage and answered during it.
	consent := alice.get(authorizeURL(h, "web", "https://app.example/cb", "read", newPKCE(), url.Values{"prompt": {"consent"}}))
	if !strings.Contains(consent.body, "Where access goes") {
		t.Fatalf("consent page before the outage: %d %s", consent.status, consent.body)
	}
	answer := consent.hidden()
	answer.Set("decision", "allow")

	h.store.Close()
	if pg := alice.post(h.base+"/authorize", answer); pg.status != http.StatusServiceUnavailable || pg.location() != "" {
		t.Errorf("consent answered during the outage: %d Location %q, want 503 and no redirect", pg.status, pg.location())
	}
	pk := newPKCE()
	for name, u := range map[string]string{
		"account":   h.base + "/account",
		"authorize": authorizeURL(h, "web", "https://app.example/cb", "openid", pk, url.Values{"state": {"s"}}),
	} {
		pg := alice.get(u)
		if pg.status != http.StatusServiceUnavailable || pg.location() != "" {
			t.Errorf("%s during the outage: %d Location %q, want 503 and no redirect", name, pg.status, pg.location())
		}
		if !strings.Contains(pg.body, "Try again in a moment") {
			t.Errorf("%s during the outage does not say to try again: %s", name, pg.body)
		}
	}
}

package attacks

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/testbrowser"
	"latchkey.dev/latchkey/test/stack"
)

// TestConsentLogoNotFetchedInChromium: in alice's real browser, the consent page of a client
// that registered itself with a logo_uri sends no request to the logo's server, so that server
// never learns that alice (her address, her browser, the moment) looked at the page.
func TestConsentLogoNotFetchedInChromium(t *testing.T) {
	testbrowser.Chromium(t)
	e := newEnv(t)
	const tracker = "logo-tracker.example"
	status, out := e.register(map[string]any{
		"client_name": "Claude", "redirect_uris": []string{loopback}, "token_endpoint_auth_method": "none",
		"logo_uri": "https://" + tracker + "/pixel.png?campaign=alice",
	})
	if status != http.StatusCreated {
		t.Fatalf("registering: %d %v", status, out)
	}
	id, _ := out["client_id"].(string)

	alice := newProfile(t, "alice's browser")
	alice.signIn(e.Issuer, stack.AliceEmail, stack.AlicePassword)
	stop := alice.recordRequests()
	alice.Open(e.authorizeURL(id, loopback, newPKCE(), url.Values{"prompt": {"consent"}}))
	alice.WaitFor("Where access goes")
	// A later page of Latchkey's own: by the time it has loaded, the consent page's images
	// would have been asked for.
	alice.Open(e.Issuer + "/account")
	alice.WaitFor("Your account")
	hops := stop()
	if len(hops) == 0 {
		t.Fatal("no requests recorded")
	}
	for _, h := range hops {
		if strings.Contains(h.url, tracker) {
			t.Errorf("the browser asked the client's logo server: %s", h.url)
		}
	}
}

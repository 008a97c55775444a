package attacks

import (
	"net/http"
	"net/url"
	"testing"

	"latchkey.dev/latchkey/test/stack"
)

// TestLeakedCodeCannotBeBurnt: someone who learns alice's authorization code but not the PKCE
// verifier (or who is another client, or names another redirect_uri) gets invalid_grant, and the
// code stays good for the client it was issued to. Once spent, a replay by someone who could
// not have redeemed it does not end alice's tokens; a replay by the client itself (a genuine
// replay, RFC 6749 §4.1.2) still does.
func TestLeakedCodeCannotBeBurnt(t *testing.T) {
	e := newEnv(t)
	c := e.registerPublic("Claude Desktop", loopback)
	mallory := e.registerPublic("Mallory's app", loopback)
	alice := e.signedIn(stack.AliceEmail)
	pk := newPKCE()
	p, _ := e.authorizeAs(alice, e.authorizeURL(c.ID, loopback, pk, nil))
	code := codeFrom(p)
	if code == "" {
		t.Fatalf("no code: %d %s", p.Status, p.Location())
	}

	attempts := map[string]func() (int, string){
		"wrong verifier": func() (int, string) {
			a := e.redeem(c.ID, code, loopback, newPKCE().verifier)
			return a.Status, a.Str("error")
		},
		"another client": func() (int, string) {
			a := e.redeem(mallory.ID, code, loopback, pk.verifier)
			return a.Status, a.Str("error")
		},
		"another redirect_uri": func() (int, string) {
			a := e.redeem(c.ID, code, "http://127.0.0.1/elsewhere", newPKCE().verifier)
			return a.Status, a.Str("error")
		},
	}
	for name, try := range attempts {
		if status, errCode := try(); status != http.StatusBadRequest || errCode != "invalid_grant" {
			t.Errorf("%s: %d %s", name, status, errCode)
		}
	}

	got := e.redeem(c.ID, code, loopback, pk.verifier)
	if got.Status != http.StatusOK {
		t.Fatalf("the client's own redemption after the attacker's attempts: %d %s", got.Status, got.Raw)
	}
	at := got.Str("access_token")

	// The spent code, replayed by someone who cannot redeem it: refused, and nothing ends.
	for name, try := range attempts {
		if status, errCode := try(); status != http.StatusBadRequest || errCode != "invalid_grant" {
			t.Errorf("%s after redemption: %d %s", name, status, errCode)
		}
	}
	if !e.active(at) {
		t.Fatal("a replay by someone who could not redeem the code ended alice's token")
	}
	// Replayed by the client itself: what the code issued is revoked.
	if a := e.redeem(c.ID, code, loopback, pk.verifier); a.Status != http.StatusBadRequest || a.Str("error") != "invalid_grant" {
		t.Fatalf("genuine replay: %d %s", a.Status, a.Raw)
	}
	if e.active(at) {
		t.Error("a genuine replay of the code left its access token active")
	}
	if a := e.refresh(c.ID, got.Str("refresh_token")); a.Status != http.StatusBadRequest {
		t.Errorf("a genuine replay left the refresh token working: %d %s", a.Status, a.Raw)
	}
}

// TestCodeRedirectURIAsSent: a token request may leave out redirect_uri only when the
// authorization request did (RFC 6749 §4.1.3).
func TestCodeRedirectURIAsSent(t *testing.T) {
	e := newEnv(t)
	c := e.registerPublic("Claude Desktop", loopback)
	alice := e.signedIn(stack.AliceEmail)
	redeem := func(authRedirect string, tokenForm url.Values) (int, string) {
		pk := newPKCE()
		p, _ := e.authorizeAs(alice, e.authorizeURL(c.ID, authRedirect, pk, nil))
		code := codeFrom(p)
		if code == "" {
			t.Fatalf("no code: %d %s %s", p.Status, p.Location(), p.Text())
		}
		tokenForm.Set("grant_type", "authorization_code")
		tokenForm.Set("code", code)
		tokenForm.Set("code_verifier", pk.verifier)
		a := e.tokenCall("/token", c.ID, "", tokenForm)
		return a.Status, a.Str("error")
	}
	if status, errCode := redeem("", url.Values{}); status != http.StatusOK {
		t.Errorf("no redirect_uri in either request: %d %s", status, errCode)
	}
	if status, errCode := redeem("", url.Values{"redirect_uri": {loopback}}); status != http.StatusOK {
		t.Errorf("none in the authorization request, the registered one in the token request: %d %s", status, errCode)
	}
	if status, errCode := redeem("", url.Values{"redirect_uri": {"http://127.0.0.1/elsewhere"}}); status != http.StatusBadRequest || errCode != "invalid_grant" {
		t.Errorf("none in the authorization request, another in the token request: %d %s", status, errCode)
	}
	if status, errCode := redeem(loopback, url.Values{}); status != http.StatusBadRequest || errCode != "invalid_grant" {
		t.Errorf("sent in the authorization request, left out of the token request: %d %s", status, errCode)
	}
}

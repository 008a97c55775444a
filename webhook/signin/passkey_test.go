package signin_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	ct "latchkey.dev/latchkey/webhook/callback/callbacktest"
)

// post sends body as a script would: same origin, JSON, with the CSRF header when given.
func post(t *testing.T, b *ct.Browser, path, body, csrf string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.H.Issuer+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	if csrf != "" {
		req.Header.Set("X-CSRF-Token", csrf)
	}
	resp, err := b.C.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: not JSON (%d): %s", path, resp.StatusCode, raw)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("%s: Cache-Control %q", path, cc)
	}
	return resp.StatusCode, out
}

// localhost gives the harness a domain name, which WebAuthn needs.
func localhost(t *testing.T) *ct.Harness {
	return ct.New(t, ct.Options{PublicHost: "localhost"})
}

func TestPasskeySignInBadAnswers(t *testing.T) {
	h := localhost(t)
	b := h.Browser()
	// Not JSON.
	if st, out := post(t, b, "/sign-in/passkey", "{not json", ""); st != http.StatusBadRequest || out["error"] != "invalid_request" {
		t.Fatalf("bad JSON: %d %v", st, out)
	}
	// JSON, but no ceremony in this browser: nothing to finish (a replayed answer, or one from
	// another browser, looks the same).
	answer := `{"id":"AAAA","rawId":"AAAA","type":"public-key","response":{"clientDataJSON":"e30","authenticatorData":"AAAA","signature":"AAAA"}}`
	if st, out := post(t, b, "/sign-in/passkey", answer, ""); st != http.StatusBadRequest || out["error"] == "" {
		t.Fatalf("no ceremony: %d %v", st, out)
	}
	// Options need the cookie the sign-in page sets, which binds the ceremony to this browser.
	if st, out := post(t, b, "/sign-in/passkey/options", "{}", ""); st != http.StatusBadRequest {
		t.Fatalf("options without the sign-in page's cookie: %d %v", st, out)
	}
	b.Get(h.Issuer + "/sign-in")
	st, _ := post(t, b, "/sign-in/passkey/options", "{}", "")
	if st != http.StatusOK {
		t.Fatalf("options: %d", st)
	}
	if n := h.CountRows("passkey_ceremonies"); n != 1 {
		t.Fatalf("%d ceremonies stored, want 1", n)
	}
	// An answer whose client data does not parse is refused and changes nothing.
	if st, out := post(t, b, "/sign-in/passkey", answer, ""); st != http.StatusBadRequest || out["error"] == "" {
		t.Fatalf("unreadable answer: %d %v", st, out)
	}
}

// Enrolling needs the session's anti-forgery token and a recent sign-in.
func TestPasskeyEnrolmentNeedsRecentSignIn(t *testing.T) {
	h := localhost(t)
	b := h.Browser()
	if st, out := post(t, b, "/account/passkeys/options", "{}", ""); st != http.StatusUnauthorized {
		t.Fatalf("signed out: %d %v", st, out)
	}
	b.SignIn(ct.AliceEmail, ct.AlicePassword)
	if st, out := post(t, b, "/account/passkeys/options", "{}", "wrong"); st != http.StatusForbidden || out["error"] != "csrf" {
		t.Fatalf("without the CSRF token: %d %v", st, out)
	}
	page := b.Account()
	i := strings.Index(page.Body, `data-csrf="`)
	if i < 0 {
		t.Fatalf("no passkeys section on the account page: %s", page.Text())
	}
	csrf, _, _ := strings.Cut(page.Body[i+len(`data-csrf="`):], `"`)
	if st, out := post(t, b, "/account/passkeys/options", "{}", csrf); st != http.StatusOK {
		t.Fatalf("recent sign-in: %d %v", st, out)
	}
	h.Clock.Advance(16 * time.Minute)
	st, out := post(t, b, "/account/passkeys/options", "{}", csrf)
	if st != http.StatusForbidden || out["error"] != "not_recent" || !strings.Contains(out["continue"].(string), "prompt=login") {
		t.Fatalf("stale sign-in: %d %v", st, out)
	}
}

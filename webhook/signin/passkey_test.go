package signin_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-webauthn/webauthn/protocol/webauthncbor"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/signin"
)

// post sends body as a script would: same origin, JSON, with the CSRF header when given.
func post(t *testing.T, b *stack.Browser, path, body, csrf string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.S.Issuer+path, strings.NewReader(body))
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
func localhost(t *testing.T) *stack.Stack {
	return stack.New(t, stack.Options{Audit: true, PublicHost: "localhost"})
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
	b.MustGet(h.Issuer + "/sign-in")
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
	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
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

// Enrolling and removing a passkey on the account page are each one record, read back from the
// audit log and from a sink. The browser's side is a software authenticator: a P-256 key and a
// "none" attestation, which is what the relying party asks for.
func TestPasskeyEnrolAndRemoveAreAudited(t *testing.T) {
	h := localhost(t)
	b := h.Browser()
	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	page := b.Account()
	i := strings.Index(page.Body, `data-csrf="`)
	if i < 0 {
		t.Fatalf("no passkeys section on the account page: %s", page.Text())
	}
	csrf, _, _ := strings.Cut(page.Body[i+len(`data-csrf="`):], `"`)
	st, opts := post(t, b, "/account/passkeys/options", "{}", csrf)
	if st != http.StatusOK {
		t.Fatalf("options: %d %v", st, opts)
	}
	pk := opts["publicKey"].(map[string]any)
	answer, credID := noneAttestation(t, h.Issuer, pk["rp"].(map[string]any)["id"].(string), pk["challenge"].(string))
	if st, out := post(t, b, "/account/passkeys", answer, csrf); st != http.StatusOK {
		t.Fatalf("enrolling: %d %v", st, out)
	}
	if res := b.MustFollow(b.PressOnAccount("Remove")); res.Status != http.StatusOK || strings.Contains(res.Body, "Remove passkey") {
		t.Fatalf("removing: %d %s", res.Status, res.Text())
	}
	alice := h.Person(stack.AliceEmail).ID
	recs := h.Trail(events.PasskeyAdded, events.PasskeyRemoved)
	for _, action := range []string{events.PasskeyAdded, events.PasskeyRemoved} {
		r := recs[action]
		if r.Actor != alice || r.Target != alice || r.Outcome != store.OutcomeSuccess || r.Details["credential_id"] != credID {
			t.Errorf("%s record: %+v", action, r)
		}
	}
}

// noneAttestation is a software authenticator's answer to a registration: a new P-256
// credential, user present and verified, with a "none" attestation. It returns the answer's
// JSON and the credential id (base64url).
func noneAttestation(t *testing.T, origin, rpID, challenge string) (string, string) {
	t.Helper()
	k := stack.NewPasskeyKey(t)
	cose, credID := k.COSE, k.ID
	rpHash := sha256.Sum256([]byte(rpID))
	authData := append(rpHash[:], 0x45, 0, 0, 0, 0)  // flags UP|UV|AT, sign count 0
	authData = append(authData, make([]byte, 16)...) // AAGUID
	authData = binary.BigEndian.AppendUint16(authData, uint16(len(credID)))
	authData = append(append(authData, credID...), cose...)
	att, err := webauthncbor.Marshal(struct {
		Fmt      string         `cbor:"fmt"`
		AttStmt  map[string]any `cbor:"attStmt"`
		AuthData []byte         `cbor:"authData"`
	}{"none", map[string]any{}, authData})
	if err != nil {
		t.Fatal(err)
	}
	clientData, _ := json.Marshal(map[string]any{"type": "webauthn.create", "challenge": challenge, "origin": origin, "crossOrigin": false})
	b64 := base64.RawURLEncoding.EncodeToString
	answer, _ := json.Marshal(map[string]any{
		"id": b64(credID), "rawId": b64(credID), "type": "public-key", "authenticatorAttachment": "platform",
		"clientExtensionResults": map[string]any{},
		"response":               map[string]any{"clientDataJSON": b64(clientData), "attestationObject": b64(att), "transports": []string{"internal"}},
	})
	return string(answer), b64(credID)
}

// from makes b's connections come from addr, another loopback address than the harness's.
func from(b *stack.Browser, addr string) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(addr)}}
	b.C.Transport = &http.Transport{DialContext: d.DialContext}
}

// TestPasskeySignInLimitedPerAddress plays a client that starts passkey ceremonies (each
// stores a challenge) and posts answers (each a signature check) as fast as it can: past the
// address's budget both answer 429 in the ceremony's JSON shape with Retry-After, and another
// address is not slowed down.
func TestPasskeySignInLimitedPerAddress(t *testing.T) {
	h := localhost(t)
	b := h.Browser()
	b.MustGet(h.Issuer + "/sign-in")
	for i := range signin.PasskeyBurst {
		if st, out := post(t, b, "/sign-in/passkey/options", "{}", ""); st != http.StatusOK {
			t.Fatalf("options %d: %d %v", i, st, out)
		}
	}
	over := func(path, body string) int {
		req, _ := http.NewRequest(http.MethodPost, b.S.Issuer+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		resp, err := b.C.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusTooManyRequests ||
			out["error"] != "too_many_requests" || out["message"] == "" || resp.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("%s over the limit: %d %v %v", path, resp.StatusCode, resp.Header, out)
		}
		retry, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		if retry < 1 {
			t.Fatalf("%s over the limit: Retry-After %q", path, resp.Header.Get("Retry-After"))
		}
		return retry
	}
	over("/sign-in/passkey/options", "{}")
	answer := `{"id":"AAAA","rawId":"AAAA","type":"public-key","response":{"clientDataJSON":"e30","authenticatorData":"AAAA","signature":"AAAA"}}`
	retry := over("/sign-in/passkey", answer)

	other := h.Browser()
	from(other, "127.0.0.2")
	other.MustGet(h.Issuer + "/sign-in")
	if st, out := post(t, other, "/sign-in/passkey/options", "{}", ""); st != http.StatusOK {
		t.Fatalf("another address: %d %v", st, out)
	}
	h.Clock.Advance(time.Duration(retry) * time.Second)
	if st, out := post(t, b, "/sign-in/passkey/options", "{}", ""); st != http.StatusOK {
		t.Fatalf("after Retry-After: %d %v", st, out)
	}
}

// csrfOf reads the account page's anti-forgery token for the passkey script.
func csrfOf(t *testing.T, b *stack.Browser) string {
	t.Helper()
	page := b.Account()
	i := strings.Index(page.Body, `data-csrf="`)
	if i < 0 {
		t.Fatalf("no passkeys section on the account page: %s", page.Text())
	}
	csrf, _, _ := strings.Cut(page.Body[i+len(`data-csrf="`):], `"`)
	return csrf
}

// Where the project requires a phishing-resistant sign-in, a phished password must not be a
// way to a passkey: the attacker signs in with Alice's password a moment ago, and Alice has no
// passkey yet. Enrolling is refused at both steps (also for a ceremony begun before the
// project turned the policy on), and no passkey is stored. A recent sign-in with the
// project's OpenID provider enrols the first passkey.
func TestFirstPasskeyNeedsMoreThanAPassword(t *testing.T) {
	h := localhost(t)
	attacker := h.Browser()
	attacker.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	csrf := csrfOf(t, attacker)
	// A ceremony begun before the policy.
	st, early := post(t, attacker, "/account/passkeys/options", "{}", csrf)
	if st != http.StatusOK {
		t.Fatalf("options before the policy: %d %v", st, early)
	}
	h.Project.SignIn.RequirePhishingResistant = true

	st, out := post(t, attacker, "/account/passkeys/options", "{}", csrf)
	if st != http.StatusForbidden || out["error"] != "provider_required" || out["continue"] != nil {
		t.Fatalf("options on a password sign-in: %d %v", st, out)
	}
	pk := early["publicKey"].(map[string]any)
	answer, _ := noneAttestation(t, h.Issuer, pk["rp"].(map[string]any)["id"].(string), pk["challenge"].(string))
	if st, out := post(t, attacker, "/account/passkeys", answer, csrf); st != http.StatusForbidden || out["error"] != "provider_required" {
		t.Fatalf("finishing on a password sign-in: %d %v", st, out)
	}
	alice := h.Person(stack.AliceEmail).ID
	if keys, err := h.Store().ListPasskeys(t.Context(), stack.ProjectKey, alice); err != nil || len(keys) != 0 {
		t.Fatalf("Alice's passkeys after the attempts: %v %v", keys, err)
	}

	// With an OpenID provider, the refusal sends the person there to sign in again.
	h.Project.SignIn.OIDC = &config.OIDCProvider{Issuer: "https://idp.example", ClientID: "latchkey", Label: "Acme SSO"}
	st, out = post(t, attacker, "/account/passkeys/options", "{}", csrf)
	next, _ := out["continue"].(string)
	if st != http.StatusForbidden || !strings.HasPrefix(next, "/team/demo/sign-in/oidc?") || !strings.Contains(next, "prompt=login") {
		t.Fatalf("options on a password sign-in, with a provider: %d %v", st, out)
	}

	// Alice, signed in with the provider a moment ago, enrols her first passkey.
	b := h.Browser()
	b.SignInWith(stack.AliceEmail, signin.MethodOIDC)
	csrf = csrfOf(t, b)
	st, opts := post(t, b, "/account/passkeys/options", "{}", csrf)
	if st != http.StatusOK {
		t.Fatalf("options after a provider sign-in: %d %v", st, opts)
	}
	pk = opts["publicKey"].(map[string]any)
	answer, _ = noneAttestation(t, h.Issuer, pk["rp"].(map[string]any)["id"].(string), pk["challenge"].(string))
	if st, out := post(t, b, "/account/passkeys", answer, csrf); st != http.StatusOK {
		t.Fatalf("enrolling after a provider sign-in: %d %v", st, out)
	}
	// A second one needs a passkey sign-in, even after the provider.
	if st, out := post(t, b, "/account/passkeys/options", "{}", csrf); st != http.StatusForbidden || out["error"] != "passkey_required" {
		t.Fatalf("a second passkey after a provider sign-in: %d %v", st, out)
	}
}

package callback_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/upstream/fakeoauth"
	"latchkey.dev/latchkey/test/stack"
)

// TestMultiTenantConnectorRefusesOtherTenants plays the tenants of a multi-tenant Microsoft
// app end to end: Alice connects through the real account page and callback, and the callback
// connects nothing when the ID token's iss names another tenant than its tid claim (a tenant
// passing itself off as another), or when the token is from a tenant the connector does not
// admit. The admitted tenant connects.
func TestMultiTenantConnectorRefusesOtherTenants(t *testing.T) {
	const other = "9188040d-6c67-4c5b-b112-36a304b66dad"
	tests := []struct {
		name    string
		allowed []string
		forge   func(base string) map[string]any
		status  int
	}{
		{"iss of another tenant than tid", nil, func(base string) map[string]any { return map[string]any{"iss": base + "/" + other + "/v2.0"} }, http.StatusBadRequest},
		{"tid of another tenant than iss", []string{other}, func(string) map[string]any { return map[string]any{"tid": other} }, http.StatusBadRequest},
		{"a tenant the connector does not admit", []string{other}, nil, http.StatusForbidden},
		{"the admitted tenant", []string{fakeoauth.MicrosoftTenant}, nil, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := stack.New(t, stack.Options{Audit: true, Services: []fakeoauth.Shape{fakeoauth.Microsoft}, ServiceTokenTTL: time.Hour})
			sv := h.Services[fakeoauth.Microsoft]
			sv.Connector.AllowedTenants = tt.allowed
			if tt.forge != nil {
				sv.Fake.ForgeIDToken(tt.forge(sv.URL))
			}
			b := h.Browser()
			b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
			u, _ := url.Parse(sv.URL)
			b.Jar.SetCookies(u, []*http.Cookie{sv.Fake.SessionCookie(stack.AliceLogin)})
			res := b.PressOnAccount("Connect " + sv.Connector.DisplayName)
			back := b.MustGet(res.Location())
			done := b.MustGet(back.Location())
			if done.Status != tt.status {
				t.Fatalf("callback answered %d, want %d: %s", done.Status, tt.status, done.Text())
			}
			n := len(h.Connections(stack.AliceEmail))
			if tt.status == http.StatusOK {
				if n != 1 || !strings.Contains(done.Text(), "onnected") {
					t.Fatalf("the admitted tenant did not connect: %d connections, %s", n, done.Text())
				}
				return
			}
			if n != 0 {
				t.Fatalf("%d connections after an ID token the connector must refuse", n)
			}
		})
	}
}

// TestPrivateKeyJWTEndToEnd: a Microsoft connector with a certificate credential connects and
// refreshes through the callback and the vault with client assertions the fake verifies
// against the certificate (x5t#S256, iss = sub = client id, aud the token endpoint, a new jti,
// exp from the injected clock), and sends its token endpoint no client secret.
func TestPrivateKeyJWTEndToEnd(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true, Services: []fakeoauth.Shape{fakeoauth.Microsoft}, ServiceTokenTTL: time.Hour})
	sv := h.Services[fakeoauth.Microsoft]
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "latchkey"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	sum := sha256.Sum256(der)
	thumb := base64.RawURLEncoding.EncodeToString(sum[:])
	sv.Fake.RequireClientAssertion(fakeoauth.AssertionCheck{ClientID: sv.Connector.ClientID, Key: &key.PublicKey, X5TS256: thumb, MaxLifetime: 10 * time.Minute})
	sv.Connector.TokenAuth, sv.Connector.ClientSecret = config.TokenAuthPrivateKeyJWT, ""
	sv.Connector.Assertion = &config.ClientAssertion{Key: key, Algorithm: "PS256", X5TS256: thumb}

	b := h.Browser()
	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	u, _ := url.Parse(sv.URL)
	b.Jar.SetCookies(u, []*http.Cookie{sv.Fake.SessionCookie(stack.AliceLogin)})
	connectThroughProvider(t, b, sv, fakeoauth.PathsOf(fakeoauth.Microsoft), "Connect "+sv.Connector.DisplayName)
	conn := aliceConnection(t, h, sv)
	subject := agentToken(t, h, conn)
	first := exchangeFor(t, h, subject, sv.Connector.Audience)
	h.Clock.Advance(2 * time.Hour)
	if next := exchangeFor(t, h, subject, sv.Connector.Audience); next == first || !sv.Fake.Live(next) {
		t.Fatalf("after expiry token exchange handed out %q; want a token refreshed with a client assertion", next)
	}
	assertions := map[string]bool{}
	for _, r := range sv.Fake.Requests() {
		if r.Path != fakeoauth.PathsOf(fakeoauth.Microsoft).Token {
			continue
		}
		if r.ClientAuth != "" || r.Params.Get("client_assertion_type") != fakeoauth.ClientAssertionType {
			t.Errorf("a token request authenticated as %q with %v", r.ClientAuth, r.Params.Get("client_assertion_type"))
		}
		assertions[r.Params.Get("client_assertion")] = true
	}
	if len(assertions) != 2 {
		t.Fatalf("%d distinct client assertions, want one per token request (code and refresh)", len(assertions))
	}
}

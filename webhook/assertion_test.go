package webhook_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"net/http"
	"net/url"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"latchkey.dev/latchkey/internal/clientdoc"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/webhook/register"
)

// A client ID metadata document may publish keys (jwks) and say private_key_jwt: the client is
// then confidential, and its code is redeemed only with an assertion signed by one of them.
func TestClientIDMetadataDocumentPrivateKeyJWT(t *testing.T) {
	h := newHarness(t)
	site := newDocSite(t)
	h.srv.Env().ClientDocument = register.ClientDocument(clientdoc.New(clientdoc.Options{AllowLoopback: true, RootCAs: site.pool, Now: h.clock.Now}))
	h.update(func(p *config.Project) { p.Registration.ClientIDMetadataDocuments = true })
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	id := site.serve("/oauth/keys.json", map[string]any{
		"token_endpoint_auth_method": "private_key_jwt",
		"jwks":                       jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: key.Public(), KeyID: "k1", Algorithm: "ES256", Use: "sig"}}},
	})
	sign := func(k *ecdsa.PrivateKey) string {
		s, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: k}, (&jose.SignerOptions{}).WithHeader("kid", "k1"))
		now := h.clock.Now()
		raw, err := jwt.Signed(s).Claims(jwt.Claims{Issuer: id, Subject: id, Audience: jwt.Audience{h.base}, ID: secret.NewID(),
			IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(time.Minute))}).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	b := h.browser()
	b.signIn("", "alice@example.com", alicePass)
	pk := newPKCE()
	p := b.get(authorizeURL(h, id, "http://127.0.0.1/callback", "read", pk, nil))
	if p.status != http.StatusOK {
		t.Fatalf("consent page: %d %s", p.status, p.text())
	}
	f := p.hidden()
	f.Set("decision", "allow")
	loc, _ := url.Parse(b.post(h.base+"/authorize", f).location())
	form := func(extra url.Values) url.Values {
		v := url.Values{"grant_type": {"authorization_code"}, "client_id": {id}, "code": {loc.Query().Get("code")},
			"redirect_uri": {"http://127.0.0.1/callback"}, "code_verifier": {pk.verifier}}
		for k, vs := range extra {
			v[k] = vs
		}
		return v
	}
	assert := func(raw string) url.Values {
		return url.Values{"client_assertion_type": {"urn:ietf:params:oauth:client-assertion-type:jwt-bearer"}, "client_assertion": {raw}}
	}
	if r := h.token(form(nil), "", ""); r.status != http.StatusUnauthorized || r.str("error") != "invalid_client" {
		t.Errorf("as a public client: %d %s", r.status, r.raw)
	}
	if r := h.token(form(assert(sign(other))), "", ""); r.status != http.StatusUnauthorized {
		t.Errorf("an assertion by a key the document does not publish: %d %s", r.status, r.raw)
	}
	if r := h.token(form(assert(sign(key))), "", ""); r.status != http.StatusOK {
		t.Fatalf("with the document's key: %d %s", r.status, r.raw)
	}
}

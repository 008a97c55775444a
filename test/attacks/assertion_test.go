package attacks

import (
	"crypto"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/jwks"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/test/stack"
)

const (
	keyClient    = "lkc_keyclient"
	uriClient    = "lkc_uriclient"
	secretClient = "lkc_secretjwt"
	jwtSecret    = "lks_a-secret-that-is-long-enough-for-hs256-0123456789"
)

func publicSet(t *testing.T, keys map[string]crypto.Signer) []byte {
	t.Helper()
	set := jose.JSONWebKeySet{}
	for kid, k := range keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.Public(), KeyID: kid, Algorithm: "ES256", Use: "sig"})
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// assertion signs claims for client with key (a crypto.Signer or an HMAC secret).
func assertion(t *testing.T, alg jose.SignatureAlgorithm, key any, kid string, claims map[string]any) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType("JWT")
	if kid != "" {
		opts = opts.WithHeader("kid", kid)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func (e *env) claims(client string, edit func(map[string]any)) map[string]any {
	now := e.Clock.Now()
	c := map[string]any{
		"iss": client, "sub": client, "aud": e.Issuer + "/token", "jti": secret.NewID(),
		"iat": now.Unix(), "exp": now.Add(time.Minute).Unix(),
	}
	if edit != nil {
		edit(c)
	}
	return c
}

func (e *env) withAssertion(client, raw string) stack.Answer {
	e.t.Helper()
	return e.postBasic("/token", "", "", url.Values{
		"grant_type": {"client_credentials"}, "client_id": {client},
		"client_assertion_type": {"urn:ietf:params:oauth:client-assertion-type:jwt-bearer"}, "client_assertion": {raw},
	})
}

// TestClientAssertions plays whoever wants a client's tokens without its private key (or, for
// client_secret_jwt, its secret): assertions signed by another key, unsigned, replayed, for
// another server, expired or long-lived, and in the name of a client that uses a secret. The
// key set behind a jwks_uri rotates without an edit, and made-up key ids cannot make the server
// fetch it more than once a minute.
func TestClientAssertions(t *testing.T) {
	e := newEnv(t)
	key, rotated, stranger := newKey(t), newKey(t), newKey(t)
	var fetches atomic.Int64
	published := atomic.Value{}
	published.Store(publicSet(t, map[string]crypto.Signer{"k1": key}))
	keysSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write(published.Load().([]byte))
	}))
	defer keysSrv.Close()
	e.Server().Env().ClientKeys = jwks.New(jwks.Options{AllowLoopback: true, Now: e.Clock.Now})
	cc := []string{"client_credentials"}
	e.update(func(p *config.Project) {
		p.Clients[keyClient] = &config.Client{ID: keyClient, GrantTypes: cc, TokenEndpointAuthMethod: "private_key_jwt", JWKS: publicSet(t, map[string]crypto.Signer{"k1": key})}
		p.Clients[uriClient] = &config.Client{ID: uriClient, GrantTypes: cc, TokenEndpointAuthMethod: "private_key_jwt", JWKSURI: keysSrv.URL + "/jwks.json"}
		p.Clients[secretClient] = &config.Client{ID: secretClient, GrantTypes: cc, TokenEndpointAuthMethod: "client_secret_jwt",
			SecretHash: secret.Hash(jwtSecret), SecretJWTKey: []byte(jwtSecret)}
	})

	for _, client := range []string{keyClient, uriClient} {
		if a := e.withAssertion(client, assertion(t, jose.ES256, key, "k1", e.claims(client, nil))); a.Status != http.StatusOK {
			t.Fatalf("%s with a good assertion: %d %s", client, a.Status, a.Raw)
		}
	}
	// The issuer as aud, and no kid, work too.
	if a := e.withAssertion(keyClient, assertion(t, jose.ES256, key, "", e.claims(keyClient, func(c map[string]any) { c["aud"] = e.Issuer }))); a.Status != http.StatusOK {
		t.Fatalf("aud = issuer, no kid: %d %s", a.Status, a.Raw)
	}
	if a := e.withAssertion(secretClient, assertion(t, jose.HS256, []byte(jwtSecret), "", e.claims(secretClient, nil))); a.Status != http.StatusOK {
		t.Fatalf("client_secret_jwt: %d %s", a.Status, a.Raw)
	}

	// The same authentication at introspection and revocation, aud naming the endpoint called.
	own := e.withAssertion(keyClient, assertion(t, jose.ES256, key, "k1", e.claims(keyClient, nil))).Str("access_token")
	for _, path := range []string{"/introspect", "/revoke"} {
		a := e.postBasic(path, "", "", url.Values{"token": {own},
			"client_assertion_type": {"urn:ietf:params:oauth:client-assertion-type:jwt-bearer"},
			"client_assertion":      {assertion(t, jose.ES256, key, "k1", e.claims(keyClient, func(c map[string]any) { c["aud"] = e.Issuer + path }))}})
		if a.Status != http.StatusOK {
			t.Errorf("%s with an assertion: %d %s", path, a.Status, a.Raw)
		}
	}
	if e.active(own) {
		t.Error("the token revoked with an assertion is still active")
	}

	replayed := assertion(t, jose.ES256, key, "k1", e.claims(keyClient, nil))
	if a := e.withAssertion(keyClient, replayed); a.Status != http.StatusOK {
		t.Fatalf("first use: %d %s", a.Status, a.Raw)
	}
	unsigned := func(client string) string {
		h := `{"alg":"none","typ":"JWT"}`
		b, _ := json.Marshal(e.claims(client, nil))
		return b64(h) + "." + b64(string(b)) + "."
	}
	for name, c := range map[string]struct{ client, raw string }{
		"a key not in the client's set":    {keyClient, assertion(t, jose.ES256, stranger, "k1", e.claims(keyClient, nil))},
		"a stranger's key at the jwks_uri": {uriClient, assertion(t, jose.ES256, stranger, "k9", e.claims(uriClient, nil))},
		"alg none":                         {keyClient, unsigned(keyClient)},
		"replayed jti":                     {keyClient, replayed},
		"wrong aud":                        {keyClient, assertion(t, jose.ES256, key, "k1", e.claims(keyClient, func(c map[string]any) { c["aud"] = "https://other.example/token" }))},
		"expired":                          {keyClient, assertion(t, jose.ES256, key, "k1", e.claims(keyClient, func(c map[string]any) { c["exp"] = e.Clock.Now().Add(-5 * time.Minute).Unix() }))},
		"no exp":                           {keyClient, assertion(t, jose.ES256, key, "k1", e.claims(keyClient, func(c map[string]any) { delete(c, "exp") }))},
		"exp a day ahead":                  {keyClient, assertion(t, jose.ES256, key, "k1", e.claims(keyClient, func(c map[string]any) { c["exp"] = e.Clock.Now().Add(24 * time.Hour).Unix() }))},
		"no jti":                           {keyClient, assertion(t, jose.ES256, key, "k1", e.claims(keyClient, func(c map[string]any) { delete(c, "jti") }))},
		"iss another client":               {keyClient, assertion(t, jose.ES256, key, "k1", e.claims(keyClient, func(c map[string]any) { c["iss"] = uriClient }))},
		"HS256 for private_key_jwt":        {keyClient, assertion(t, jose.HS256, []byte(jwtSecret), "", e.claims(keyClient, nil))},
		"HS256 with a wrong secret":        {secretClient, assertion(t, jose.HS256, []byte(jwtSecret+"x"), "", e.claims(secretClient, nil))},
		"ES256 for client_secret_jwt":      {secretClient, assertion(t, jose.ES256, key, "", e.claims(secretClient, nil))},
		// A client with a secret has no keys: an assertion in its name is someone else's.
		"a secret client's name": {stack.Agent, assertion(t, jose.ES256, stranger, "", e.claims(stack.Agent, nil))},
	} {
		if a := e.withAssertion(c.client, c.raw); a.Status != http.StatusUnauthorized || a.Str("error") != "invalid_client" {
			t.Errorf("%s: %d %s, want 401 invalid_client", name, a.Status, a.Raw)
		}
	}
	// The JWT methods bind: the secret itself is not accepted for a client_secret_jwt client.
	if a := e.postBasic("/token", secretClient, jwtSecret, url.Values{"grant_type": {"client_credentials"}}); a.Status != http.StatusUnauthorized {
		t.Errorf("client_secret_basic for a client_secret_jwt client: %d %s", a.Status, a.Raw)
	}

	// Rotation: the client publishes a new key and signs with it; the unknown kid fetches the
	// set again. Made-up kids within the next minute fetch nothing more.
	published.Store(publicSet(t, map[string]crypto.Signer{"k1": key, "k2": rotated}))
	e.Clock.Advance(2 * time.Minute)
	before := fetches.Load()
	if a := e.withAssertion(uriClient, assertion(t, jose.ES256, rotated, "k2", e.claims(uriClient, nil))); a.Status != http.StatusOK {
		t.Fatalf("after rotation: %d %s", a.Status, a.Raw)
	}
	for i := range 5 {
		e.withAssertion(uriClient, assertion(t, jose.ES256, stranger, "made-up-"+string(rune('a'+i)), e.claims(uriClient, nil)))
	}
	if n := fetches.Load() - before; n != 1 {
		t.Errorf("the key set was fetched %d times for one rotation and five made-up kids, want 1", n)
	}
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

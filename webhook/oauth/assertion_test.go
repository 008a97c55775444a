package oauth_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"latchkey.dev/latchkey/internal/clientdoc"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/register"
)

// A client ID metadata document may publish keys (jwks) and say private_key_jwt: the client is
// then confidential, and its code is redeemed only with an assertion signed by one of them.
func TestClientIDMetadataDocumentPrivateKeyJWT(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{})
	site := newDocSite(t)
	h.Server().Env().ClientDocument = register.ClientDocument(clientdoc.New(clientdoc.Options{AllowLoopback: true, RootCAs: site.pool, Now: h.Clock.Now}))
	h.Update(func(p *config.Project) { p.Registration.ClientIDMetadataDocuments = true })
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	id := site.serve("/oauth/keys.json", map[string]any{
		"token_endpoint_auth_method": "private_key_jwt",
		"jwks":                       jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: key.Public(), KeyID: "k1", Algorithm: "ES256", Use: "sig"}}},
	})
	sign := func(k *ecdsa.PrivateKey) string {
		s, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: k}, (&jose.SignerOptions{}).WithHeader("kid", "k1"))
		now := h.Clock.Now()
		raw, err := jwt.Signed(s).Claims(jwt.Claims{Issuer: id, Subject: id, Audience: jwt.Audience{h.Issuer}, ID: secret.NewID(),
			IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(time.Minute))}).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	b := h.Browser()
	b.SignInPage("", "alice@example.com", stack.AlicePassword)
	pk := stack.NewPKCE()
	p := b.MustGet(h.AuthorizeURL(id, "http://127.0.0.1/callback", "read", pk, nil))
	if p.Status != http.StatusOK {
		t.Fatalf("consent page: %d %s", p.Status, p.Text())
	}
	allowed, err := b.Allow(p)
	if err != nil {
		t.Fatal(err)
	}
	loc, _ := url.Parse(allowed.Header.Get("Location"))
	form := func(extra url.Values) url.Values {
		v := url.Values{"grant_type": {"authorization_code"}, "client_id": {id}, "code": {loc.Query().Get("code")},
			"redirect_uri": {"http://127.0.0.1/callback"}, "code_verifier": {pk.Verifier}}
		for k, vs := range extra {
			v[k] = vs
		}
		return v
	}
	assert := func(raw string) url.Values {
		return url.Values{"client_assertion_type": {"urn:ietf:params:oauth:client-assertion-type:jwt-bearer"}, "client_assertion": {raw}}
	}
	if r := h.Token(form(nil), "", ""); r.Status != http.StatusUnauthorized || r.Str("error") != "invalid_client" {
		t.Errorf("as a public client: %d %s", r.Status, r.Raw)
	}
	if r := h.Token(form(assert(sign(other))), "", ""); r.Status != http.StatusUnauthorized {
		t.Errorf("an assertion by a key the document does not publish: %d %s", r.Status, r.Raw)
	}
	if r := h.Token(form(assert(sign(key))), "", ""); r.Status != http.StatusOK {
		t.Fatalf("with the document's key: %d %s", r.Status, r.Raw)
	}
}

// docSite is an app's web site on 127.0.0.1 (https), serving client ID metadata documents.
type docSite struct {
	ts   *httptest.Server
	mu   sync.Mutex
	docs map[string][]byte
	pool *x509.CertPool
}

func newDocSite(t *testing.T) *docSite {
	s := &docSite{docs: map[string][]byte{}}
	s.ts = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		doc := s.docs[r.URL.Path]
		s.mu.Unlock()
		if doc == nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc)
	}))
	t.Cleanup(s.ts.Close)
	s.pool = x509.NewCertPool()
	s.pool.AddCert(s.ts.Certificate())
	return s
}

// serve publishes a document at path, a public client's with a loopback redirect that fields
// change, and returns its URL, the client's id.
func (s *docSite) serve(path string, fields map[string]any) string {
	id := s.ts.URL + path
	doc := map[string]any{
		"client_id": id, "client_name": "Claude Code", "redirect_uris": []string{"http://127.0.0.1/callback"},
		"token_endpoint_auth_method": "none", "grant_types": []string{"authorization_code", "refresh_token"},
		"client_uri": "https://claude.ai/",
	}
	for k, v := range fields {
		doc[k] = v
	}
	b, _ := json.Marshal(doc)
	s.mu.Lock()
	s.docs[path] = b
	s.mu.Unlock()
	return id
}

package proxy_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/mcp/dpop"
	"latchkey.dev/latchkey/test/stack"
)

// In a Project that requires DPoP, Repo Helper calls the proxy with alice's DPoP-bound access
// token and a proof of its key for each call, and gets her account, also on the calls the
// proxy decides from its cache. A proof sent again, a proof for another URL, a proof by
// another key, and the bound token presented as a bearer token are refused (RFC 9449 §4.3,
// §7.1, §7.2), and none of them reaches the service.
func TestProxyDPoPBound(t *testing.T) {
	s := stack.New(t, stack.Options{
		DSN:     "sqlite:" + filepath.Join(t.TempDir(), "latchkey.db"),
		Project: func(p *config.Project) { p.RequireDPoP = true },
	})
	a := &api{gh: s.GitHub}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	s.Connector.Proxy = &config.Proxy{BaseURL: srv.URL, Rules: []config.ProxyRule{{Methods: []string{"GET"}, PathPrefix: "/user"}}}
	s.ConnectGitHub(stack.AliceEmail, stack.AliceLogin)
	key, other := newKey(t), newKey(t)
	jkt, err := dpop.Thumbprint(key)
	must(t, err)
	tok := secret.New(secret.PrefixAccessToken)
	now := s.Clock.Now()
	must(t, s.Admin.CreateTokens(context.Background(), store.Token{
		Hash: secret.Hash(tok), Kind: store.AccessToken, Project: stack.ProjectKey, ClientID: stack.Agent,
		Subject: s.PersonID(stack.AliceEmail), Scopes: []string{"openid"}, FamilyID: secret.New(""),
		AuthTime: now, IssuedAt: now, ExpiresAt: now.Add(time.Hour), JKT: jkt,
	}))
	user := s.Issuer + "/proxy/github/user"
	proof := func(k crypto.Signer, u string) string {
		t.Helper()
		p, err := dpop.Sign(k, dpop.Claims{Method: http.MethodGet, URL: u, AccessToken: tok, IssuedAt: s.Clock.Now()})
		must(t, err)
		return p
	}
	call := func(scheme, proof string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, user, nil)
		req.Header.Set("Authorization", scheme+" "+tok)
		if proof != "" {
			req.Header.Set("DPoP", proof)
		}
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
			t.Error("a 401 without WWW-Authenticate")
		}
		return resp.StatusCode, b
	}
	var last string
	for i := range 2 { // the second is decided from the cache
		last = proof(key, user)
		if st, body := call("DPoP", last); st != http.StatusOK || !bytes.Contains(body, []byte(`"login":"alice-gh"`)) {
			t.Fatalf("call %d with a fresh proof: %d %s", i, st, body)
		}
	}
	_, sent := a.sent()
	for _, c := range []struct{ name, scheme, proof string }{
		{"the same proof again", "DPoP", last},
		{"a proof for another URL", "DPoP", proof(key, s.Issuer+"/proxy/github/user/repos")},
		{"a proof by another key", "DPoP", proof(other, user)},
		{"no proof", "DPoP", ""},
		{"the bound token as a bearer token", "Bearer", ""},
	} {
		if st, body := call(c.scheme, c.proof); st != http.StatusUnauthorized {
			t.Errorf("%s: %d %s, want 401", c.name, st, body)
		}
	}
	if _, now := a.sent(); len(now) != len(sent) {
		t.Errorf("refused calls reached the service: %v", now[len(sent):])
	}
}

func newKey(t *testing.T) crypto.Signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	return k
}

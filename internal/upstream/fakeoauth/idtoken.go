package fakeoauth

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"

	jose "github.com/go-jose/go-jose/v4"
)

// idTokenKeyID names the server's ID token key in its key set.
const idTokenKeyID = "fake-id-1"

// key returns the server's ID token signing key, made on first use. It takes no lock of the
// server's: token answers are signed while the server's mutex is held.
func (s *Server) key() *rsa.PrivateKey {
	s.idKeyOnce.Do(func() { s.idKey, _ = rsa.GenerateKey(rand.Reader, 2048) })
	return s.idKey
}

// signIDToken signs claims as an RS256 JWT under the server's key.
func (s *Server) signIDToken(claims map[string]any) string {
	k := s.key()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: k, KeyID: idTokenKeyID}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		panic(err)
	}
	b, _ := json.Marshal(claims)
	obj, err := signer.Sign(b)
	if err != nil {
		panic(err)
	}
	out, _ := obj.CompactSerialize()
	return out
}

// ServeJWKS answers the server's ID token key set, for a provider's Extra paths.
func ServeJWKS(s *Server, w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &s.key().PublicKey, KeyID: idTokenKeyID, Algorithm: "RS256", Use: "sig"}}})
}

// ForgeIDToken makes the next ID token the server issues say claims instead of what it would
// (a tenant's iss and tid that disagree, say), as a hostile or confused identity provider could.
func (s *Server) ForgeIDToken(claims map[string]any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forged = claims
}

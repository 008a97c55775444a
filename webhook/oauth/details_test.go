package oauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"latchkey.dev/latchkey/internal/authzdetails"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/webhook/site"
)

// A JWT access token carries the details it was minted with as the authorization_details
// claim (RFC 9396 §9.1), exactly as stored; the refresh token keeps the approval when the
// access token is narrowed; a token without details has no claim.
func TestAccessJWTCarriesAuthorizationDetails(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p := &config.Project{Key: "team/demo", Issuer: "https://auth.example/team/demo", Lifetimes: config.DefaultLifetimes(),
		SigningKeys: []config.SigningKey{{ID: "k1", Algorithm: "ES256", Private: key}}}
	client := &site.Client{ID: "repo-helper", AccessTokenFormat: config.TokenJWT}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	narrow := []authzdetails.Detail{{Type: "github_repository", Locations: []string{"https://api.github.com/repos/acme/api"}, Actions: []string{"read"}}}
	approved := []authzdetails.Detail{{Type: "github_repository", Locations: []string{"https://api.github.com/repos/acme/api"}, Actions: []string{"read", "write"}}}

	claimsOf := func(access string) map[string]json.RawMessage {
		tok, err := jwt.ParseSigned(access, []jose.SignatureAlgorithm{jose.ES256})
		if err != nil {
			t.Fatal(err)
		}
		var claims map[string]json.RawMessage
		if err := tok.Claims(key.Public(), &claims); err != nil {
			t.Fatal(err)
		}
		return claims
	}
	tokens, resp, err := Mint(p, now, Issue{Client: client, Subject: "person-1", AuthTime: now, Refresh: true,
		Details: narrow, RefreshDetails: approved})
	if err != nil {
		t.Fatal(err)
	}
	// go-jose writes the claims with sorted keys; what counts is the same details.
	var got []authzdetails.Detail
	if err := json.Unmarshal(claimsOf(resp.AccessToken)["authorization_details"], &got); err != nil || authzdetails.Marshal(got) != authzdetails.Marshal(narrow) {
		t.Errorf("authorization_details claim = %v (%v), want %s", got, err, authzdetails.Marshal(narrow))
	}
	if tokens[0].AuthorizationDetails != authzdetails.Marshal(narrow) || tokens[1].AuthorizationDetails != authzdetails.Marshal(approved) {
		t.Errorf("stored: access %s, refresh %s", tokens[0].AuthorizationDetails, tokens[1].AuthorizationDetails)
	}
	_, plain, err := Mint(p, now, Issue{Client: client, Subject: "person-1", AuthTime: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := claimsOf(plain.AccessToken)["authorization_details"]; ok || plain.AuthorizationDetails != nil {
		t.Error("a token minted without details carries an authorization_details claim")
	}
}

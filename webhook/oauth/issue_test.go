package oauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/webhook/site"
)

// A JWT access token says who it acts for the way introspection does: a person's carries the
// person in sub and latchkey_subject_type person; a client-only token has no sub at all and
// latchkey_subject_type client, so a resource server reading sub finds no person.
func TestAccessJWTSubject(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p := &config.Project{Key: "team/demo", Issuer: "https://auth.example/team/demo", Lifetimes: config.DefaultLifetimes(),
		SigningKeys: []config.SigningKey{{ID: "k1", Algorithm: "ES256", Private: key}}}
	client := &site.Client{ID: "lkc_service", AccessTokenFormat: config.TokenJWT}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

	for _, tt := range []struct {
		name     string
		subject  string
		wantSub  any
		wantType string
	}{
		{"a person's token", "person-1", "person-1", SubjectTypePerson},
		{"a client-only token", "", nil, SubjectTypeClient},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, resp, err := Mint(p, now, Issue{Client: client, Subject: tt.subject, AuthTime: now, Audience: []string{"https://api.example/"}})
			if err != nil {
				t.Fatal(err)
			}
			tok, err := jwt.ParseSigned(resp.AccessToken, []jose.SignatureAlgorithm{jose.ES256})
			if err != nil {
				t.Fatal(err)
			}
			var claims map[string]any
			if err := tok.Claims(key.Public(), &claims); err != nil {
				t.Fatal(err)
			}
			if claims["sub"] != tt.wantSub || claims[SubjectTypeClaim] != tt.wantType || claims["client_id"] != client.ID {
				t.Errorf("claims %v, want sub %v and %s %q", claims, tt.wantSub, SubjectTypeClaim, tt.wantType)
			}
			if _, ok := claims["auth_time"]; ok != (tt.subject != "") {
				t.Errorf("auth_time present %v for subject %q", ok, tt.subject)
			}
		})
	}
}

// A DPoP-bound issuance: the JWT carries cnf.jkt, the answer says token_type DPoP, the stored
// access token keeps the thumbprint, and so does a public client's refresh token (a
// confidential client's is bound by its authentication instead).
func TestMintBound(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p := &config.Project{Key: "team/demo", Issuer: "https://auth.example/team/demo", Lifetimes: config.DefaultLifetimes(),
		SigningKeys: []config.SigningKey{{ID: "k1", Algorithm: "ES256", Private: key}}}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	const jkt = "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"
	for _, tt := range []struct {
		name      string
		client    *site.Client
		refreshed string
	}{
		{"public", &site.Client{ID: "pub", AuthMethod: site.AuthNone, AccessTokenFormat: config.TokenJWT}, jkt},
		{"confidential", &site.Client{ID: "conf", AuthMethod: site.AuthClientSecretBasic, SecretHash: []byte("h"), AccessTokenFormat: config.TokenJWT}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tokens, resp, err := Mint(p, now, Issue{Client: tt.client, Subject: "person-1", AuthTime: now, Refresh: true, JKT: jkt})
			if err != nil {
				t.Fatal(err)
			}
			if resp.TokenType != "DPoP" || tokens[0].JKT != jkt || tokens[1].JKT != tt.refreshed {
				t.Errorf("token_type %q, access jkt %q, refresh jkt %q", resp.TokenType, tokens[0].JKT, tokens[1].JKT)
			}
			tok, err := jwt.ParseSigned(resp.AccessToken, []jose.SignatureAlgorithm{jose.ES256})
			if err != nil {
				t.Fatal(err)
			}
			var claims struct {
				Cnf struct {
					JKT string `json:"jkt"`
				} `json:"cnf"`
			}
			if err := tok.Claims(key.Public(), &claims); err != nil || claims.Cnf.JKT != jkt {
				t.Errorf("cnf.jkt = %q (%v), want %s", claims.Cnf.JKT, err, jkt)
			}
		})
	}
}

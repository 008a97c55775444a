package oauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"reflect"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/site"
)

// Every token an agent gets for a person names the agent in act (RFC 8693 §4.1), in the stored
// token (which introspection answers from) and in the JWT alike; a client-only token has no
// act. A declared client is named by its administrator's display name; a client that
// registered itself is named by its id alone, even when it registered another agent's name.
// may_act comes from the declaring OAuthClient's spec.mayAct, with that client's name.
func TestMintDelegationClaims(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p := &config.Project{Key: "team/demo", Issuer: "https://auth.example/team/demo", Lifetimes: config.DefaultLifetimes(),
		SigningKeys: []config.SigningKey{{ID: "k1", Algorithm: "ES256", Private: key}},
		Clients: map[string]*config.Client{
			"lkc_repo":  {ID: "lkc_repo", Name: "Repo Helper", MayAct: "lkc_files"},
			"lkc_files": {ID: "lkc_files", Name: "Files MCP"},
		}}
	declared := &site.Client{ID: "lkc_repo", Name: "Repo Helper", AccessTokenFormat: config.TokenJWT}
	// A self-registered client that took the declared agent's name.
	impostor := &site.Client{ID: "5f0c6e0e9a1b4c2d8e7f6a5b4c3d2e1f", Name: "Repo Helper", Registered: true, AccessTokenFormat: config.TokenJWT}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

	for _, tt := range []struct {
		name       string
		client     *site.Client
		subject    string
		act        *store.Actor
		wantAct    *store.Actor
		wantMayAct *store.Actor
	}{
		{"a declared agent's person token", declared, "person-1", nil,
			&store.Actor{Sub: "lkc_repo", ClientName: "Repo Helper"}, &store.Actor{Sub: "lkc_files", ClientName: "Files MCP"}},
		{"a self-registered client's person token", impostor, "person-1", nil,
			&store.Actor{Sub: impostor.ID}, nil},
		{"a client-only token", declared, "", nil, nil, nil},
		{"a chain continued by an exchange", declared, "person-1", &store.Actor{Sub: "lkc_repo", Act: &store.Actor{Sub: "lkc_first"}},
			&store.Actor{Sub: "lkc_repo", Act: &store.Actor{Sub: "lkc_first"}}, &store.Actor{Sub: "lkc_files", ClientName: "Files MCP"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tokens, resp, err := Mint(p, now, Issue{Client: tt.client, Subject: tt.subject, AuthTime: now, Refresh: true, Act: tt.act})
			if err != nil {
				t.Fatal(err)
			}
			for _, tok := range tokens {
				if !reflect.DeepEqual(tok.Act, tt.wantAct) || !reflect.DeepEqual(tok.MayAct, tt.wantMayAct) {
					t.Errorf("stored %s: act %+v may_act %+v, want %+v %+v", tok.Kind, tok.Act, tok.MayAct, tt.wantAct, tt.wantMayAct)
				}
			}
			parsed, err := jwt.ParseSigned(resp.AccessToken, []jose.SignatureAlgorithm{jose.ES256})
			if err != nil {
				t.Fatal(err)
			}
			var claims struct {
				Act    *store.Actor `json:"act"`
				MayAct *store.Actor `json:"may_act"`
			}
			if err := parsed.Claims(key.Public(), &claims); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(claims.Act, tt.wantAct) || !reflect.DeepEqual(claims.MayAct, tt.wantMayAct) {
				t.Errorf("JWT act %+v may_act %+v, want %+v %+v", claims.Act, claims.MayAct, tt.wantAct, tt.wantMayAct)
			}
		})
	}
}

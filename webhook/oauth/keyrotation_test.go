package oauth_test

import (
	"encoding/json"
	"net/url"
	"slices"
	"testing"
	"time"

	"latchkey.dev/latchkey/test/stack"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/keys"
)

// TestSigningKeyRotation follows one rotation of the operator's signing keys through a
// Project's token endpoint and jwks.json: announce (the new key is published, the old one
// still signs), use (the new key signs, tokens the old one signed still verify), retire (the
// old key leaves once every token it signed has expired).
func TestSigningKeyRotation(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{})
	const announce, retire = 24 * time.Hour, 24 * time.Hour
	signing := &keys.Signing{Retire: retire}
	set := keys.New(h.Clock.Now())
	// What the compiler does whenever the keys Secret changes (controllers, operatorSigningKeys).
	publish := func() {
		t.Helper()
		signing.Store(set)
		ks, ok, err := signing.ProjectKeys(stack.ProjectKey, h.Project.Lifetimes.AccessToken)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		h.Update(func(p *config.Project) { p.SigningKeys = ks })
	}
	publish()
	oldID := set.Signing[0].ID

	issue := func() (string, string) {
		t.Helper()
		r := h.Token(url.Values{"grant_type": {"client_credentials"}}, "jwt", stack.JWTSecret)
		if r.Status != 200 {
			t.Fatal(r.Raw)
		}
		at := r.Str("access_token")
		tok, err := jwt.ParseSigned(at, []jose.SignatureAlgorithm{jose.ES256})
		if err != nil {
			t.Fatal(err)
		}
		return at, tok.Headers[0].KeyID
	}
	// verifies checks a token the way a resource server does: with the key of its kid from the
	// issuer's jwks.json, fetched now.
	jwks := func() jose.JSONWebKeySet {
		t.Helper()
		var set jose.JSONWebKeySet
		if err := json.Unmarshal([]byte(h.Browser().MustGet(h.Issuer+"/jwks.json").Body), &set); err != nil {
			t.Fatal(err)
		}
		return set
	}
	kids := func() []string {
		var out []string
		for _, k := range jwks().Keys {
			out = append(out, k.KeyID)
		}
		slices.Sort(out)
		return out
	}
	verifies := func(at string) bool {
		t.Helper()
		tok, err := jwt.ParseSigned(at, []jose.SignatureAlgorithm{jose.ES256})
		if err != nil {
			t.Fatal(err)
		}
		set := jwks()
		ks := set.Key(tok.Headers[0].KeyID)
		if len(ks) != 1 {
			return false
		}
		var c jwt.Claims
		return tok.Claims(ks[0].Key, &c) == nil
	}

	before, kid := issue()
	if kid != oldID || !verifies(before) {
		t.Fatalf("before rotation: kid %q, want %q", kid, oldID)
	}

	// Announce: the next key is published at once, but does not sign yet: a verifier that
	// fetched the JWKS a moment ago must not meet a kid it does not know.
	h.Clock.Advance(time.Hour)
	newID := set.AddSigning(h.Clock.Now(), announce)
	publish()
	if got := kids(); !slices.Equal(got, []string{oldID, newID}) {
		t.Fatalf("announced: jwks %v, want both %s and %s", got, oldID, newID)
	}
	if _, kid := issue(); kid != oldID {
		t.Errorf("during the announce period the new key signs (kid %q)", kid)
	}
	h.Clock.Advance(announce - time.Minute)
	last, kid := issue()
	if kid != oldID {
		t.Fatalf("a minute before the switch: kid %q", kid)
	}

	// Use: after the announce period the new key signs; what the old one signed still verifies.
	h.Clock.Advance(time.Minute)
	if _, kid := issue(); kid != newID {
		t.Errorf("after the announce period: kid %q, want the new key %q", kid, newID)
	}
	if !verifies(last) {
		t.Error("a token the old key signed a minute before the switch no longer verifies")
	}
	h.Clock.Advance(retire - time.Minute)
	if !slices.Contains(kids(), oldID) || !verifies(last) {
		t.Error("the old key left the JWKS before its retire period ended")
	}

	// Retire: once the retire period is over the old key is gone from the JWKS.
	h.Clock.Advance(time.Minute)
	if got := kids(); !slices.Equal(got, []string{newID}) {
		t.Errorf("after retire: jwks %v, want only %s", got, newID)
	}
	if verifies(last) {
		t.Error("a token of the retired key still verifies")
	}
	// The elected replica then removes the key from the Secret; nothing a Project publishes
	// changes.
	if !set.Prune(h.Clock.Now(), retire) || len(set.Signing) != 1 || set.Signing[0].ID != newID {
		t.Errorf("prune kept %v", set.Signing)
	}
	publish()
	if got := kids(); !slices.Equal(got, []string{newID}) {
		t.Errorf("after prune: jwks %v", got)
	}
}

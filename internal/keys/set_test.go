package keys

import (
	"bytes"
	"crypto/ecdsa"
	"encoding/base64"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func TestSetRoundTrip(t *testing.T) {
	s := New(t0)
	s.AddSigning(t0.Add(time.Hour), 24*time.Hour)
	s.AddSealing(t0.Add(time.Hour), time.Minute)
	data, err := s.Data()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Sealing) != 2 || len(got.Signing) != 2 || got.State.SealingNext == "" {
		t.Fatalf("parsed %+v", got)
	}
	for i := range s.Signing {
		a, b := s.Signing[i], got.Signing[i]
		if a.ID != b.ID || !bytes.Equal(a.Seed, b.Seed) || !a.ActiveAt.Equal(b.ActiveAt) || !a.PublishedAt.Equal(b.PublishedAt) {
			t.Errorf("signing key %d: %+v, want %+v", i, b, a)
		}
	}
}

// A Secret an earlier chart made, or one written by hand: sealing keys only, raw or encoded.
// The greatest id seals, as before; the Keeper adds a signing key without touching them.
func TestParseHandWritten(t *testing.T) {
	raw := bytes.Repeat([]byte{1}, 32)
	enc := []byte(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 32)) + "\n")
	s, err := Parse(map[string][]byte{"2026-10": raw, "2026-11": enc})
	if err != nil {
		t.Fatal(err)
	}
	if p := s.PrimarySealing(t0); p != "2026-11" || !bytes.Equal(s.Sealing["2026-10"], raw) || len(s.Signing) != 0 {
		t.Fatalf("primary %q, set %+v", p, s)
	}
	for name, data := range map[string]map[string][]byte{
		"short key":        {"k": []byte("short")},
		"bad id":           {"../k": raw},
		"state names none": {"k": raw, StateEntry: []byte(`{"sealingPrimary":"gone"}`)},
		"bad signing seed": {"k": raw, SigningPrefix + "x": []byte("short")},
	} {
		if _, err := Parse(data); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

// A new sealing key seals only after its announce period, so no replica that has not loaded
// it yet meets a value sealed with it; Promote then makes it primary and starts the re-seal.
func TestSealingAnnounce(t *testing.T) {
	s := New(t0)
	old := s.PrimarySealing(t0)
	id := s.AddSealing(t0.Add(time.Second), 2*time.Minute)
	if s.PrimarySealing(t0.Add(time.Minute)) != old || s.Promote(t0.Add(time.Minute)) {
		t.Fatal("the new sealing key seals before its announce period ended")
	}
	if s.PrimarySealing(t0.Add(3*time.Minute)) != id || !s.Promote(t0.Add(3*time.Minute)) {
		t.Fatal("the new sealing key does not seal after its announce period")
	}
	if s.State.SealingPrimary != id || s.State.Reseal == nil || s.State.Reseal.To != id || s.State.SealingNext != "" {
		t.Fatalf("state %+v", s.State)
	}
}

// TestProjectKeysAreTenantsOwn is an attack by the tenant in the next namespace: every Project
// signs with a key derived from the same seed, so a token a Project in team-a issued must not
// verify with the keys team-b publishes (a resource server that checks the signature against
// the wrong issuer's JWKS, or a token copied across, gets nothing).
func TestProjectKeysAreTenantsOwn(t *testing.T) {
	s := &Signing{Retire: time.Hour}
	s.Store(New(t0))
	a, _, err := s.ProjectKeys("team-a/main", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := s.ProjectKeys("team-b/main", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: a[0].Private}, (&jose.SignerOptions{}).WithHeader("kid", a[0].ID))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(signer).Claims(jwt.Claims{Issuer: "https://l.example/team-a/main"}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := jwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		t.Fatal(err)
	}
	var c jwt.Claims
	if err := parsed.Claims(a[0].Private.(*ecdsa.PrivateKey).Public(), &c); err != nil {
		t.Fatalf("the issuing Project's own key does not verify: %v", err)
	}
	if a[0].ID != b[0].ID {
		t.Fatalf("kids differ (%s, %s): the test would prove nothing", a[0].ID, b[0].ID)
	}
	if err := parsed.Claims(b[0].Private.(*ecdsa.PrivateKey).Public(), &c); err == nil {
		t.Fatal("a token of team-a verifies with team-b's key of the same kid")
	}
	// Derivation is deterministic: every replica derives the same key.
	again, err := ProjectKey(s.set.Load().Signing[0].Seed, "team-a/main")
	if err != nil || !again.Equal(a[0].Private) {
		t.Fatal("derivation is not deterministic")
	}
}

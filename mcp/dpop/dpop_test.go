package dpop_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/mcp/dpop"
)

func keys(t *testing.T) map[string]crypto.Signer {
	t.Helper()
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	rs, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]crypto.Signer{"ES256": ec, "EdDSA": ed, "PS256": rs}
}

// forge re-signs nothing: it swaps one part of a proof for another, so the signature no longer
// covers what is presented.
func withHeader(t *testing.T, proof string, edit func(map[string]any)) string {
	t.Helper()
	parts := strings.Split(proof, ".")
	b, _ := base64.RawURLEncoding.DecodeString(parts[0])
	var h map[string]any
	_ = json.Unmarshal(b, &h)
	edit(h)
	nb, _ := json.Marshal(h)
	parts[0] = base64.RawURLEncoding.EncodeToString(nb)
	return strings.Join(parts, ".")
}

func TestVerify(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	const u = "https://as.example/ns/p/token"
	for alg, key := range keys(t) {
		t.Run(alg, func(t *testing.T) {
			sign := func(c dpop.Claims) string {
				if c.Method == "" {
					c.Method = "POST"
				}
				if c.URL == "" {
					c.URL = u
				}
				if c.IssuedAt.IsZero() {
					c.IssuedAt = now
				}
				p, err := dpop.Sign(key, c)
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
			good := dpop.Check{Method: "POST", URL: u, Now: now}
			p, err := dpop.Verify(sign(dpop.Claims{JTI: "one", Nonce: "n"}), good)
			if err != nil {
				t.Fatalf("good proof refused: %v", err)
			}
			want, _ := dpop.Thumbprint(key)
			if p.JKT != want || p.JTI != "one" || p.Nonce != "n" || p.Algorithm != alg || !p.ReplayUntil.Equal(now.Add(dpop.DefaultWindow)) {
				t.Errorf("proof = %+v, want jkt %s", p, want)
			}
			// RFC 9449 §4.3: query and fragment are ignored; scheme and host case and the
			// default port are normalised.
			if _, err := dpop.Verify(sign(dpop.Claims{URL: "HTTPS://AS.example:443/ns/p/token"}), dpop.Check{Method: "POST", URL: u + "?x=1", Now: now}); err != nil {
				t.Errorf("normalised htu refused: %v", err)
			}
			other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			otherProof, _ := dpop.Sign(other, dpop.Claims{Method: "POST", URL: u, IssuedAt: now})
			at := dpop.Check{Method: "GET", URL: "https://mcp.example/mcp", Now: now, AccessToken: "tok"}
			bad := map[string]struct {
				proof string
				check dpop.Check
			}{
				"wrong htm":         {sign(dpop.Claims{Method: "GET"}), good},
				"wrong htu path":    {sign(dpop.Claims{URL: "https://as.example/ns/p/other"}), good},
				"wrong htu host":    {sign(dpop.Claims{URL: "https://evil.example/ns/p/token"}), good},
				"wrong htu port":    {sign(dpop.Claims{URL: "https://as.example:8443/ns/p/token"}), good},
				"iat too old":       {sign(dpop.Claims{IssuedAt: now.Add(-2 * time.Minute)}), good},
				"iat in the future": {sign(dpop.Claims{IssuedAt: now.Add(2 * time.Minute)}), good},
				"no ath":            {sign(dpop.Claims{Method: "GET", URL: at.URL}), at},
				"wrong ath":         {sign(dpop.Claims{Method: "GET", URL: at.URL, AccessToken: "other"}), at},
				"typ JWT":           {withHeader(t, sign(dpop.Claims{}), func(h map[string]any) { h["typ"] = "JWT" }), good},
				"alg none":          {withHeader(t, sign(dpop.Claims{}), func(h map[string]any) { h["alg"] = "none" }), good},
				"alg HS256":         {withHeader(t, sign(dpop.Claims{}), func(h map[string]any) { h["alg"] = "HS256" }), good},
				"private jwk": {withHeader(t, sign(dpop.Claims{}), func(h map[string]any) {
					h["jwk"].(map[string]any)["d"] = "AAAA"
				}), good},
				"no jwk": {withHeader(t, sign(dpop.Claims{}), func(h map[string]any) { delete(h, "jwk") }), good},
				// The proof's jwk swapped for another key: the signature no longer verifies.
				"jwk of another key": {withHeader(t, otherProof, func(h map[string]any) {
					pub, _ := json.Marshal(h["jwk"])
					_ = pub
					h["jwk"] = jwkOf(t, key)
				}), good},
				"crit":        {withHeader(t, sign(dpop.Claims{}), func(h map[string]any) { h["crit"] = []string{"x"} }), good},
				"not a JWS":   {"a.b", good},
				"empty":       {"", good},
				"unsigned":    {strings.Join(strings.Split(sign(dpop.Claims{}), ".")[:2], ".") + ".", good},
				"garbage sig": {strings.Join(strings.Split(sign(dpop.Claims{}), ".")[:2], ".") + ".AAAA", good},
			}
			for name, c := range bad {
				if _, err := dpop.Verify(c.proof, c.check); !errors.Is(err, dpop.ErrInvalidProof) {
					t.Errorf("%s: err = %v, want ErrInvalidProof", name, err)
				}
			}
			if _, err := dpop.Verify(sign(dpop.Claims{Method: "GET", URL: at.URL, AccessToken: "tok"}), at); err != nil {
				t.Errorf("good ath refused: %v", err)
			}
		})
	}
}

func jwkOf(t *testing.T, key crypto.Signer) map[string]any {
	t.Helper()
	p, _ := dpop.Sign(key, dpop.Claims{Method: "POST", URL: "https://x.example/"})
	b, _ := base64.RawURLEncoding.DecodeString(strings.Split(p, ".")[0])
	var h map[string]any
	_ = json.Unmarshal(b, &h)
	return h["jwk"].(map[string]any)
}

// RFC 7638 §3.1's example key and thumbprint.
func TestThumbprintRFC7638(t *testing.T) {
	const raw = `{"kty":"RSA","n":"0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw","e":"AQAB","alg":"RS256","kid":"2011-04-29"}`
	_, jkt, err := dpop.ParseJWK([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	if jkt != "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs" {
		t.Errorf("thumbprint = %s", jkt)
	}
}

// BenchmarkVerify is the cost of checking one proof, by algorithm, without any store.
func BenchmarkVerify(b *testing.B) {
	now := time.Unix(1_800_000_000, 0)
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	rs, _ := rsa.GenerateKey(rand.Reader, 2048)
	for _, c := range []struct {
		alg string
		key crypto.Signer
	}{{"ES256", ec}, {"EdDSA", ed}, {"PS256", rs}} {
		b.Run(c.alg, func(b *testing.B) {
			p, err := dpop.Sign(c.key, dpop.Claims{Method: "POST", URL: "https://as.example/t", IssuedAt: now})
			if err != nil {
				b.Fatal(err)
			}
			check := dpop.Check{Method: "POST", URL: "https://as.example/t", Now: now}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := dpop.Verify(p, check); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

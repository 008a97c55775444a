package dpop_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"math/big"
	"os"
	"strings"
	"testing"
	"testing/cryptotest"
	"time"

	"latchkey.dev/latchkey/mcp/dpop"
)

// The test vectors of DPoP proof verification (testdata/vectors.json). The authorization
// server's verifier (internal/dpop, on go-jose) runs the same file and must reach the same
// answer on every vector (docs/decisions/0071-one-jose-stack.md). The file is made by
// TestWriteVectors with -update, deterministically (testing/cryptotest), and committed.

var update = flag.Bool("update", false, "write testdata/vectors.json again")

const vectorsFile = "testdata/vectors.json"

// Vectors is the file's shape.
type Vectors struct {
	Comment string   `json:"comment"`
	Now     int64    `json:"now"`
	Vectors []Vector `json:"vectors"`
}

// Vector is one proof, the request it comes with, and what a verifier must answer. For a valid
// proof, the thumbprint, jti, nonce and alg a verifier reports.
type Vector struct {
	Name        string `json:"name"`
	Proof       string `json:"proof"`
	Method      string `json:"method"`
	URL         string `json:"url"`
	AccessToken string `json:"access_token,omitempty"`
	Valid       bool   `json:"valid"`
	JKT         string `json:"jkt,omitempty"`
	JTI         string `json:"jti,omitempty"`
	Nonce       string `json:"nonce,omitempty"`
	Alg         string `json:"alg,omitempty"`
}

func TestVectors(t *testing.T) {
	raw, err := os.ReadFile(vectorsFile)
	if err != nil {
		t.Fatal(err)
	}
	var vs Vectors
	if err := json.Unmarshal(raw, &vs); err != nil {
		t.Fatal(err)
	}
	if len(vs.Vectors) < 40 {
		t.Fatalf("only %d vectors", len(vs.Vectors))
	}
	now := time.Unix(vs.Now, 0)
	for _, v := range vs.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			p, err := dpop.Verify(v.Proof, dpop.Check{Method: v.Method, URL: v.URL, Now: now, AccessToken: v.AccessToken})
			if !v.Valid {
				if !errors.Is(err, dpop.ErrInvalidProof) {
					t.Fatalf("accepted (%+v, %v), want ErrInvalidProof", p, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if p.JKT != v.JKT || p.JTI != v.JTI || p.Nonce != v.Nonce || p.Algorithm != v.Alg {
				t.Errorf("proof = %+v, want jkt %s jti %s nonce %q alg %s", p, v.JKT, v.JTI, v.Nonce, v.Alg)
			}
		})
	}
}

// TestWriteVectors makes testdata/vectors.json (go test -run TestWriteVectors -update).
func TestWriteVectors(t *testing.T) {
	if !*update {
		t.Skip("run with -update to write " + vectorsFile)
	}
	cryptotest.SetGlobalRandom(t, 71)
	g := newGenerator(t)
	vs := Vectors{
		Comment: "DPoP proofs (RFC 9449) and what a verifier answers, at now with a 60 s window. " +
			"Made by TestWriteVectors in latchkey.dev/latchkey/mcp/dpop; run by it and by internal/dpop.",
		Now:     g.now.Unix(),
		Vectors: g.vectors(),
	}
	out, err := json.MarshalIndent(vs, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(vectorsFile, append(out, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

const (
	tokenURL = "https://as.example/ns/p/token"
	mcpURL   = "https://mcp.example/mcp"
)

type generator struct {
	t      *testing.T
	now    time.Time
	ec     *ecdsa.PrivateKey
	ec384  *ecdsa.PrivateKey
	ed     ed25519.PrivateKey
	rsa    *rsa.PrivateKey
	rsa1k  *rsa.PrivateKey
	rsa4k  *rsa.PrivateKey
	other  *ecdsa.PrivateKey
	vector []Vector
}

func newGenerator(t *testing.T) *generator {
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	g := &generator{t: t, now: time.Unix(1_800_000_000, 0)}
	var err error
	g.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	g.other, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	g.ec384, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	must(err)
	_, g.ed, err = ed25519.GenerateKey(rand.Reader)
	must(err)
	g.rsa, err = rsa.GenerateKey(rand.Reader, 2048)
	must(err)
	g.rsa1k, err = rsa.GenerateKey(rand.Reader, 1024)
	must(err)
	g.rsa4k, err = rsa.GenerateKey(rand.Reader, 4096)
	must(err)
	return g
}

var enc = base64.RawURLEncoding

func b64int(e int) string { return enc.EncodeToString(big.NewInt(int64(e)).Bytes()) }

// jwk is the public JWK of key.
func jwk(key crypto.Signer) map[string]any {
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		raw, _ := k.PublicKey.Bytes()
		size := (len(raw) - 1) / 2
		crv := map[int]string{32: "P-256", 48: "P-384"}[size]
		return map[string]any{"kty": "EC", "crv": crv, "x": enc.EncodeToString(raw[1 : 1+size]), "y": enc.EncodeToString(raw[1+size:])}
	case ed25519.PrivateKey:
		return map[string]any{"kty": "OKP", "crv": "Ed25519", "x": enc.EncodeToString(k.Public().(ed25519.PublicKey))}
	case *rsa.PrivateKey:
		return map[string]any{"kty": "RSA", "n": enc.EncodeToString(k.N.Bytes()), "e": b64int(k.E)}
	}
	panic("key type")
}

// sign signs input as alg says, with key; salt is PS256's salt length (0: the hash's size).
func sign(t *testing.T, alg string, key crypto.Signer, input []byte, salt int) []byte {
	t.Helper()
	sum := sha256.Sum256(input)
	var sig []byte
	var err error
	switch alg {
	case "ES256", "ES256-DER", "ES384":
		k := key.(*ecdsa.PrivateKey)
		digest := sum[:]
		if alg == "ES384" {
			s := sha512.Sum384(input)
			digest = s[:]
		}
		if alg == "ES256-DER" {
			return must(ecdsa.SignASN1(rand.Reader, k, digest))
		}
		r, s, err := ecdsa.Sign(rand.Reader, k, digest)
		if err != nil {
			t.Fatal(err)
		}
		size := (k.Curve.Params().BitSize + 7) / 8
		sig = make([]byte, 2*size)
		r.FillBytes(sig[:size])
		s.FillBytes(sig[size:])
	case "EdDSA":
		sig, err = key.Sign(rand.Reader, input, crypto.Hash(0))
	case "RS256":
		sig, err = rsa.SignPKCS1v15(rand.Reader, key.(*rsa.PrivateKey), crypto.SHA256, sum[:])
	case "PS256":
		if salt == 0 {
			salt = rsa.PSSSaltLengthEqualsHash
		}
		sig, err = rsa.SignPSS(rand.Reader, key.(*rsa.PrivateKey), crypto.SHA256, sum[:], &rsa.PSSOptions{SaltLength: salt})
	default:
		t.Fatalf("alg %s", alg)
	}
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// proof is what a vector is made of: the header and claims, how it is signed, and edits.
type proof struct {
	key    crypto.Signer
	alg    string // the header's alg; also how it is signed unless signAs is set
	signAs string
	salt   int
	header map[string]any // merged over typ, alg, jwk; a nil value deletes
	claims map[string]any // merged over jti, htm, htu, iat; a nil value deletes
	// rawHeader and rawClaims, when set, replace the encoded JSON.
	rawHeader, rawClaims string
	// edit changes the compact proof after signing.
	edit func(string) string
}

func (g *generator) make(p proof) string {
	t := g.t
	t.Helper()
	if p.key == nil {
		p.key = g.ec
	}
	if p.alg == "" {
		p.alg = "ES256"
	}
	h := map[string]any{"typ": "dpop+jwt", "alg": p.alg, "jwk": jwk(p.key)}
	for k, v := range p.header {
		if v == nil {
			delete(h, k)
		} else {
			h[k] = v
		}
	}
	c := map[string]any{"jti": "j-" + p.alg, "htm": "POST", "htu": tokenURL, "iat": g.now.Unix()}
	for k, v := range p.claims {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	hb, _ := json.Marshal(h)
	cb, _ := json.Marshal(c)
	if p.rawHeader != "" {
		hb = []byte(p.rawHeader)
	}
	if p.rawClaims != "" {
		cb = []byte(p.rawClaims)
	}
	input := enc.EncodeToString(hb) + "." + enc.EncodeToString(cb)
	var sig []byte
	switch how := cmpOr(p.signAs, p.alg); how {
	case "none":
	case "HS256":
		// The old confusion: the verifier's "key" is the public jwk, so the attacker MACs
		// with its bytes.
		pub, _ := json.Marshal(h["jwk"])
		m := hmac.New(sha256.New, pub)
		m.Write([]byte(input))
		sig = m.Sum(nil)
	default:
		sig = sign(t, how, p.key, []byte(input), p.salt)
	}
	out := input + "." + enc.EncodeToString(sig)
	if p.edit != nil {
		out = p.edit(out)
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func thumbprint(t *testing.T, key crypto.Signer) string {
	t.Helper()
	j, err := dpop.Thumbprint(key)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func (g *generator) valid(name string, p proof, method, u, token string) {
	g.t.Helper()
	key := p.key
	if key == nil {
		key = g.ec
	}
	alg := cmpOr(p.alg, "ES256")
	jti := "j-" + alg
	nonce := ""
	if v, ok := p.claims["jti"].(string); ok {
		jti = v
	}
	if v, ok := p.claims["nonce"].(string); ok {
		nonce = v
	}
	g.vector = append(g.vector, Vector{Name: name, Proof: g.make(p), Method: method, URL: u, AccessToken: token,
		Valid: true, JKT: thumbprint(g.t, key), JTI: jti, Nonce: nonce, Alg: alg})
}

func (g *generator) invalid(name string, p proof, method, u, token string) {
	g.t.Helper()
	g.vector = append(g.vector, Vector{Name: name, Proof: g.make(p), Method: method, URL: u, AccessToken: token})
}

func ath(token string) string {
	sum := sha256.Sum256([]byte(token))
	return enc.EncodeToString(sum[:])
}

func (g *generator) vectors() []Vector {
	now := g.now.Unix()
	P, T := "POST", tokenURL
	// Accepted.
	g.valid("ES256", proof{}, P, T, "")
	g.valid("EdDSA", proof{key: g.ed, alg: "EdDSA"}, P, T, "")
	g.valid("PS256", proof{key: g.rsa, alg: "PS256"}, P, T, "")
	g.valid("RS256", proof{key: g.rsa, alg: "RS256"}, P, T, "")
	g.valid("PS256 with RSA-4096", proof{key: g.rsa4k, alg: "PS256"}, P, T, "")
	g.valid("PS256 with a one-byte salt", proof{key: g.rsa, alg: "PS256", salt: 1, claims: map[string]any{"jti": "salt-1"}}, P, T, "")
	g.valid("PS256 with a 100-byte salt", proof{key: g.rsa, alg: "PS256", salt: 100, claims: map[string]any{"jti": "salt-100"}}, P, T, "")
	g.valid("nonce", proof{claims: map[string]any{"jti": "with-nonce", "nonce": "server-nonce"}}, P, T, "")
	g.valid("htu normalised: scheme and host case, default port", proof{claims: map[string]any{"htu": "HTTPS://AS.Example:443/ns/p/token"}}, P, T, "")
	g.valid("request query and fragment ignored", proof{}, P, T+"?x=1#f", "")
	g.valid("htu query ignored", proof{claims: map[string]any{"htu": T + "?a=b"}}, P, T, "")
	g.valid("iat at the window's start", proof{claims: map[string]any{"iat": now - 60}}, P, T, "")
	g.valid("iat at the window's end", proof{claims: map[string]any{"iat": now + 60}}, P, T, "")
	g.valid("iat with a fraction", proof{claims: map[string]any{"iat": float64(now) + 0.5}}, P, T, "")
	g.valid("ath of the access token", proof{claims: map[string]any{"htm": "GET", "htu": mcpURL, "ath": ath("tok")}}, "GET", mcpURL, "tok")
	g.valid("ath not asked for", proof{claims: map[string]any{"ath": ath("tok")}}, P, T, "")
	g.valid("kid and unknown header members", proof{header: map[string]any{"kid": "k1", "x-extra": true}}, P, T, "")
	g.valid("kid null", proof{header: map[string]any{"kid": json.RawMessage("null")}}, P, T, "")
	g.valid("jwk with alg, use and kid", proof{header: map[string]any{"jwk": merge(jwk(g.ec), map[string]any{"alg": "ES256", "use": "sig", "kid": "k1"})}}, P, T, "")
	g.valid("jwk with upper-case D and X5C, which are no JWK members", proof{header: map[string]any{"jwk": merge(jwk(g.ec), map[string]any{"D": "AAAA", "X5C": []string{"AAAA"}})}}, P, T, "")
	g.valid("jwk with x5c null", proof{header: map[string]any{"jwk": merge(jwk(g.ec), map[string]any{"x5c": json.RawMessage("null")})}}, P, T, "")
	g.valid("jwk with d null", proof{header: map[string]any{"jwk": merge(jwk(g.ec), map[string]any{"d": json.RawMessage("null")})}}, P, T, "")
	g.valid("jti of the longest length", proof{claims: map[string]any{"jti": strings.Repeat("j", dpop.MaxJTILength)}}, P, T, "")

	// Refused: the header.
	g.invalid("typ JWT", proof{header: map[string]any{"typ": "JWT"}}, P, T, "")
	g.invalid("typ missing", proof{header: map[string]any{"typ": nil}}, P, T, "")
	g.invalid("typ under an upper-case name", proof{header: map[string]any{"typ": nil, "TYP": "dpop+jwt"}}, P, T, "")
	g.invalid("typ not a string", proof{header: map[string]any{"typ": 1}}, P, T, "")
	g.invalid("alg none, no signature", proof{alg: "none"}, P, T, "")
	g.invalid("alg none, ES256 signature", proof{alg: "none", signAs: "ES256"}, P, T, "")
	g.invalid("alg HS256 keyed with the public jwk", proof{alg: "HS256"}, P, T, "")
	g.invalid("alg ES384", proof{key: g.ec384, alg: "ES384"}, P, T, "")
	g.invalid("alg missing", proof{header: map[string]any{"alg": nil}, signAs: "ES256"}, P, T, "")
	g.invalid("alg ES256 with an Ed25519 key", proof{key: g.ed, alg: "ES256", signAs: "EdDSA"}, P, T, "")
	g.invalid("alg EdDSA with a P-256 key", proof{alg: "EdDSA", signAs: "ES256"}, P, T, "")
	g.invalid("crit", proof{header: map[string]any{"crit": []string{"exp"}, "exp": 1}}, P, T, "")
	g.invalid("crit b64 false", proof{header: map[string]any{"crit": []string{"b64"}, "b64": false}}, P, T, "")
	g.invalid("b64 true", proof{header: map[string]any{"b64": true}}, P, T, "")
	g.invalid("crit null", proof{header: map[string]any{"crit": json.RawMessage("null")}}, P, T, "")
	g.invalid("b64 null", proof{header: map[string]any{"b64": json.RawMessage("null")}}, P, T, "")
	g.invalid("x5c in the header", proof{header: map[string]any{"x5c": []string{"AAAA"}}}, P, T, "")
	g.invalid("x5c in the jwk", proof{header: map[string]any{"jwk": merge(jwk(g.ec), map[string]any{"x5c": []string{"AAAA"}})}}, P, T, "")
	g.invalid("kid a number", proof{header: map[string]any{"kid": 1}}, P, T, "")
	g.invalid("nonce header a number", proof{header: map[string]any{"nonce": 1}}, P, T, "")
	g.invalid("header not JSON", proof{rawHeader: "{typ"}, P, T, "")

	// Refused: the key.
	g.invalid("jwk missing", proof{header: map[string]any{"jwk": nil}}, P, T, "")
	g.invalid("jwk null", proof{header: map[string]any{"jwk": json.RawMessage("null")}}, P, T, "")
	g.invalid("jwk with the EC private key", proof{header: map[string]any{"jwk": merge(jwk(g.ec), map[string]any{"d": enc.EncodeToString(must(g.ec.Bytes()))})}}, P, T, "")
	g.invalid("jwk with the RSA private key", proof{key: g.rsa, alg: "PS256", header: map[string]any{"jwk": merge(jwk(g.rsa), map[string]any{
		"d": enc.EncodeToString(g.rsa.D.Bytes()), "p": enc.EncodeToString(g.rsa.Primes[0].Bytes()), "q": enc.EncodeToString(g.rsa.Primes[1].Bytes()),
	})}}, P, T, "")
	g.invalid("jwk with only qi", proof{key: g.rsa, alg: "PS256", header: map[string]any{"jwk": merge(jwk(g.rsa), map[string]any{"qi": "AQAB"})}}, P, T, "")
	g.invalid("jwk of a symmetric key", proof{header: map[string]any{"jwk": map[string]any{"kty": "oct", "k": enc.EncodeToString([]byte("secret"))}}}, P, T, "")
	g.invalid("jwk of another key", proof{header: map[string]any{"jwk": jwk(g.other)}}, P, T, "")
	g.invalid("jwk on P-384 with ES256", proof{key: g.ec384, alg: "ES256"}, P, T, "")
	g.invalid("jwk X25519", proof{key: g.ed, alg: "EdDSA", header: map[string]any{"jwk": map[string]any{"kty": "OKP", "crv": "X25519", "x": jwk(g.ed)["x"]}}}, P, T, "")
	g.invalid("jwk EC point off the curve", proof{header: map[string]any{"jwk": merge(jwk(g.ec), map[string]any{"y": jwk(g.other)["y"]})}}, P, T, "")
	g.invalid("jwk EC coordinate short", proof{header: map[string]any{"jwk": merge(jwk(g.ec), map[string]any{"x": enc.EncodeToString(make([]byte, 31))})}}, P, T, "")
	g.invalid("jwk members X and Y in upper case", proof{header: map[string]any{"jwk": map[string]any{"kty": "EC", "crv": "P-256", "X": jwk(g.ec)["x"], "Y": jwk(g.ec)["y"]}}}, P, T, "")
	g.invalid("jwk RSA members N and E in upper case", proof{key: g.rsa, alg: "PS256", header: map[string]any{"jwk": map[string]any{"kty": "RSA", "N": jwk(g.rsa)["n"], "E": jwk(g.rsa)["e"]}}}, P, T, "")
	g.invalid("jwk kty missing", proof{header: map[string]any{"jwk": merge(jwk(g.ec), map[string]any{"kty": nil})}}, P, T, "")
	g.invalid("jwk RSA-1024", proof{key: g.rsa1k, alg: "PS256"}, P, T, "")
	bigN := make([]byte, 4160/8)
	bigN[0], bigN[len(bigN)-1] = 0x80, 1
	g.invalid("jwk RSA of 4160 bits", proof{key: g.rsa, alg: "PS256", header: map[string]any{"jwk": map[string]any{"kty": "RSA", "n": enc.EncodeToString(bigN), "e": "AQAB"}}}, P, T, "")
	g.invalid("jwk RSA exponent even", proof{key: g.rsa, alg: "PS256", header: map[string]any{"jwk": merge(jwk(g.rsa), map[string]any{"e": b64int(65536)})}}, P, T, "")
	g.invalid("jwk RSA exponent 1", proof{key: g.rsa, alg: "PS256", header: map[string]any{"jwk": merge(jwk(g.rsa), map[string]any{"e": "AQ"})}}, P, T, "")
	g.invalid("jwk RSA exponent with a leading zero", proof{key: g.rsa, alg: "PS256", header: map[string]any{"jwk": merge(jwk(g.rsa), map[string]any{"e": "AAEAAQ"})}}, P, T, "")
	g.invalid("jwk RSA modulus with a leading zero", proof{key: g.rsa, alg: "PS256", header: map[string]any{"jwk": merge(jwk(g.rsa), map[string]any{"n": enc.EncodeToString(append([]byte{0}, g.rsa.N.Bytes()...))})}}, P, T, "")

	// Refused: the signature and the encoding.
	g.invalid("signature of other claims", proof{edit: func(s string) string {
		parts := strings.Split(s, ".")
		other := strings.Split(g.make(proof{claims: map[string]any{"jti": "other"}}), ".")
		return parts[0] + "." + other[1] + "." + parts[2]
	}}, P, T, "")
	g.invalid("signature with a bit flipped", proof{edit: func(s string) string {
		parts := strings.Split(s, ".")
		sig, _ := enc.DecodeString(parts[2])
		sig[10] ^= 1
		return parts[0] + "." + parts[1] + "." + enc.EncodeToString(sig)
	}}, P, T, "")
	g.invalid("signature empty", proof{edit: func(s string) string { return s[:strings.LastIndex(s, ".")+1] }}, P, T, "")
	g.invalid("ES256 signature in ASN.1", proof{signAs: "ES256-DER"}, P, T, "")
	g.invalid("PS256 signature made with RS256", proof{key: g.rsa, alg: "PS256", signAs: "RS256"}, P, T, "")
	// 64 bytes leave four bits unused in the last character; setting them changes the text and
	// not the bytes a lenient decoder reads.
	g.invalid("signature with stray trailing bits", proof{edit: func(s string) string {
		last := s[len(s)-1:]
		i := strings.Index("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", last)
		return s[:len(s)-1] + string("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[i^1])
	}}, P, T, "")
	g.invalid("line break in the signature", proof{edit: func(s string) string { return s[:len(s)-10] + "\n" + s[len(s)-10:] }}, P, T, "")
	g.invalid("padding", proof{edit: func(s string) string { return s + "==" }}, P, T, "")
	g.invalid("JSON serialization", proof{edit: func(s string) string {
		parts := strings.Split(s, ".")
		b, _ := json.Marshal(map[string]string{"protected": parts[0], "payload": parts[1], "signature": parts[2]})
		return string(b)
	}}, P, T, "")
	g.invalid("four parts", proof{edit: func(s string) string { return s + ".AAAA" }}, P, T, "")
	g.invalid("two parts", proof{edit: func(s string) string { return s[:strings.LastIndex(s, ".")] }}, P, T, "")
	g.invalid("empty", proof{edit: func(string) string { return "" }}, P, T, "")
	g.invalid("too long", proof{claims: map[string]any{"pad": strings.Repeat("p", dpop.MaxProofLength)}}, P, T, "")

	// Refused: the claims.
	g.invalid("claims not JSON", proof{rawClaims: "{jti"}, P, T, "")
	g.invalid("htm of another method", proof{claims: map[string]any{"htm": "GET"}}, P, T, "")
	g.invalid("htm in lower case", proof{claims: map[string]any{"htm": "post"}}, P, T, "")
	g.invalid("htu of another endpoint", proof{claims: map[string]any{"htu": "https://as.example/ns/p/introspect"}}, P, T, "")
	g.invalid("htu of another host", proof{claims: map[string]any{"htu": "https://evil.example/ns/p/token"}}, P, T, "")
	g.invalid("htu of another port", proof{claims: map[string]any{"htu": "https://as.example:8443/ns/p/token"}}, P, T, "")
	g.invalid("htu over http", proof{claims: map[string]any{"htu": "http://as.example/ns/p/token"}}, P, T, "")
	g.invalid("htu path in another case", proof{claims: map[string]any{"htu": "https://as.example/NS/p/token"}}, P, T, "")
	g.invalid("htu with user info", proof{claims: map[string]any{"htu": "https://u@as.example/ns/p/token"}}, P, T, "")
	g.invalid("htu relative", proof{claims: map[string]any{"htu": "/ns/p/token"}}, P, T, "")
	g.invalid("htu missing", proof{claims: map[string]any{"htu": nil}}, P, T, "")
	g.invalid("iat too old", proof{claims: map[string]any{"iat": now - 61}}, P, T, "")
	g.invalid("iat in the future", proof{claims: map[string]any{"iat": now + 61}}, P, T, "")
	g.invalid("iat missing", proof{claims: map[string]any{"iat": nil}}, P, T, "")
	g.invalid("iat a string", proof{claims: map[string]any{"iat": "1800000000"}}, P, T, "")
	g.invalid("iat far in the future", proof{claims: map[string]any{"iat": 1e300}}, P, T, "")
	g.invalid("jti missing", proof{claims: map[string]any{"jti": nil}}, P, T, "")
	g.invalid("jti too long", proof{claims: map[string]any{"jti": strings.Repeat("j", dpop.MaxJTILength+1)}}, P, T, "")
	g.invalid("ath missing", proof{claims: map[string]any{"htm": "GET", "htu": mcpURL}}, "GET", mcpURL, "tok")
	g.invalid("ath of another token", proof{claims: map[string]any{"htm": "GET", "htu": mcpURL, "ath": ath("other")}}, "GET", mcpURL, "tok")
	g.invalid("ath with padding", proof{claims: map[string]any{"htm": "GET", "htu": mcpURL, "ath": ath("tok") + "="}}, "GET", mcpURL, "tok")
	return g.vector
}

func merge(a, b map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if v == nil {
			delete(out, k)
		} else {
			out[k] = v
		}
	}
	return out
}

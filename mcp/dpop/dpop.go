// Package dpop verifies and makes DPoP proofs (RFC 9449): the JWT a client sends in the DPoP
// header to show it holds the private key an access or refresh token is bound to.
//
// mcp.ResourceServer checks proofs with it on every request that carries a DPoP-bound token. It
// depends on nothing but the standard library, so an MCP server gets it without Latchkey's
// server. The authorization server has its own verifier on go-jose; both run the test vectors
// in testdata/vectors.json and agree on every one (docs/decisions/0071-one-jose-stack.md).
//
// Verify checks one proof's form, signature and claims. What needs memory is the caller's: a jti
// seen before (replay), the nonce the server handed out, and whether the key is the one the token
// is bound to (compare Proof.JKT with the token's cnf.jkt).
package dpop

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"strings"
	"time"
)

// Algorithms are the JWS algorithms Verify accepts, in the order servers should advertise them
// (dpop_signing_alg_values_supported). Nothing else verifies: no "none", no HMAC.
var Algorithms = []string{"ES256", "EdDSA", "PS256", "RS256"}

// Limits that keep a proof cheap to refuse.
const (
	// MaxProofLength bounds the header value; an RSA-4096 proof is about 1.5 KB.
	MaxProofLength = 8 << 10
	// MaxJTILength bounds the jti a caller has to remember.
	MaxJTILength = 256
	// MinRSABits is the smallest RSA modulus accepted.
	MinRSABits = 2048
	// MaxRSABits bounds the cost of an RSA verification; it is also what the authorization
	// server's verifier (go-jose) accepts.
	MaxRSABits = 4096
)

// maxIAT bounds iat (in the year 36812) so that it converts to a time exactly.
const maxIAT = 1 << 40

// DefaultWindow is how far iat may be from the verifier's clock, in either direction, when
// Check.Window is zero. A jti must be remembered for as long (see Proof.ReplayUntil).
const DefaultWindow = time.Minute

// ErrInvalidProof is wrapped by every refusal of Verify: the answer is invalid_dpop_proof.
var ErrInvalidProof = errors.New("invalid DPoP proof")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidProof, fmt.Sprintf(format, args...))
}

// Check is what a proof must match.
type Check struct {
	// Method is the HTTP method of the request the proof came with (htm).
	Method string
	// URL is the request's absolute URL as the client addressed it (htu); its query and
	// fragment are ignored (RFC 9449 §4.3).
	URL string
	// Now is the verifier's clock.
	Now time.Time
	// Window bounds |iat - Now|; zero means DefaultWindow.
	Window time.Duration
	// AccessToken, when set, must be what the proof's ath hashes (at a resource server).
	AccessToken string
}

// Proof is a verified proof.
type Proof struct {
	// JKT is the JWK SHA-256 thumbprint (RFC 7638) of the proof's key, base64url: the value a
	// bound token carries in cnf.jkt.
	JKT string
	// JTI is the proof's unique identifier; the caller refuses one it has seen within the window.
	JTI string
	// IssuedAt is iat.
	IssuedAt time.Time
	// Nonce is the nonce claim, "" when absent; the caller decides whether it is good.
	Nonce string
	// ReplayUntil is when a proof with this jti stops being acceptable on its iat alone: the jti
	// must be remembered until then.
	ReplayUntil time.Time
	// Algorithm is the JWS alg the proof was signed with.
	Algorithm string
}

// header holds the members a proof's header is checked for. JOSE member names are
// case-sensitive (RFC 7515 §4), so it is read from a map, not by encoding/json's
// case-insensitive field matching.
type header struct {
	Typ  string
	Alg  string
	JWK  json.RawMessage
	Crit bool
	B64  bool
	X5C  bool
}

func parseHeader(seg string) (header, error) {
	var m map[string]json.RawMessage
	if err := decodeJSON(seg, &m); err != nil {
		return header{}, err
	}
	var h header
	for name, dst := range map[string]*string{"typ": &h.Typ, "alg": &h.Alg} {
		if raw, ok := m[name]; ok {
			if err := json.Unmarshal(raw, dst); err != nil {
				return header{}, err
			}
		}
	}
	// kid and nonce are not used, but a header where they are not strings is malformed (and
	// go-jose, which the authorization server's verifier uses, refuses it).
	for _, name := range []string{"kid", "nonce"} {
		if raw, ok := m[name]; ok && string(raw) != "null" {
			var v string
			if err := json.Unmarshal(raw, &v); err != nil {
				return header{}, err
			}
		}
	}
	h.JWK = m["jwk"]
	_, h.Crit = m["crit"]
	_, h.B64 = m["b64"]
	_, h.X5C = m["x5c"]
	return h, nil
}

type claims struct {
	JTI   string   `json:"jti"`
	HTM   string   `json:"htm"`
	HTU   string   `json:"htu"`
	IAT   *float64 `json:"iat"`
	ATH   string   `json:"ath"`
	Nonce string   `json:"nonce"`
}

// b64 decodes strictly: a proof is refused unless each part is exactly the base64url encoding
// of what it holds, so what was signed and what is read cannot differ.
var b64 = base64.RawURLEncoding.Strict()

// jwkMember decodes a JWK's members as go-jose does; the thumbprint is taken over their
// canonical encoding whatever the client sent.
var jwkMember = base64.RawURLEncoding

// Verify checks a DPoP proof against the request it came with: compact JWS, typ dpop+jwt, an
// accepted alg, a public jwk in the header that the signature verifies with, htm and htu of
// this request, iat within the window, a jti, and, when c.AccessToken is set, ath. Every
// refusal wraps ErrInvalidProof.
func Verify(proof string, c Check) (*Proof, error) {
	if proof == "" {
		return nil, invalid("no proof")
	}
	if len(proof) > MaxProofLength {
		return nil, invalid("the proof is too long")
	}
	parts := strings.Split(proof, ".")
	if len(parts) != 3 || strings.ContainsAny(proof, "\r\n") {
		return nil, invalid("the proof is not a compact JWS")
	}
	h, err := parseHeader(parts[0])
	if err != nil {
		return nil, invalid("the proof's header does not parse")
	}
	if h.Typ != "dpop+jwt" {
		return nil, invalid("typ must be dpop+jwt")
	}
	if h.Crit {
		return nil, invalid("crit is not supported")
	}
	if h.B64 {
		return nil, invalid("b64 is not supported")
	}
	// The key is the jwk; a certificate chain means nothing to a proof.
	if h.X5C {
		return nil, invalid("x5c is not supported")
	}
	if !accepted(h.Alg) {
		return nil, invalid("alg %q is not accepted", h.Alg)
	}
	key, jkt, err := ParseJWK(h.JWK)
	if err != nil {
		return nil, invalid("%v", err)
	}
	sig, err := b64.DecodeString(parts[2])
	if err != nil {
		return nil, invalid("the signature is not base64url")
	}
	if err := verifySignature(h.Alg, key, []byte(parts[0]+"."+parts[1]), sig); err != nil {
		return nil, invalid("%v", err)
	}
	var cl claims
	if err := decodeJSON(parts[1], &cl); err != nil {
		return nil, invalid("the proof's claims do not parse")
	}
	if cl.JTI == "" || len(cl.JTI) > MaxJTILength {
		return nil, invalid("jti is missing or too long")
	}
	if cl.HTM != c.Method {
		return nil, invalid("htm does not match the request method")
	}
	if !SameURI(cl.HTU, c.URL) {
		return nil, invalid("htu does not match the request URL")
	}
	if cl.IAT == nil {
		return nil, invalid("iat is missing")
	}
	if *cl.IAT < 0 || *cl.IAT > maxIAT {
		return nil, invalid("iat is not a time")
	}
	window := c.Window
	if window <= 0 {
		window = DefaultWindow
	}
	iat := time.Unix(int64(*cl.IAT), 0)
	if iat.Before(c.Now.Add(-window)) || iat.After(c.Now.Add(window)) {
		return nil, invalid("iat is outside the accepted window")
	}
	if c.AccessToken != "" {
		sum := sha256.Sum256([]byte(c.AccessToken))
		if cl.ATH != b64.EncodeToString(sum[:]) {
			return nil, invalid("ath does not match the access token")
		}
	}
	return &Proof{
		JKT: jkt, JTI: cl.JTI, IssuedAt: iat, Nonce: cl.Nonce,
		ReplayUntil: iat.Add(window), Algorithm: h.Alg,
	}, nil
}

func accepted(alg string) bool {
	for _, a := range Algorithms {
		if a == alg {
			return true
		}
	}
	return false
}

func decodeJSON(seg string, v any) error {
	b, err := b64.DecodeString(seg)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// SameURI compares an htu claim with the request URL as RFC 9449 §4.3 asks: scheme, host and
// path, after syntax- and scheme-based normalisation (case of scheme and host, the default
// port, an empty path as "/"), ignoring query and fragment.
func SameURI(htu, request string) bool {
	a, ok1 := normalise(htu)
	b, ok2 := normalise(request)
	return ok1 && ok2 && a == b
}

func normalise(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" || u.User != nil {
		return "", false
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "https" && scheme != "http" {
		return "", false
	}
	host := strings.ToLower(u.Hostname())
	if strings.Contains(host, ":") { // an IPv6 literal
		host = "[" + host + "]"
	}
	if port := u.Port(); port != "" && !(scheme == "https" && port == "443") && !(scheme == "http" && port == "80") {
		host += ":" + port
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	return scheme + "://" + host + path, true
}

// jwk holds the members a proof's key is checked for.
type jwk struct {
	Kty, Crv, X, Y, N, E string
	// private: it has a member of a private or symmetric key (RFC 7518 §6).
	private bool
	// x5c: it carries a certificate chain, which a proof's key must not.
	x5c bool
}

// privateMembers are the JWK members of private and symmetric keys (RFC 7518 §6).
var privateMembers = []string{"d", "p", "q", "dp", "dq", "qi", "oth", "k", "priv"}

// readJWK reads a JWK's members by their exact names, as go-jose does (encoding/json would match
// "X" for "x"); a member whose value is null counts as absent.
func readJWK(raw []byte) (jwk, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return jwk{}, err
	}
	var k jwk
	for name, dst := range map[string]*string{"kty": &k.Kty, "crv": &k.Crv, "x": &k.X, "y": &k.Y, "n": &k.N, "e": &k.E} {
		if v, ok := m[name]; ok {
			if err := json.Unmarshal(v, dst); err != nil {
				return jwk{}, err
			}
		}
	}
	present := func(name string) bool {
		v, ok := m[name]
		return ok && string(v) != "null"
	}
	for _, name := range privateMembers {
		k.private = k.private || present(name)
	}
	k.x5c = present("x5c")
	return k, nil
}

// ParseJWK reads a public JWK (EC P-256, OKP Ed25519 or RSA) and returns the key and its
// RFC 7638 thumbprint. A JWK with private members is refused.
func ParseJWK(raw []byte) (crypto.PublicKey, string, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, "", errors.New("jwk is missing")
	}
	k, err := readJWK(raw)
	if err != nil {
		return nil, "", errors.New("jwk does not parse")
	}
	if k.private {
		return nil, "", errors.New("jwk holds private key material")
	}
	if k.x5c {
		return nil, "", errors.New("jwk must not carry x5c")
	}
	switch k.Kty {
	case "EC":
		if k.Crv != "P-256" {
			return nil, "", errors.New("only the P-256 curve is accepted")
		}
		x, err1 := jwkMember.DecodeString(k.X)
		y, err2 := jwkMember.DecodeString(k.Y)
		if err1 != nil || err2 != nil || len(x) != 32 || len(y) != 32 {
			return nil, "", errors.New("EC key coordinates are malformed")
		}
		pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
		if err != nil {
			return nil, "", errors.New("EC key is not on the curve")
		}
		return pub, thumb(`{"crv":"P-256","kty":"EC","x":"` + b64.EncodeToString(x) + `","y":"` + b64.EncodeToString(y) + `"}`), nil
	case "OKP":
		if k.Crv != "Ed25519" {
			return nil, "", errors.New("only the Ed25519 curve is accepted")
		}
		x, err := jwkMember.DecodeString(k.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			return nil, "", errors.New("Ed25519 key is malformed")
		}
		return ed25519.PublicKey(x), thumb(`{"crv":"Ed25519","kty":"OKP","x":"` + b64.EncodeToString(x) + `"}`), nil
	case "RSA":
		n, err1 := jwkMember.DecodeString(k.N)
		e, err2 := jwkMember.DecodeString(k.E)
		if err1 != nil || err2 != nil || len(e) == 0 || len(e) > 4 || e[0] == 0 || len(n) == 0 || n[0] == 0 {
			return nil, "", errors.New("RSA key is malformed")
		}
		pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		if bits := pub.N.BitLen(); bits < MinRSABits || bits > MaxRSABits {
			return nil, "", errors.New("RSA key size is not accepted")
		}
		if pub.E < 3 || pub.E%2 == 0 {
			return nil, "", errors.New("RSA exponent is not accepted")
		}
		return pub, thumb(`{"e":"` + b64.EncodeToString(e) + `","kty":"RSA","n":"` + b64.EncodeToString(n) + `"}`), nil
	}
	return nil, "", errors.New("jwk kty is not accepted")
}

func thumb(canonical string) string {
	sum := sha256.Sum256([]byte(canonical))
	return b64.EncodeToString(sum[:])
}

func verifySignature(alg string, key crypto.PublicKey, input, sig []byte) error {
	bad := errors.New("the signature does not verify")
	switch alg {
	case "ES256":
		pub, ok := key.(*ecdsa.PublicKey)
		if !ok || len(sig) != 64 {
			return bad
		}
		sum := sha256.Sum256(input)
		r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
		if !ecdsa.Verify(pub, sum[:], r, s) {
			return bad
		}
		return nil
	case "EdDSA":
		pub, ok := key.(ed25519.PublicKey)
		if !ok || !ed25519.Verify(pub, input, sig) {
			return bad
		}
		return nil
	case "RS256", "PS256":
		pub, ok := key.(*rsa.PublicKey)
		if !ok {
			return bad
		}
		sum := sha256.Sum256(input)
		var err error
		if alg == "RS256" {
			err = rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], sig)
		} else {
			// Any salt length, as go-jose (the authorization server's verifier) accepts: the
			// salt is the signer's own randomness, and RFC 7518 §3.5's length is for signers.
			err = rsa.VerifyPSS(pub, crypto.SHA256, sum[:], sig, &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthAuto})
		}
		if err != nil {
			return bad
		}
		return nil
	}
	return bad
}

// Package dpop is the authorization server's verifier of DPoP proofs (RFC 9449): the JWT a
// client sends in the DPoP header to show it holds the private key an access or refresh token
// is bound to. The JWS and the JWK are read and checked by go-jose, the library every other
// signature check of the server uses; what RFC 9449 adds (typ, htm, htu, iat, jti, ath, the
// RFC 7638 thumbprint) is checked here.
//
// The mcp module keeps its own verifier, on the standard library only, for MCP servers
// (latchkey.dev/latchkey/mcp/dpop). Both run the same test vectors and must agree on every one
// of them (docs/decisions/0071-one-jose-stack.md); the server does not import the mcp module.
//
// Verify checks one proof's form, signature and claims. What needs memory is the caller's: a
// jti seen before (replay), the nonce the server handed out, and whether the key is the one the
// token is bound to (compare Proof.JKT with the token's cnf.jkt).
package dpop

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// Algorithms are the JWS algorithms Verify accepts, in the order the server advertises them
// (dpop_signing_alg_values_supported). Nothing else verifies: no "none", no HMAC.
var Algorithms = []string{"ES256", "EdDSA", "PS256", "RS256"}

var joseAlgorithms = []jose.SignatureAlgorithm{jose.ES256, jose.EdDSA, jose.PS256, jose.RS256}

// Limits that keep a proof cheap to refuse.
const (
	// MaxProofLength bounds the header value; an RSA-4096 proof is about 1.5 KB.
	MaxProofLength = 8 << 10
	// MaxJTILength bounds the jti a caller has to remember.
	MaxJTILength = 256
	// MinRSABits is the smallest RSA modulus accepted.
	MinRSABits = 2048
	// MaxRSABits bounds the cost of an RSA verification (and is go-jose's own bound).
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

// Problem is the part of a refusal that is safe to show the client (error_description): the
// error's text without the ErrInvalidProof prefix.
func Problem(err error) string {
	return strings.TrimPrefix(err.Error(), ErrInvalidProof.Error()+": ")
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
	// AccessToken, when set, must be what the proof's ath hashes (at a resource).
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

type claims struct {
	JTI   string   `json:"jti"`
	HTM   string   `json:"htm"`
	HTU   string   `json:"htu"`
	IAT   *float64 `json:"iat"`
	ATH   string   `json:"ath"`
	Nonce string   `json:"nonce"`
}

var b64 = base64.RawURLEncoding.Strict()

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
	// go-jose decodes each part leniently and checks the signature over the parts encoded
	// again; a proof must be exactly what was signed, so anything but canonical base64url is
	// refused here first.
	parts := strings.Split(proof, ".")
	if len(parts) != 3 {
		return nil, invalid("the proof is not a compact JWS")
	}
	for _, p := range parts {
		if !canonical(p) {
			return nil, invalid("the proof is not a compact JWS")
		}
	}
	// The header as sent, member by member (go-jose drops members whose value is null).
	hb, _ := b64.DecodeString(parts[0]) // canonical has decoded it
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hb, &raw); err != nil {
		return nil, invalid("the proof's header does not parse")
	}
	// The key is the jwk; a certificate chain beside it (which go-jose would parse and check)
	// means nothing to a proof, and the mcp module's verifier refuses it too.
	if _, ok := raw["x5c"]; ok {
		return nil, invalid("x5c is not supported")
	}
	var key map[string]json.RawMessage
	if json.Unmarshal(raw["jwk"], &key) == nil && key["x5c"] != nil && string(key["x5c"]) != "null" {
		return nil, invalid("jwk must not carry x5c")
	}
	jws, err := jose.ParseSignedCompact(proof, joseAlgorithms)
	if err != nil {
		return nil, refusedHeader(raw)
	}
	if len(jws.Signatures) != 1 {
		return nil, invalid("the proof is not a compact JWS")
	}
	h := jws.Signatures[0].Protected
	if typ, _ := h.ExtraHeaders[jose.HeaderType].(string); typ != "dpop+jwt" {
		return nil, invalid("typ must be dpop+jwt")
	}
	// go-jose understands crit ["b64"] (an unencoded payload, RFC 7797); a proof has no use for
	// either, and the mcp module's verifier knows neither.
	if _, ok := raw["crit"]; ok {
		return nil, invalid("crit is not supported")
	}
	if _, ok := raw["b64"]; ok {
		return nil, invalid("b64 is not supported")
	}
	if h.JSONWebKey == nil {
		return nil, invalid("jwk is missing")
	}
	jkt, err := publicKey(h.JSONWebKey, raw["jwk"])
	if err != nil {
		return nil, invalid("%v", err)
	}
	payload, err := jws.Verify(h.JSONWebKey)
	if err != nil {
		return nil, invalid("the signature does not verify")
	}
	p, err := checkClaims(payload, c)
	if err != nil {
		return nil, err
	}
	p.JKT, p.Algorithm = jkt, h.Algorithm
	return p, nil
}

// checkClaims checks a verified proof's claims against the request.
func checkClaims(payload []byte, c Check) (*Proof, error) {
	var cl claims
	if err := json.Unmarshal(payload, &cl); err != nil {
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
		if subtle.ConstantTimeCompare([]byte(cl.ATH), []byte(b64.EncodeToString(sum[:]))) != 1 {
			return nil, invalid("ath does not match the access token")
		}
	}
	return &Proof{JTI: cl.JTI, IssuedAt: iat, Nonce: cl.Nonce, ReplayUntil: iat.Add(window)}, nil
}

// canonical reports whether s is base64url without padding that decodes to exactly what it
// would encode to (no line breaks, no stray trailing bits).
func canonical(s string) bool {
	if strings.ContainsAny(s, "\r\n") {
		return false
	}
	_, err := b64.DecodeString(s)
	return err == nil
}

// refusedHeader names why go-jose refused to parse a proof, for the client: the problems a
// client can fix, in the words the mcp module's verifier uses.
func refusedHeader(h map[string]json.RawMessage) error {
	var alg string
	if err := json.Unmarshal(h["alg"], &alg); err != nil || !accepted(alg) {
		return invalid("alg %q is not accepted", alg)
	}
	raw, ok := h["jwk"]
	if !ok {
		return invalid("the proof is not a compact JWS")
	}
	var k map[string]json.RawMessage
	if err := json.Unmarshal(raw, &k); err == nil {
		for _, m := range privateMembers {
			if _, ok := k[m]; ok {
				return invalid("jwk holds private key material")
			}
		}
	}
	return invalid("jwk is not a public key of an accepted type")
}

// privateMembers are the JWK members of private and symmetric keys (RFC 7518 §6).
var privateMembers = []string{"d", "p", "q", "dp", "dq", "qi", "oth", "k", "priv"}

func accepted(alg string) bool {
	for _, a := range Algorithms {
		if a == alg {
			return true
		}
	}
	return false
}

// publicKey checks that the proof's key is one a proof may carry and returns its RFC 7638
// thumbprint. go-jose has already refused private members and keys off their curve.
func publicKey(k *jose.JSONWebKey, raw json.RawMessage) (string, error) {
	if !k.IsPublic() || !k.Valid() {
		return "", errors.New("jwk is not a valid public key")
	}
	switch pub := k.Key.(type) {
	case *ecdsa.PublicKey:
		if pub.Curve != elliptic.P256() {
			return "", errors.New("only the P-256 curve is accepted")
		}
	case ed25519.PublicKey:
	case *rsa.PublicKey:
		if bits := pub.N.BitLen(); bits < MinRSABits || bits > MaxRSABits {
			return "", errors.New("RSA key size is not accepted")
		}
		if pub.E < 3 || pub.E%2 == 0 || pub.E > 1<<32-1 {
			return "", errors.New("RSA exponent is not accepted")
		}
		// go-jose reads n and e with leading zero octets as the same numbers, and the
		// thumbprint of such a key would not be the one its holder computes from what it sent.
		if err := minimalRSA(raw); err != nil {
			return "", err
		}
	default:
		return "", errors.New("jwk kty is not accepted")
	}
	sum, err := k.Thumbprint(crypto.SHA256)
	if err != nil {
		return "", errors.New("jwk has no thumbprint")
	}
	return b64.EncodeToString(sum), nil
}

// minimalRSA refuses an RSA jwk whose n or e starts with a zero octet (RFC 7518 §2's
// Base64urlUInt is the minimal encoding).
func minimalRSA(raw json.RawMessage) error {
	// By the members' exact names, as go-jose reads them.
	var k map[string]json.RawMessage
	var ns, es string
	if json.Unmarshal(raw, &k) != nil || json.Unmarshal(k["n"], &ns) != nil || json.Unmarshal(k["e"], &es) != nil {
		return errors.New("RSA key is malformed")
	}
	n, err1 := base64.RawURLEncoding.DecodeString(ns)
	e, err2 := base64.RawURLEncoding.DecodeString(es)
	if err1 != nil || err2 != nil || len(n) == 0 || n[0] == 0 || len(e) == 0 || e[0] == 0 {
		return errors.New("RSA key is malformed")
	}
	return nil
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
	if port := u.Port(); port != "" && (scheme != "https" || port != "443") && (scheme != "http" || port != "80") {
		host += ":" + port
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	return scheme + "://" + host + path, true
}

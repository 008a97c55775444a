package dpop

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"time"
)

// Claims are what a client puts in a proof. Method and URL are required.
type Claims struct {
	Method string
	URL    string
	// AccessToken, when set, is hashed into ath (requests to a resource server).
	AccessToken string
	// Nonce is the server's last DPoP-Nonce, if it sent one.
	Nonce string
	// JTI is the proof's identifier; empty means a random one.
	JTI string
	// IssuedAt is iat; zero means time.Now.
	IssuedAt time.Time
}

// Sign makes a proof with key: an *ecdsa.PrivateKey on P-256 (ES256), an ed25519.PrivateKey
// (EdDSA) or an *rsa.PrivateKey (PS256). It is for clients and tests; servers only Verify.
func Sign(key crypto.Signer, c Claims) (string, error) {
	alg, pub, err := publicJWK(key)
	if err != nil {
		return "", err
	}
	if c.JTI == "" {
		c.JTI = rand.Text()
	}
	if c.IssuedAt.IsZero() {
		c.IssuedAt = time.Now()
	}
	h, err := json.Marshal(map[string]any{"typ": "dpop+jwt", "alg": alg, "jwk": pub})
	if err != nil {
		return "", err
	}
	body := map[string]any{"jti": c.JTI, "htm": c.Method, "htu": c.URL, "iat": c.IssuedAt.Unix()}
	if c.AccessToken != "" {
		sum := sha256.Sum256([]byte(c.AccessToken))
		body["ath"] = b64.EncodeToString(sum[:])
	}
	if c.Nonce != "" {
		body["nonce"] = c.Nonce
	}
	cl, err := json.Marshal(body)
	if err != nil {
		return "", err
	}
	input := b64.EncodeToString(h) + "." + b64.EncodeToString(cl)
	sig, err := signInput(alg, key, []byte(input))
	if err != nil {
		return "", err
	}
	return input + "." + b64.EncodeToString(sig), nil
}

// Thumbprint is the RFC 7638 thumbprint of key's public half, as a bound token's cnf.jkt.
func Thumbprint(key crypto.Signer) (string, error) {
	_, pub, err := publicJWK(key)
	if err != nil {
		return "", err
	}
	raw, err := json.Marshal(pub)
	if err != nil {
		return "", err
	}
	_, jkt, err := ParseJWK(raw)
	return jkt, err
}

func publicJWK(key crypto.Signer) (string, map[string]string, error) {
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		raw, err := k.PublicKey.Bytes()
		if err != nil || len(raw) != 65 {
			return "", nil, errors.New("dpop: only P-256 EC keys are supported")
		}
		return "ES256", map[string]string{"kty": "EC", "crv": "P-256", "x": b64.EncodeToString(raw[1:33]), "y": b64.EncodeToString(raw[33:])}, nil
	case ed25519.PrivateKey:
		return "EdDSA", map[string]string{"kty": "OKP", "crv": "Ed25519", "x": b64.EncodeToString(k.Public().(ed25519.PublicKey))}, nil
	case *rsa.PrivateKey:
		return "PS256", map[string]string{"kty": "RSA", "n": b64.EncodeToString(k.N.Bytes()), "e": b64.EncodeToString(bigEndian(k.E))}, nil
	}
	return "", nil, errors.New("dpop: unsupported key type")
}

func bigEndian(e int) []byte {
	var out []byte
	for e > 0 {
		out = append([]byte{byte(e)}, out...)
		e >>= 8
	}
	return out
}

func signInput(alg string, key crypto.Signer, input []byte) ([]byte, error) {
	switch alg {
	case "EdDSA":
		return key.Sign(rand.Reader, input, crypto.Hash(0))
	case "ES256":
		sum := sha256.Sum256(input)
		r, s, err := ecdsa.Sign(rand.Reader, key.(*ecdsa.PrivateKey), sum[:])
		if err != nil {
			return nil, err
		}
		sig := make([]byte, 64)
		r.FillBytes(sig[:32])
		s.FillBytes(sig[32:])
		return sig, nil
	default:
		sum := sha256.Sum256(input)
		return rsa.SignPSS(rand.Reader, key.(*rsa.PrivateKey), crypto.SHA256, sum[:], &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash})
	}
}

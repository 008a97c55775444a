package controllers

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha1" //nolint:gosec // x5t is defined as the SHA-1 thumbprint (RFC 7515 §4.1.7); it names a certificate, it protects nothing
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"

	jose "github.com/go-jose/go-jose/v4"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
)

// minRSABits is the smallest RSA key a client assertion is signed with (RFC 7518 §3.3).
const minRSABits = 2048

// clientAssertionKey compiles a private_key_jwt Connector's signing key from the PEM value of
// its Secret, and certPEM (nil when spec.clientAssertion.certificateKey is unset). Whatever is
// wrong is notReady with reason InvalidClientKey; the message never quotes the Secret.
func clientAssertionKey(keyPEM, certPEM []byte, spec *v1alpha1.ConnectorClientAssertion) (*config.ClientAssertion, error) {
	if spec == nil {
		spec = &v1alpha1.ConnectorClientAssertion{}
	}
	invalid := func(why string) error {
		return notReadyf(v1alpha1.ConnectorInvalidClientKeyReason, "spec.clientSecretRef: %s", why)
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, invalid("the value is not a PEM private key")
	}
	var key crypto.Signer
	if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		key, _ = k.(crypto.Signer)
	} else if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		key = k
	} else if k, err := x509.ParseECPrivateKey(block.Bytes); err == nil {
		key = k
	}
	alg := string(spec.Algorithm)
	switch k := key.(type) {
	case *rsa.PrivateKey:
		if k.N.BitLen() < minRSABits {
			return nil, invalid("the RSA key is shorter than 2048 bits")
		}
		if alg == "" {
			alg = string(jose.RS256)
		}
		if alg != string(jose.RS256) && alg != string(jose.PS256) {
			return nil, invalid("an RSA key signs RS256 or PS256, not " + alg)
		}
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return nil, invalid("an ECDSA key must be on P-256")
		}
		if alg == "" {
			alg = string(jose.ES256)
		}
		if alg != string(jose.ES256) {
			return nil, invalid("an ECDSA P-256 key signs ES256, not " + alg)
		}
	default:
		return nil, invalid("the value is not an RSA or ECDSA P-256 private key in PKCS #8, PKCS #1 or SEC 1 PEM")
	}
	out := &config.ClientAssertion{Key: key, Algorithm: alg, KeyID: spec.KeyID}
	if certPEM != nil {
		cb, _ := pem.Decode(certPEM)
		if cb == nil || cb.Type != "CERTIFICATE" {
			return nil, invalid("the certificate of clientAssertion.certificateKey is not a PEM certificate")
		}
		cert, err := x509.ParseCertificate(cb.Bytes)
		if err != nil {
			return nil, invalid("the certificate of clientAssertion.certificateKey does not parse")
		}
		pub, ok := cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
		if !ok || !pub.Equal(key.Public()) {
			return nil, invalid("the certificate of clientAssertion.certificateKey is not the private key's")
		}
		s256 := sha256.Sum256(cert.Raw)
		s1 := sha1.Sum(cert.Raw) //nolint:gosec // see the import
		out.X5TS256 = base64.RawURLEncoding.EncodeToString(s256[:])
		out.X5T = base64.RawURLEncoding.EncodeToString(s1[:])
		return out, nil
	}
	if out.KeyID == "" {
		tp, err := (&jose.JSONWebKey{Key: key.Public()}).Thumbprint(crypto.SHA256)
		if err != nil {
			return nil, invalid("the key has no JWK thumbprint")
		}
		out.KeyID = base64.RawURLEncoding.EncodeToString(tp)
	}
	return out, nil
}

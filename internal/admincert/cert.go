// Package admincert keeps the admin API's serving certificate (docs/decisions/0044): the
// elected replica creates a CA and a certificate for the admin Service's DNS name in a Secret of
// its own (create-only), renews them before they expire, and writes the CA bundle into the
// APIService's caBundle; every replica loads the Secret and serves with it. The chart renders
// no certificate, so `helm template` (Argo CD, Flux) never replaces it.
package admincert

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"
)

// The Secret's entries. tls.crt and tls.key are what every replica serves with (the
// kubernetes.io/tls shape); ca.crt is the bundle the APIService trusts: the CA of the serving
// certificate, of an announced next one, and of earlier ones until they expire. next.crt and
// next.key are a renewed certificate, announced in the bundle before anyone serves with it.
const (
	BundleKey   = "ca.crt"
	CertKey     = "tls.crt"
	KeyKey      = "tls.key"
	NextCertKey = "next.crt"
	NextKeyKey  = "next.key"
)

// Defaults: a certificate lives a year and is renewed 30 days before it expires; a renewed one
// is announced in the caBundle 5 minutes before replicas serve with it (the aggregator watches
// APIServices, so every kube-apiserver has the bundle well before).
const (
	DefaultValidity    = 365 * 24 * time.Hour
	DefaultRenewBefore = 30 * 24 * time.Hour
	DefaultAnnounce    = 5 * time.Minute
	// backdate covers clocks a little behind the issuer's.
	backdate = time.Minute
)

// issued is one certificate with the CA that signed it. The CA's key is discarded once it has
// signed: each renewal makes a new CA, so the Secret never holds a key that could sign a
// certificate for another name.
type issued struct {
	ca              *x509.Certificate
	certPEM, keyPEM []byte
}

// issue makes a CA and a serving certificate for dnsNames, valid from now for validity.
func issue(dnsNames []string, now time.Time, validity time.Duration) (issued, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return issued{}, err
	}
	notBefore, notAfter := now.Add(-backdate), now.Add(validity)
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "latchkey-admin-ca@" + now.UTC().Format("20060102T150405Z")},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		// The CA signs only for the Service's names.
		PermittedDNSDomains:         dnsNames,
		PermittedDNSDomainsCritical: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return issued{}, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return issued{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return issued{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: dnsNames[0]},
		DNSNames:     dnsNames,
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return issued{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return issued{}, err
	}
	return issued{
		ca:      ca,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

// state is the Secret parsed.
type state struct {
	bundle []*x509.Certificate
	cur    *x509.Certificate
	curPEM []byte
	curKey []byte
	// next is nil unless a renewed certificate is announced.
	next    *x509.Certificate
	nextPEM []byte
	nextKey []byte
}

// parse reads the Secret's data. A Secret that does not parse is an error, never repaired:
// rewriting it could replace what an admin put there on purpose.
func parse(data map[string][]byte) (*state, error) {
	s := &state{curPEM: data[CertKey], curKey: data[KeyKey]}
	var err error
	if s.cur, err = leaf(s.curPEM, s.curKey); err != nil {
		return nil, fmt.Errorf("%s/%s: %w", CertKey, KeyKey, err)
	}
	if s.bundle, err = certs(data[BundleKey]); err != nil || len(s.bundle) == 0 {
		return nil, fmt.Errorf("%s holds no PEM certificate", BundleKey)
	}
	if len(data[NextCertKey]) > 0 || len(data[NextKeyKey]) > 0 {
		s.nextPEM, s.nextKey = data[NextCertKey], data[NextKeyKey]
		if s.next, err = leaf(s.nextPEM, s.nextKey); err != nil {
			return nil, fmt.Errorf("%s/%s: %w", NextCertKey, NextKeyKey, err)
		}
	}
	return s, nil
}

func leaf(certPEM, keyPEM []byte) (*x509.Certificate, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(pair.Certificate[0])
}

func certs(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return out, nil
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
}

func encodeBundle(cs []*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, c := range cs {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.Bytes()
}

func (s *state) data() map[string][]byte {
	d := map[string][]byte{BundleKey: encodeBundle(s.bundle), CertKey: s.curPEM, KeyKey: s.curKey}
	if s.next != nil {
		d[NextCertKey], d[NextKeyKey] = s.nextPEM, s.nextKey
	}
	return d
}

// verifies reports whether the bundle has a CA that verifies c for name at now.
func verifies(bundle []*x509.Certificate, c *x509.Certificate, name string, now time.Time) bool {
	pool := x509.NewCertPool()
	for _, ca := range bundle {
		pool.AddCert(ca)
	}
	_, err := c.Verify(x509.VerifyOptions{DNSName: name, Roots: pool, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err == nil
}

// covers reports whether c is valid for every name.
func covers(c *x509.Certificate, names []string) bool {
	for _, n := range names {
		if !slices.Contains(c.DNSNames, n) {
			return false
		}
	}
	return true
}

var errNotLoaded = errors.New("the admin API's serving certificate is not loaded yet")

func encodeBase64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func decodeBase64(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }

package trust

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// systemServer's certificate stands in for a public CA's: TestMain makes it the system's only
// root (SSL_CERT_FILE) before anything reads the system roots.
var systemServer *httptest.Server

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "trust-")
	if err != nil {
		panic(err)
	}
	cert, certPEM := selfSigned("public CA stand-in")
	systemServer = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "public") }))
	systemServer.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	systemServer.StartTLS()
	file := filepath.Join(dir, "system.pem")
	if err := os.WriteFile(file, certPEM, 0o600); err != nil {
		panic(err)
	}
	os.Setenv("SSL_CERT_FILE", file)
	os.Setenv("SSL_CERT_DIR", dir)
	code := m.Run()
	systemServer.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

// A private service (an in-house OIDC provider, an upstream behind the company CA) is
// reachable once its CA is in the bundle, and public services stay reachable: the bundle adds
// to the system roots.
func TestBundleAddsToSystemRoots(t *testing.T) {
	private := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "private") }))
	defer private.Close()
	get := func(pool *x509.CertPool, url string) error {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}

	// Without the bundle: the public stand-in answers, the private service is refused.
	if err := get(nil, systemServer.URL); err != nil {
		t.Fatalf("system roots: %v", err)
	}
	if err := get(nil, private.URL); !errors.As(err, &x509.UnknownAuthorityError{}) {
		t.Fatalf("a private CA was trusted without a bundle: %v", err)
	}

	bundle := filepath.Join(t.TempDir(), "ca.crt")
	block := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: private.Certificate().Raw})
	if err := os.WriteFile(bundle, append([]byte("# the company CA\n"), block...), 0o600); err != nil {
		t.Fatal(err)
	}
	pool, err := Load(bundle)
	if err != nil {
		t.Fatal(err)
	}
	if err := get(pool, private.URL); err != nil {
		t.Errorf("private service with the bundle: %v", err)
	}
	if err := get(pool, systemServer.URL); err != nil {
		t.Errorf("public service with the bundle: %v (the bundle replaced the system roots)", err)
	}
}

// Use reaches the clients made from http.DefaultTransport (Connectors, OIDC, event sinks) and
// those that ask Roots.
func TestUse(t *testing.T) {
	private := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer private.Close()
	pool := x509.NewCertPool()
	pool.AddCert(private.Certificate())
	dt := http.DefaultTransport.(*http.Transport)
	saved := dt.TLSClientConfig
	t.Cleanup(func() { dt.TLSClientConfig = saved; roots.Store(nil) })

	Use(pool)
	if Roots() != pool {
		t.Error("Roots does not return the pool")
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: dt.Clone()} // as internal/upstream clones it
	resp, err := c.Get(private.URL)
	if err != nil {
		t.Fatalf("a client made from http.DefaultTransport does not trust the bundle: %v", err)
	}
	resp.Body.Close()
}

func TestLoadRefusesABundleWithoutCertificates(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"empty":       "",
		"a key":       "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
		"not PEM":     "MIIB...",
		"broken cert": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
			if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := Load(p); err == nil || !strings.Contains(err.Error(), p) {
				t.Fatalf("Load: %v; want an error naming the file", err)
			}
		})
	}
	if _, err := Load(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a missing bundle loaded")
	}
}

func selfSigned(cn string) (tls.Certificate, []byte) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

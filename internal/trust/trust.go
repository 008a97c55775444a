// Package trust holds the certificate authorities the server's outgoing HTTPS clients trust: the
// system's roots, plus a bundle the operator adds for upstream services, OpenID Connect
// providers, client metadata documents and event sinks behind a private CA (--ca-bundle).
//
// The bundle adds to the system roots; it never replaces them, so adding a company CA does not
// cut Latchkey off from GitHub. The Kubernetes client is not affected: it trusts the cluster's
// CA from its own configuration.
package trust

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
)

// Load returns the system's roots plus every certificate in the PEM file at path. A file with no
// certificate, or a PEM block that is not one that parses, is an error: a bundle that trusts
// nothing would fail every call to a private service later, with a less helpful message.
func Load(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path) //nolint:gosec // the path is the operator's --ca-bundle flag
	if err != nil {
		return nil, fmt.Errorf("CA bundle: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		// No system roots (an unusual platform): the bundle alone is still what was asked for.
		pool = x509.NewCertPool()
	}
	n := 0
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("CA bundle %s: certificate %d: %w", path, n+1, err)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("CA bundle %s: %w", path, errNoCertificate)
	}
	return pool, nil
}

var errNoCertificate = errors.New("no PEM CERTIFICATE block")

var roots atomic.Pointer[x509.CertPool]

// Use makes pool the roots of http.DefaultTransport, from which the clients for Connectors,
// OpenID Connect sign-in and event sinks are made, and of Roots, which clients with a transport
// of their own (client metadata documents) ask for. Call it at start, before any request.
func Use(pool *x509.CertPool) {
	roots.Store(pool)
	if t, ok := http.DefaultTransport.(*http.Transport); ok {
		if t.TLSClientConfig == nil {
			t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		t.TLSClientConfig.RootCAs = pool
	}
}

// Roots returns the pool given to Use, or nil: the system's roots.
func Roots() *x509.CertPool { return roots.Load() }

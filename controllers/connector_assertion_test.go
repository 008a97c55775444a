//go:build !latchkey_local

package controllers

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
)

// testKeyPair is an RSA key and a self-signed certificate of it, as PEM.
func testKeyPair(t *testing.T) (keyPEM, certPEM []byte, cert *x509.Certificate) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "latchkey connector"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ = x509.ParseCertificate(der)
	p8, _ := x509.MarshalPKCS8PrivateKey(k)
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), cert
}

// TestTenantConnectorSignsOnlyWithOptedInKeys: with private_key_jwt a Connector's Secret is a
// signing key, and the Connector's author chooses the token endpoint that receives what it
// signs. A tenant naming the namespace's TLS key (a kubernetes.io/tls Secret nobody opted in)
// must not get Latchkey to sign assertions with it: the Connector reads as SecretMissing and
// nothing of the key is compiled. A Secret opted in with latchkey.dev/use=connector signs, with
// its certificate's thumbprints when clientAssertion.certificateKey names it.
func TestTenantConnectorSignsOnlyWithOptedInKeys(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	newProject(t, ns, "proj", nil)
	keyPEM, certPEM, cert := testKeyPair(t)
	otherKey, _, _ := testKeyPair(t)
	tlsSecret := func(name string, labelled bool, key, crt []byte) {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.key": key, "tls.crt": crt}}
		if labelled {
			s.Labels = map[string]string{v1alpha1.SecretUseLabel: v1alpha1.SecretUseConnector}
		}
		create(t, s)
	}
	tlsSecret("web-tls", false, keyPEM, certPEM)
	tlsSecret("entra-cert", true, keyPEM, certPEM)
	tlsSecret("mismatched", true, otherKey, certPEM)
	tlsSecret("not-a-key", true, []byte("a client secret, not a key"), certPEM)

	connector := func(name, secret string, withCert bool) *v1alpha1.Connector {
		c := newConnector(ns, name, "proj", secret)
		c.Spec.Preset = ""
		c.Spec.Audience = name
		c.Spec.Endpoints = &v1alpha1.ConnectorEndpoints{
			AuthorizationURL: "https://collector.example/authorize",
			TokenURL:         "https://collector.example/token",
			UserInfoURL:      "https://collector.example/user",
		}
		c.Spec.ClientSecretRef.Key = "tls.key"
		c.Spec.TokenEndpointAuthMethod = v1alpha1.UpstreamAuthPrivateKeyJWT
		if withCert {
			c.Spec.ClientAssertion = &v1alpha1.ConnectorClientAssertion{CertificateKey: "tls.crt"}
		}
		return c
	}
	tests := []struct {
		name, secret string
		withCert     bool
		reason       string
	}{
		{"the namespace's TLS key, not opted in", "web-tls", true, v1alpha1.ConnectorSecretMissingReason},
		{"the same key without its certificate, not opted in", "web-tls", false, v1alpha1.ConnectorSecretMissingReason},
		{"a certificate of another key", "mismatched", true, v1alpha1.ConnectorInvalidClientKeyReason},
		{"a value that is no key", "not-a-key", false, v1alpha1.ConnectorInvalidClientKeyReason},
		{"an opted-in key and its certificate", "entra-cert", true, v1alpha1.ConnectorReadyReason},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := connector(fmt.Sprintf("signer-%d", i), tt.secret, tt.withCert)
			create(t, c)
			if tt.reason == v1alpha1.ConnectorReadyReason {
				waitReady(t, c)
				return
			}
			cond := waitNotReady(t, c, tt.reason)
			if strings.Contains(cond.Message, "PRIVATE KEY") || strings.Contains(cond.Message, "client secret") {
				t.Errorf("the condition quotes the Secret: %s", cond.Message)
			}
		})
	}
	s256 := sha256.Sum256(cert.Raw)
	waitSnapshot(t, "only the opted-in key signs", func(s *config.Snapshot) error {
		p := s.Project(ns + "/proj")
		if p == nil {
			return errors.New("project not compiled yet")
		}
		good := p.Connectors[ns+"/signer-4"]
		if good == nil || good.Assertion == nil {
			return errors.New("the opted-in signer is not compiled yet")
		}
		if good.ClientSecret != "" {
			return errors.New("the private key was compiled as a client secret too")
		}
		if good.Assertion.X5TS256 != base64.RawURLEncoding.EncodeToString(s256[:]) || good.Assertion.Algorithm != "RS256" {
			return fmt.Errorf("assertion key compiled as %+v", *good.Assertion)
		}
		for key, c := range p.Connectors {
			if key != ns+"/signer-4" && c.Assertion != nil {
				return fmt.Errorf("Connector %s compiled with a signing key it may not use", key)
			}
		}
		return nil
	})
}

// TestConnectorAssertionAndTenantRules: what the schema refuses (clientAssertion without
// private_key_jwt) and what the controller reports (an ECDSA key with an RSA algorithm;
// allowedTenants on a Connector whose ID tokens are not checked per tenant).
func TestConnectorAssertionAndTenantRules(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	newProject(t, ns, "proj", nil)
	ek, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	sec1, _ := x509.MarshalECPrivateKey(ek)
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "keys",
		Labels: map[string]string{v1alpha1.SecretUseLabel: v1alpha1.SecretUseConnector}},
		Data: map[string][]byte{"ec": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1}), "clientSecret": []byte("s3cret")}})

	stray := newConnector(ns, "stray-assertion", "proj", "keys")
	stray.Spec.ClientAssertion = &v1alpha1.ConnectorClientAssertion{KeyID: "k1"}
	if err := k8s.Create(context.Background(), stray); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "clientAssertion is only for") {
		t.Errorf("clientAssertion without private_key_jwt: %v", err)
	}

	wrongAlg := newConnector(ns, "wrong-alg", "proj", "keys")
	wrongAlg.Spec.Audience = "wrong-alg"
	wrongAlg.Spec.ClientSecretRef.Key = "ec"
	wrongAlg.Spec.TokenEndpointAuthMethod = v1alpha1.UpstreamAuthPrivateKeyJWT
	wrongAlg.Spec.ClientAssertion = &v1alpha1.ConnectorClientAssertion{Algorithm: "RS256"}
	create(t, wrongAlg)
	waitNotReady(t, wrongAlg, v1alpha1.ConnectorInvalidClientKeyReason)

	ec := newConnector(ns, "ec", "proj", "keys")
	ec.Spec.Audience = "ec"
	ec.Spec.ClientSecretRef.Key = "ec"
	ec.Spec.TokenEndpointAuthMethod = v1alpha1.UpstreamAuthPrivateKeyJWT
	create(t, ec)
	waitReady(t, ec)

	tenants := newConnector(ns, "tenants", "proj", "keys")
	tenants.Spec.Audience = "tenants"
	tenants.Spec.AllowedTenants = []string{"contoso.example"}
	create(t, tenants)
	waitNotReady(t, tenants, v1alpha1.ConnectorInvalidTenantsReason)

	waitSnapshot(t, "the ECDSA key signs ES256 under its thumbprint", func(s *config.Snapshot) error {
		c := inProject(s, ns+"/proj").Connectors[ns+"/ec"]
		if c == nil || c.Assertion == nil {
			return errors.New("not compiled yet")
		}
		if c.Assertion.Algorithm != "ES256" || c.Assertion.KeyID == "" || c.Assertion.X5TS256 != "" {
			return fmt.Errorf("compiled %+v", *c.Assertion)
		}
		return nil
	})
}

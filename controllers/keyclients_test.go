//go:build !latchkey_local

package controllers

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
)

func testJWKS(t *testing.T, private bool) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var key any = k.Public()
	if private {
		key = k
	}
	b, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: key, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// OAuthClients that authenticate with JWTs (RFC 7523 §2.2): a private_key_jwt client gets no
// secret and names its keys once; a client_secret_jwt client's secret reaches the server's
// memory (and nothing else) to check HS256; DPoP and PAR requirements compile through.
func TestKeyClients(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	newProject(t, ns, "proj", nil)
	ref := v1alpha1.ProjectReference{Name: "proj"}
	jwks := testJWKS(t, false)

	for _, tt := range []struct {
		name string
		mut  func(*v1alpha1.OAuthClientSpec)
		want []string
	}{
		{"private_key_jwt without keys", func(s *v1alpha1.OAuthClientSpec) { s.TokenEndpointAuthMethod = v1alpha1.AuthPrivateKeyJWT },
			[]string{"needs exactly one of jwks and jwksURI"}},
		{"private_key_jwt with both", func(s *v1alpha1.OAuthClientSpec) {
			s.TokenEndpointAuthMethod, s.JWKS, s.JWKSURI = v1alpha1.AuthPrivateKeyJWT, jwks, "https://keys.example/jwks.json"
		}, []string{"needs exactly one of jwks and jwksURI"}},
		{"jwks with a secret method", func(s *v1alpha1.OAuthClientSpec) { s.JWKS = jwks }, []string{"only with tokenEndpointAuthMethod private_key_jwt"}},
		{"jwksURI over http", func(s *v1alpha1.OAuthClientSpec) {
			s.TokenEndpointAuthMethod, s.JWKSURI = v1alpha1.AuthPrivateKeyJWT, "http://keys.example/jwks.json"
		}, []string{"jwksURI must be an https URL"}},
		{"valid: jwksURI", func(s *v1alpha1.OAuthClientSpec) {
			s.TokenEndpointAuthMethod, s.JWKSURI = v1alpha1.AuthPrivateKeyJWT, "https://keys.example/jwks.json"
		}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(ns, "c-"+randomSuffix(), ref)
			tt.mut(&c.Spec)
			checkCreate(t, c, tt.want)
		})
	}

	pk := newClient(ns, "keys", ref)
	pk.Spec.TokenEndpointAuthMethod, pk.Spec.JWKS, pk.Spec.RequireDPoP, pk.Spec.RequirePushedAuthorizationRequests = v1alpha1.AuthPrivateKeyJWT, jwks, true, true
	create(t, pk)
	waitReady(t, pk)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "keys-credentials"}}
	if err := get(sec); err != nil {
		t.Fatal(err)
	}
	if _, ok := sec.Data["client_secret"]; ok {
		t.Fatalf("a private_key_jwt client got a secret: %v", keys(sec.Data))
	}
	waitSnapshot(t, "private_key_jwt client", func(s *config.Snapshot) error {
		c := inProject(s, ns+"/proj").Clients[pk.Status.ClientID]
		if c == nil || c.SecretHash != nil || c.TokenEndpointAuthMethod != "private_key_jwt" || string(c.JWKS) != jwks || !c.RequireDPoP || !c.RequirePAR {
			return fmt.Errorf("client = %+v", c)
		}
		return nil
	})

	bad := newClient(ns, "private-keys", ref)
	bad.Spec.TokenEndpointAuthMethod, bad.Spec.JWKS = v1alpha1.AuthPrivateKeyJWT, testJWKS(t, true)
	create(t, bad)
	waitNotReady(t, bad, v1alpha1.OAuthClientInvalidJWKSReason)

	hs := newClient(ns, "hs", ref)
	hs.Spec.TokenEndpointAuthMethod = v1alpha1.AuthClientSecretJWT
	create(t, hs)
	waitReady(t, hs)
	hsSec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hs-credentials"}}
	if err := get(hsSec); err != nil {
		t.Fatal(err)
	}
	waitSnapshot(t, "client_secret_jwt client", func(s *config.Snapshot) error {
		c := inProject(s, ns+"/proj").Clients[hs.Status.ClientID]
		if c == nil || c.SecretHash == nil || len(hsSec.Data["client_secret"]) == 0 || !bytes.Equal(c.SecretJWTKey, hsSec.Data["client_secret"]) {
			return errors.New("the client_secret_jwt key is not the Secret's client_secret")
		}
		return nil
	})
}

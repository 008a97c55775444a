//go:build !latchkey_local

package controllers

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
)

// spec.identityAssertions compiles into the snapshot; an inline key set that does not parse
// turns off only its issuer, and Degraded names it.
func TestIdentityAssertionsCompile(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	create(t, passwordSecret(ns, "pw"))
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// The set holds the private key; only its public half may be kept.
	set, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: key, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	p := newProject(t, ns, "proj", nil)
	update(t, p, func(p *v1alpha1.Project) {
		p.Spec.IdentityAssertions = &v1alpha1.IdentityAssertions{
			Lifetime: &metav1.Duration{Duration: 2 * time.Minute},
			TrustedIssuers: []v1alpha1.TrustedAssertionIssuer{
				{Issuer: "https://idp.example.com", JWKS: string(set), Clients: []string{"*"}, Subject: v1alpha1.AssertionSubjectEmail,
					EmailDomains: []string{"example.com"}},
				{Issuer: "https://broken.example.com", JWKS: `{"keys":"nope"}`, Clients: []string{"agent"}},
				{Issuer: "https://okta.example.com", JWKSURI: "https://okta.example.com/keys", Clients: []string{"agent"}, CreatePeople: true},
			},
			Audiences: []v1alpha1.AssertionAudience{{
				Issuer:  "https://as.vendor.example",
				Clients: []v1alpha1.AssertionAudienceClient{{ClientID: "chat"}, {ClientID: "web", ResourceClientID: "acme-web"}},
				Scopes:  []v1alpha1.Scope{"read"}, Resources: []v1alpha1.ResourceURI{"https://mcp.vendor.example/mcp"},
			}},
		}
	})
	cond := waitDegraded(t, p, v1alpha1.ProjectIdentityAssertionKeysInvalidReason)
	if !strings.Contains(cond.Message, "https://broken.example.com") {
		t.Errorf("Degraded message %q does not name the issuer", cond.Message)
	}
	waitSnapshot(t, "identity assertions compiled", func(s *config.Snapshot) error {
		pr := s.Project(ns + "/proj")
		if pr == nil {
			return errors.New("no project")
		}
		ia := pr.IdentityAssertions
		idp, okta := ia.Issuers["https://idp.example.com"], ia.Issuers["https://okta.example.com"]
		switch {
		case idp == nil || okta == nil:
			return fmt.Errorf("issuers %v", ia.Issuers)
		case ia.Issuers["https://broken.example.com"] != nil:
			return errors.New("the issuer with a broken key set is trusted")
		case !idp.AllClients || idp.Subject != "email" || len(idp.JWKS.Keys) != 1 || !idp.JWKS.Keys[0].IsPublic():
			return fmt.Errorf("idp compiled as %+v", idp)
		case okta.Subject != "sub" || okta.JWKSURI == "" || !okta.CreatePeople || okta.AllClients:
			return fmt.Errorf("okta compiled as %+v", okta)
		case ia.Lifetime != 2*time.Minute:
			return fmt.Errorf("lifetime %v", ia.Lifetime)
		}
		aud := ia.Audiences["https://as.vendor.example"]
		if aud == nil || aud.Clients["chat"].ResourceClientID != "chat" || aud.Clients["web"].ResourceClientID != "acme-web" {
			return fmt.Errorf("audience %+v", aud)
		}
		return nil
	})
}

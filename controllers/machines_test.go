//go:build !latchkey_local

package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
)

// A tenant cannot declare a public client that lists connectors: token exchange always
// authenticates the client (RFC 8693 §5), and a public client proves only its id, which anyone
// can send. The API server refuses the object, naming the field and why.
func TestPublicClientCannotListConnectors(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	tests := []struct {
		name string
		mut  func(*v1alpha1.OAuthClientSpec)
		want []string // substrings of the refusal; nil means accepted
	}{
		{"public client listing a connector", func(s *v1alpha1.OAuthClientSpec) {
			s.TokenEndpointAuthMethod = v1alpha1.AuthNone
			s.GrantTypes = []v1alpha1.GrantType{v1alpha1.GrantAuthorizationCode, v1alpha1.GrantTokenExchange}
			s.Connectors = []v1alpha1.ConnectorName{"github"}
		}, []string{"connectors: a public client", "cannot exchange tokens", "RFC 8693"}},
		{"public client listing a connector without the grant", func(s *v1alpha1.OAuthClientSpec) {
			s.TokenEndpointAuthMethod = v1alpha1.AuthNone
			s.Connectors = []v1alpha1.ConnectorName{"other-team/github"}
		}, []string{"connectors: a public client"}},
		{"valid: public client without connectors", func(s *v1alpha1.OAuthClientSpec) {
			s.TokenEndpointAuthMethod = v1alpha1.AuthNone
		}, nil},
		{"valid: confidential client listing a connector", func(s *v1alpha1.OAuthClientSpec) {
			s.GrantTypes = []v1alpha1.GrantType{v1alpha1.GrantAuthorizationCode, v1alpha1.GrantTokenExchange}
			s.Connectors = []v1alpha1.ConnectorName{"github"}
		}, nil},
		{"valid: connectors with the default authentication", func(s *v1alpha1.OAuthClientSpec) {
			s.TokenEndpointAuthMethod = ""
			s.Connectors = []v1alpha1.ConnectorName{"github"}
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(ns, "c-"+randomSuffix(), v1alpha1.ProjectReference{Name: "proj"})
			tt.mut(&c.Spec)
			checkCreate(t, c, tt.want)
		})
	}

	// An existing public client cannot gain connectors by an update either.
	c := newClient(ns, "public-"+randomSuffix(), v1alpha1.ProjectReference{Name: "proj"})
	c.Spec.TokenEndpointAuthMethod = v1alpha1.AuthNone
	create(t, c)
	var err error
	// The controller writes status meanwhile; a conflict says nothing about the rule.
	eventually(t, "an update that is not a conflict", func() error {
		if err := get(c); err != nil {
			return err
		}
		c.Spec.Connectors = []v1alpha1.ConnectorName{"github"}
		if err = k8s.Update(context.Background(), c); apierrors.IsConflict(err) {
			return err
		}
		return nil
	})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "connectors: a public client") {
		t.Fatalf("update adding connectors to a public client: %v", err)
	}
}

// spec.registration.clientCredentials holds resource URLs under the same rules as an
// OAuthClient's spec.resources, and scopes; spec.registration.scopes holds scopes; both reach
// the compiled configuration.
func TestRegistrationClientCredentials(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	p := &v1alpha1.Project{Spec: v1alpha1.ProjectSpec{
		SignIn: v1alpha1.SignIn{PasswordSecretRef: &v1alpha1.SecretKeyReference{Name: "pw", Key: "k"}},
		Registration: &v1alpha1.Registration{Mode: v1alpha1.RegistrationOpen, ClientCredentials: &v1alpha1.RegisteredClientCredentials{
			Resources: []v1alpha1.ResourceURI{"http://internal.example/api"},
		}},
	}}
	p.Namespace, p.Name = ns, "refused"
	checkCreate(t, p, []string{"spec.registration.clientCredentials.resources[0]", "https://"})
	p.Spec.Registration.ClientCredentials = &v1alpha1.RegisteredClientCredentials{Scopes: []v1alpha1.Scope{"two words"}}
	checkCreate(t, p, []string{"spec.registration.clientCredentials.scopes[0]"})
	p.Spec.Registration.ClientCredentials = nil
	p.Spec.Registration.Scopes = []v1alpha1.Scope{"notes:read", "two words"}
	checkCreate(t, p, []string{"spec.registration.scopes[1]"})

	p = newProjectWith(t, ns, "demo", func(s *v1alpha1.ProjectSpec) {
		s.Registration = &v1alpha1.Registration{Mode: v1alpha1.RegistrationOpen, ClientCredentials: &v1alpha1.RegisteredClientCredentials{
			Resources: []v1alpha1.ResourceURI{"https://reports.example.com/api"},
			Scopes:    []v1alpha1.Scope{"reports:read"},
		}, Scopes: []v1alpha1.Scope{"openid", "notes:read", "notes:write"}}
	})
	waitReady(t, p)
	waitSnapshot(t, "registration policy compiled", func(s *config.Snapshot) error {
		cp := s.Projects[ns+"/demo"]
		if cp == nil {
			return fmt.Errorf("project not compiled")
		}
		if got := cp.Registration.ClientCredentialsResources; !slices.Equal(got, []string{"https://reports.example.com/api"}) {
			return fmt.Errorf("clientCredentials.resources = %q", got)
		}
		if got := cp.Registration.ClientCredentialsScopes; !slices.Equal(got, []string{"reports:read"}) {
			return fmt.Errorf("clientCredentials.scopes = %q", got)
		}
		if got := cp.Registration.Scopes; !slices.Equal(got, []string{"openid", "notes:read", "notes:write"}) {
			return fmt.Errorf("registration.scopes = %q", got)
		}
		return nil
	})
}

// newProjectWith creates a password-file Project, its Secret, and whatever mut sets.
func newProjectWith(t *testing.T, namespace, name string, mut func(*v1alpha1.ProjectSpec)) *v1alpha1.Project {
	t.Helper()
	create(t, passwordSecret(namespace, name+"-passwords"))
	p := &v1alpha1.Project{}
	p.Namespace, p.Name = namespace, name
	p.Spec.SignIn = v1alpha1.SignIn{PasswordSecretRef: &v1alpha1.SecretKeyReference{Name: name + "-passwords", Key: "passwords.yaml"}}
	mut(&p.Spec)
	create(t, p)
	return p
}

// checkCreate asks the API server to create obj (dry run) and checks the answer: accepted when
// want is nil, else refused as Invalid with every substring of want in the message.
func checkCreate(t *testing.T, obj client.Object, want []string) {
	t.Helper()
	err := k8s.Create(context.Background(), obj, client.DryRunAll)
	if want == nil {
		if err != nil {
			t.Fatalf("refused a valid object: %v", err)
		}
		return
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("not refused as Invalid: %v", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("refusal does not mention %q:\n%v", w, err)
		}
	}
}

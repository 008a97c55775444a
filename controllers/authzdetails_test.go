//go:build !latchkey_local

package controllers

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	v1alpha1 "latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
)

// spec.authorizationDetails: the API server refuses a declaration the server could not
// enforce (prefixes on a type whose entries may leave locations out, a prefix that is not an
// http(s) URL or carries a query, a repeated type, a value with spaces), and what it accepts
// compiles into the snapshot with the Connector resolved to its key.
func TestAuthorizationDetailsTypes(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	gh := v1alpha1.AuthorizationDetailsType{
		Type: "github_repository", Label: "GitHub repository", Connector: "github",
		Actions: []v1alpha1.AuthorizationDetailsValue{"read", "write"}, RequireLocations: true,
		LocationPrefixes: []v1alpha1.AuthorizationDetailsLocation{"https://api.github.com/repos/acme"},
	}
	project := func(types ...v1alpha1.AuthorizationDetailsType) *v1alpha1.Project {
		p := &v1alpha1.Project{}
		p.Namespace, p.Name = ns, "dry"
		p.Spec.SignIn = v1alpha1.SignIn{PasswordSecretRef: &v1alpha1.SecretKeyReference{Name: "pw", Key: "passwords.yaml"}}
		p.Spec.AuthorizationDetails = types
		return p
	}
	with := func(f func(*v1alpha1.AuthorizationDetailsType)) v1alpha1.AuthorizationDetailsType {
		d := gh
		d.LocationPrefixes, d.Actions = slices.Clone(gh.LocationPrefixes), slices.Clone(gh.Actions)
		f(&d)
		return d
	}
	for name, tc := range map[string]struct {
		obj  *v1alpha1.Project
		want []string
	}{
		"valid":                      {project(gh), nil},
		"prefixes without locations": {project(with(func(d *v1alpha1.AuthorizationDetailsType) { d.RequireLocations = false })), []string{"locationPrefixes requires requireLocations"}},
		"prefix not a URL":           {project(with(func(d *v1alpha1.AuthorizationDetailsType) { d.LocationPrefixes[0] = "api.github.com/repos" })), []string{"absolute http or https URL"}},
		"prefix with a query": {project(with(func(d *v1alpha1.AuthorizationDetailsType) {
			d.LocationPrefixes = []v1alpha1.AuthorizationDetailsLocation{"https://x.example/?a=b"}
		})), []string{"no query, fragment or userinfo"}},
		"the same type twice": {project(gh, gh), []string{"Duplicate value"}},
		"an action with a space": {project(with(func(d *v1alpha1.AuthorizationDetailsType) {
			d.Actions = []v1alpha1.AuthorizationDetailsValue{"read all"}
		})), []string{"actions"}},
		"a type name with markup": {project(with(func(d *v1alpha1.AuthorizationDetailsType) { d.Type = "<b>" })), []string{"type"}},
	} {
		t.Run(name, func(t *testing.T) { checkCreate(t, tc.obj, tc.want) })
	}

	p := newProjectWith(t, ns, "proj", func(s *v1alpha1.ProjectSpec) {
		s.AuthorizationDetails = []v1alpha1.AuthorizationDetailsType{gh, {Type: "document", Identifier: true}}
	})
	waitSnapshot(t, "authorization details compiled", func(s *config.Snapshot) error {
		pr := s.Project(p.Namespace + "/" + p.Name)
		if pr == nil {
			return errors.New("no project")
		}
		ts := pr.AuthorizationDetails
		if !slices.Equal(ts.Names(), []string{"document", "github_repository"}) {
			return fmt.Errorf("types %v", ts.Names())
		}
		if typ, _ := ts.Lookup("github_repository"); typ.Connector != ns+"/github" || typ.LocationPrefixes[0] != "https://api.github.com/repos/acme/" {
			return fmt.Errorf("github_repository compiled as %+v", typ)
		}
		return nil
	})
}

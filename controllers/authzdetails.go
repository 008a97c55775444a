package controllers

import (
	"context"

	v1alpha1 "latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/authzdetails"
	"latchkey.dev/latchkey/internal/config"
)

// compileAuthorizationDetails compiles spec.authorizationDetails (RFC 9396 types). The CRD's
// schema refuses what NewTypes refuses, so a failure means the object bypassed it (an older
// CRD, a direct etcd write): the Project keeps serving, accepts no authorization_details,
// and Degraded says why.
func (r *resolver) compileAuthorizationDetails(_ context.Context, p *v1alpha1.Project, out *config.Project, off *degraded) error {
	decls := make([]authzdetails.Type, 0, len(p.Spec.AuthorizationDetails))
	for _, d := range p.Spec.AuthorizationDetails {
		t := authzdetails.Type{
			Name:             d.Type,
			Label:            d.Label,
			RequireLocations: d.RequireLocations,
			Identifier:       d.Identifier,
		}
		if d.Connector != "" {
			t.Connector = connectorKey(string(d.Connector), p.Namespace).String()
		}
		for _, a := range d.Actions {
			t.Actions = append(t.Actions, string(a))
		}
		for _, a := range d.Datatypes {
			t.Datatypes = append(t.Datatypes, string(a))
		}
		for _, l := range d.LocationPrefixes {
			t.LocationPrefixes = append(t.LocationPrefixes, string(l))
		}
		decls = append(decls, t)
	}
	types, err := authzdetails.NewTypes(decls)
	if err != nil {
		_, err := off.add(notReadyf(v1alpha1.ProjectAuthorizationDetailsInvalidReason, "spec.authorizationDetails: %v", err), "authorization_details")
		return err
	}
	out.AuthorizationDetails = types
	return nil
}

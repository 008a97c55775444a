package controllers

import (
	"context"
	"fmt"

	"latchkey.dev/latchkey/api/v1alpha1"
)

// ---------------------------------------------------------------------------------------------
// Field indexes

const (
	// projectIndex indexes OAuthClients, Connectors and RedirectPolicies by "namespace/name" of
	// the Project they refer to.
	projectIndex = "spec.projectRef"
	// secretIndex indexes Projects, Connectors and OAuthClients by the names of the Secrets (in
	// their own namespace) they read or write.
	secretIndex = "secretRefs"
	// configMapIndex indexes Projects and OAuthClients by the names of the ConfigMaps (in their
	// own namespace) they read: logos, SPIFFE trust bundles.
	configMapIndex = "configMapRefs"
	// workloadNamespaceIndex indexes OAuthClients by the namespace of the ServiceAccount of
	// their spec.workloadIdentity, when it is another than their own: that namespace's labels
	// decide whether the Project admits it.
	workloadNamespaceIndex = "workloadNamespace"
	// connectorIndex indexes OAuthClients by the "namespace/name" of every Connector they list.
	connectorIndex = "spec.connectors"
)

func addIndexes(ctx context.Context, fi FieldIndexer) error {
	indexes := []struct {
		obj   Object
		field string
		fn    IndexerFunc
	}{
		{&v1alpha1.OAuthClient{}, projectIndex, func(o Object) []string {
			oc := o.(*v1alpha1.OAuthClient)
			return []string{projectKeyOf(oc.Spec.ProjectRef, oc.Namespace).String()}
		}},
		{&v1alpha1.Connector{}, projectIndex, func(o Object) []string {
			c := o.(*v1alpha1.Connector)
			return []string{projectKeyOf(c.Spec.ProjectRef, c.Namespace).String()}
		}},
		{&v1alpha1.RedirectPolicy{}, projectIndex, func(o Object) []string {
			p := o.(*v1alpha1.RedirectPolicy)
			return []string{projectKeyOf(p.Spec.ProjectRef, p.Namespace).String()}
		}},
		{&v1alpha1.AccessPolicy{}, projectIndex, func(o Object) []string {
			p := o.(*v1alpha1.AccessPolicy)
			return []string{projectKeyOf(p.Spec.ProjectRef, p.Namespace).String()}
		}},
		{&v1alpha1.Project{}, secretIndex, func(o Object) []string {
			return projectSecretNames(o.(*v1alpha1.Project))
		}},
		{&v1alpha1.Project{}, configMapIndex, func(o Object) []string {
			return projectConfigMapNames(o.(*v1alpha1.Project))
		}},
		{&v1alpha1.OAuthClient{}, workloadNamespaceIndex, func(o Object) []string {
			oc := o.(*v1alpha1.OAuthClient)
			if wi := oc.Spec.WorkloadIdentity; wi != nil && wi.ServiceAccount != nil && wi.ServiceAccount.Namespace != "" &&
				wi.ServiceAccount.Namespace != oc.Namespace {
				return []string{wi.ServiceAccount.Namespace}
			}
			return nil
		}},
		{&v1alpha1.OAuthClient{}, configMapIndex, func(o Object) []string {
			if wi := o.(*v1alpha1.OAuthClient).Spec.WorkloadIdentity; wi != nil && wi.TrustBundle != nil && wi.TrustBundle.ConfigMapRef != nil {
				return []string{wi.TrustBundle.ConfigMapRef.Name}
			}
			return nil
		}},
		{&v1alpha1.Connector{}, secretIndex, func(o Object) []string {
			// An API-key Connector names no Secret.
			if name := o.(*v1alpha1.Connector).Spec.ClientSecretRef.Name; name != "" {
				return []string{name}
			}
			return nil
		}},
		// Only a Secret named in spec.secretName is indexed: one index entry per client costs
		// two small sets each (the namespaced and the all-namespaces key), a sixth of the
		// operator's heap at ten thousand clients. clientsForSecret finds a default-named
		// Secret's client by its name.
		{&v1alpha1.OAuthClient{}, secretIndex, func(o Object) []string {
			oc := o.(*v1alpha1.OAuthClient)
			if ref := oc.Spec.ClientSecretRef; ref != nil {
				return []string{ref.Name}
			}
			if n := oc.Spec.SecretName; n != "" {
				return []string{n}
			}
			return nil
		}},
		{&v1alpha1.OAuthClient{}, clientIDIndex, func(o Object) []string {
			return []string{clientIDIndexValue(o.(*v1alpha1.OAuthClient))}
		}},
		{&v1alpha1.OAuthClient{}, resourceIndex, func(o Object) []string {
			return resourceIndexValues(o.(*v1alpha1.OAuthClient))
		}},
		{&v1alpha1.OAuthClient{}, connectorIndex, func(o Object) []string {
			oc := o.(*v1alpha1.OAuthClient)
			out := make([]string, len(oc.Spec.Connectors))
			for i, name := range oc.Spec.Connectors {
				out[i] = connectorKey(string(name), oc.Namespace).String()
			}
			return out
		}},
	}
	for _, ix := range indexes {
		if err := fi.IndexField(ctx, ix.obj, ix.field, ix.fn); err != nil {
			return fmt.Errorf("indexing %T by %s: %w", ix.obj, ix.field, err)
		}
	}
	return nil
}

// projectSecretNames lists every Secret a Project reads.
func projectSecretNames(p *v1alpha1.Project) []string {
	var out []string
	if r := p.Spec.SignIn.PasswordSecretRef; r != nil {
		out = append(out, r.Name)
	}
	if o := p.Spec.SignIn.OIDC; o != nil {
		out = append(out, o.ClientSecretRef.Name)
	}
	if reg := p.Spec.Registration; reg != nil && reg.InitialAccessTokenSecretRef != nil {
		out = append(out, reg.InitialAccessTokenSecretRef.Name)
	}
	for _, s := range p.Spec.EventSinks {
		out = append(out, s.HMACSecretRef.Name)
	}
	if r := p.Spec.SigningKeySecretRef; r != nil {
		out = append(out, r.Name)
	}
	if b := p.Spec.Branding; b != nil && b.Logo != nil && b.Logo.Kind == v1alpha1.LogoFromSecret {
		out = append(out, b.Logo.Name)
	}
	return out
}

// projectConfigMapNames lists every ConfigMap a Project reads: its logo's, if any.
func projectConfigMapNames(p *v1alpha1.Project) []string {
	if b := p.Spec.Branding; b != nil && b.Logo != nil && b.Logo.Kind == v1alpha1.LogoFromConfigMap {
		return []string{b.Logo.Name}
	}
	return nil
}

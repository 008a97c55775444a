package controllers

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"latchkey.dev/latchkey/api/v1alpha1"
)

// Resource URIs have owners (docs/decisions/0052). A URL in an OAuthClient's spec.resources
// makes the client the audience of every token issued for that URL and lets it get
// client_credentials tokens naming it, so listing a URL is a claim on another team's server
// unless someone decides who may make it. As with Connector audiences, the first Ready
// OAuthClient of the Project to list a URL (by creation time, then namespace/name, so every
// replica and every restart agrees) owns it; it may share it with other namespaces
// (spec.resourceSharing). Any other client that lists it is compiled without it.

// resourceIndex indexes OAuthClients by "project resource" for every URL of spec.resources,
// so the claimants of one URL in one Project are one indexed List.
const resourceIndex = "spec.resources"

// resourceIndexKey is a URL's key in resourceIndex. A space never occurs in a Project key or
// in a resource URL (CEL admits only URLs).
func resourceIndexKey(projectKey, uri string) string { return projectKey + " " + uri }

// resourceIndexValues lists oc's keys in resourceIndex.
func resourceIndexValues(oc *v1alpha1.OAuthClient) []string {
	pk := projectKeyOf(oc.Spec.ProjectRef, oc.Namespace).String()
	out := make([]string, len(oc.Spec.Resources))
	for i, u := range oc.Spec.Resources {
		out[i] = resourceIndexKey(pk, string(u))
	}
	return out
}

// clientResources keeps in res.compiled.Resources the URLs of oc's spec.resources that oc may
// serve, and records in res.resourceConflicts why it may not serve the others.
func (r *resolver) clientResources(ctx context.Context, oc *v1alpha1.OAuthClient, res *clientResult) error {
	kept := res.compiled.Resources[:0:0]
	for _, u := range oc.Spec.Resources {
		owner, err := r.resourceOwner(ctx, oc, res.project, string(u))
		if err != nil {
			return err
		}
		if owner == nil || owner.Namespace == oc.Namespace {
			kept = append(kept, string(u))
			continue
		}
		var from v1alpha1.FromNamespaces
		var selector *metav1.LabelSelector
		if s := owner.Spec.ResourceSharing; s != nil {
			from, selector = s.From, s.Selector
		}
		ok, why, err := r.grants(ctx, "spec.resourceSharing", from, selector, oc.Namespace)
		if err != nil {
			return err
		}
		if ok {
			kept = append(kept, string(u))
			continue
		}
		res.resourceConflicts = append(res.resourceConflicts, fmt.Sprintf(
			"resource %q belongs to OAuthClient %s/%s, which does not share it with namespace %q: %s",
			u, owner.Namespace, owner.Name, oc.Namespace, why))
	}
	res.compiled.Resources = kept
	return nil
}

// resourceOwner returns the OAuthClient that owns uri in the Project: the oldest otherwise
// Ready one listing it, when that is older than oc; nil when oc itself is the owner.
func (r *resolver) resourceOwner(ctx context.Context, oc *v1alpha1.OAuthClient, projectKey, uri string) (*v1alpha1.OAuthClient, error) {
	var list v1alpha1.OAuthClientList
	if err := r.c.List(ctx, &list, MatchingFields{resourceIndex: resourceIndexKey(projectKey, uri)}, noCopy); err != nil {
		return nil, fmt.Errorf("listing OAuthClients of Project %s serving %s: %w", projectKey, uri, err)
	}
	var owner *v1alpha1.OAuthClient
	for i := range list.Items {
		other := &list.Items[i]
		if other.UID == oc.UID || !older(other, oc) || (owner != nil && !older(other, owner)) {
			continue
		}
		ready, err := r.clientReady(ctx, other)
		if err != nil {
			return nil, err
		}
		if ready {
			owner = other
		}
	}
	return owner, nil
}

// clientReady reports whether an OAuthClient is Ready apart from the resource rule, reading its
// credentials Secret from the cache as the compiler does.
func (r *resolver) clientReady(ctx context.Context, oc *v1alpha1.OAuthClient) (bool, error) {
	key := objectKey(oc)
	if r.clientsReady == nil {
		r.clientsReady = map[types.NamespacedName]bool{}
	}
	if ready, ok := r.clientsReady[key]; ok {
		return ready, nil
	}
	sec, err := r.optionalSecret(ctx, oc.Namespace, credentialsSecretName(oc))
	if err != nil {
		return false, err
	}
	_, err = r.clientBase(ctx, oc, sec)
	if _, ok := asNotReady(err); err != nil && !ok {
		return false, err
	}
	r.clientsReady[key] = err == nil
	return err == nil, nil
}

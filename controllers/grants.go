package controllers

import (
	"cmp"
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"latchkey.dev/latchkey/api/v1alpha1"
)

// connectorRefuses says why the Connector at key does not let OAuthClients of namespace use it
// (its spec.allowedClientNamespaces), or "" when it does or does not exist (then the usual
// not-found report applies). The grant is the Connector owner's decision, as a Project's
// allowedNamespaces is the Project owner's: naming another team's Connector is not enough.
func (r *resolver) connectorRefuses(ctx context.Context, key types.NamespacedName, namespace string) (string, error) {
	if key.Namespace == namespace {
		return "", nil
	}
	c := &v1alpha1.Connector{}
	if err := r.c.Get(ctx, key, c, noCopy); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		return "", fmt.Errorf("reading Connector %s: %w", key, err)
	}
	var from v1alpha1.FromNamespaces
	var selector *metav1.LabelSelector
	if grant := c.Spec.AllowedClientNamespaces; grant != nil {
		from, selector = grant.From, grant.Selector
	}
	ok, why, err := r.grants(ctx, "spec.allowedClientNamespaces", from, selector, namespace)
	if err != nil || ok {
		return "", err
	}
	return fmt.Sprintf("Connector %s does not allow OAuthClients from namespace %q: %s", key, namespace, why), nil
}

// grants applies a namespace grant, a Project's spec.allowedNamespaces or a Connector's
// spec.allowedClientNamespaces (field), to a namespace other than the owner's own: from (Same
// when unset) and, for Selector, the namespace's labels. When it does not grant, why names what
// is off.
func (r *resolver) grants(ctx context.Context, field string, from v1alpha1.FromNamespaces, selector *metav1.LabelSelector, namespace string) (ok bool, why string, err error) {
	switch cmp.Or(from, v1alpha1.NamespacesFromSame) {
	case v1alpha1.NamespacesFromAll:
		return true, "", nil
	case v1alpha1.NamespacesFromSelector:
		if selector == nil {
			return false, field + ".selector is not set", nil
		}
		sel, err := metav1.LabelSelectorAsSelector(selector)
		if err != nil {
			return false, fmt.Sprintf("%s.selector is invalid: %v", field, err), nil
		}
		ns, err := r.namespace(ctx, namespace)
		if err != nil {
			return false, "", err
		}
		if ns == nil || !sel.Matches(labels.Set(ns.Labels)) {
			return false, fmt.Sprintf("its labels do not match %s.selector (%s)", field, sel), nil
		}
		return true, "", nil
	default:
		return false, field + ".from is Same", nil
	}
}

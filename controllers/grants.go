package controllers

import (
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
	refused := func(why string) (string, error) {
		return fmt.Sprintf("Connector %s does not allow OAuthClients from namespace %q: %s", key, namespace, why), nil
	}
	grant := c.Spec.AllowedClientNamespaces
	from := v1alpha1.NamespacesFromSame
	if grant != nil && grant.From != "" {
		from = grant.From
	}
	switch from {
	case v1alpha1.NamespacesFromAll:
		return "", nil
	case v1alpha1.NamespacesFromSelector:
		if grant.Selector == nil {
			return refused("spec.allowedClientNamespaces.selector is not set")
		}
		sel, err := metav1.LabelSelectorAsSelector(grant.Selector)
		if err != nil {
			return refused(fmt.Sprintf("spec.allowedClientNamespaces.selector is invalid: %v", err))
		}
		ns, err := r.namespace(ctx, namespace)
		if err != nil {
			return "", err
		}
		if ns == nil || !sel.Matches(labels.Set(ns.Labels)) {
			return refused(fmt.Sprintf("its labels do not match spec.allowedClientNamespaces.selector (%s)", sel))
		}
		return "", nil
	default:
		return refused("spec.allowedClientNamespaces.from is Same")
	}
}

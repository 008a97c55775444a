//go:build !latchkey_local

package controllers

import (
	"context"
	"errors"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"latchkey.dev/latchkey/api/v1alpha1"
)

// TestObservedGenerationWaitsForACompleteReconcile: status.observedGeneration says the
// controller has acted on a generation completely (docs/decisions/0023). A reconcile of a new
// generation that fails part way, here because the API server refuses the credentials Secret
// the new spec names, patches what it found but leaves observedGeneration, and the Ready
// condition it never reached, at the old generation; the next complete reconcile advances both.
func TestObservedGenerationWaitsForACompleteReconcile(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := newNamespace(t, nil)
	newProject(t, ns, "proj", nil)
	oc := newClient(ns, "app", v1alpha1.ProjectReference{Name: "proj"})
	create(t, oc)
	waitReady(t, oc)
	first := oc.Generation

	const blocked = "blocked-credentials"
	unblock := refuseSecret(t, ns, blocked)
	update(t, oc, func(oc *v1alpha1.OAuthClient) { oc.Spec.SecretName = blocked })
	eventually(t, "the failing reconcile of the new generation patches status", func() error {
		if err := get(oc); err != nil {
			return err
		}
		if oc.Status.SecretName != blocked {
			return errors.New("status.secretName not updated yet")
		}
		return nil
	})
	if oc.Generation == first {
		t.Fatalf("generation did not change: %d", oc.Generation)
	}
	if oc.Status.ObservedGeneration != first {
		t.Errorf("status.observedGeneration = %d after a failed reconcile of generation %d, want %d still", oc.Status.ObservedGeneration, oc.Generation, first)
	}
	if c := meta.FindStatusCondition(oc.Status.Conditions, v1alpha1.ReadyCondition); c == nil || c.ObservedGeneration != first {
		t.Errorf("Ready = %+v, want it still computed from generation %d", c, first)
	}

	unblock()
	// A new generation brings the client back at once, rather than after the failure backoff.
	update(t, oc, func(oc *v1alpha1.OAuthClient) { oc.Spec.DisplayName = "App" })
	waitReady(t, oc)
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: blocked}, &corev1.Secret{}); err != nil {
		t.Errorf("credentials Secret after the refusal ended: %v", err)
	}
}

// refuseSecret makes the API server refuse to create a Secret of that name in namespace, with a
// ValidatingAdmissionPolicy, and waits until it does. The returned function lifts the refusal
// and waits until it is lifted.
func refuseSecret(t *testing.T, namespace, name string) func() {
	t.Helper()
	ctx := context.Background()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "refuse-secret-" + namespace},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"secrets"}},
					},
				}},
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "object.metadata.name != '" + name + "'",
				Message:    "refused by the test",
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: namespace}},
			},
		},
	}
	create(t, policy)
	create(t, binding)
	lift := func() {
		for _, o := range []client.Object{binding, policy} {
			if err := client.IgnoreNotFound(k8s.Delete(ctx, o)); err != nil {
				t.Errorf("deleting %T %s: %v", o, o.GetName(), err)
			}
		}
	}
	t.Cleanup(lift)

	probe := func() error {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
		return k8s.Create(ctx, s, client.DryRunAll)
	}
	eventually(t, "the API server refuses the Secret", func() error {
		if err := probe(); !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
			return errors.New("still admitted")
		}
		return nil
	})
	return func() {
		t.Helper()
		lift()
		eventually(t, "the API server admits the Secret again", probe)
	}
}

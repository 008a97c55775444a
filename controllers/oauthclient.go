package controllers

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/secret"
)

// Labels on the credentials Secrets the controller writes, so people (and a label-selected
// cache) can find them.
const (
	managedByLabel       = "app.kubernetes.io/managed-by"
	managedByValue       = "latchkey"
	oauthClientNameLabel = "latchkey.dev/oauthclient"
)

// clientPhases are the OAuthClient's status phases (OAuthClientReconciler, Standalone). The
// one that writes, the credentials Secret (reconcileSecret), is the reconciler's own.
type clientPhases struct {
	base
	// holders records which namespace holds each client id (clientids.go); nil: no store, and
	// only the OAuthClients that exist decide.
	holders clientIDHolders
}

type clientScope struct {
	oc  *v1alpha1.OAuthClient
	res *resolver
	// secret is the credentials Secret as it now stands (nil: could not be written).
	secret *corev1.Secret
}

var oauthClientKind = statusKind[*v1alpha1.OAuthClient]{
	status: func(oc *v1alpha1.OAuthClient) statusFields {
		return statusFields{&oc.Status.ObservedGeneration, &oc.Status.Conditions}
	},
	// The Secret goes with the owner reference; nothing to report on the way out.
	skipDeleting: true,
}

// writesSecret reports whether Latchkey may write sec for oc: only a Secret it created for this
// OAuthClient, which carries the managed-by label and this OAuthClient as its controller. Any
// other Secret is left untouched, even one nobody owns: adopting it would let whoever may
// create an OAuthClient overwrite, and have garbage-collected, a Secret they could not edit
// themselves (docs/decisions/0019). Secrets created by earlier versions carry both marks.
func writesSecret(oc *v1alpha1.OAuthClient, sec *corev1.Secret) bool {
	owner := metav1.GetControllerOf(sec)
	return owner != nil && owner.UID == oc.UID && sec.Labels[managedByLabel] == managedByValue
}

// CredentialsSecretName is the name of the Secret an OAuthClient's credentials go to.
func CredentialsSecretName(oc *v1alpha1.OAuthClient) string { return credentialsSecretName(oc) }

// WritesCredentials reports whether Latchkey writes a credentials Secret for the OAuthClient:
// not when its client secret comes from spec.clientSecretRef.
func WritesCredentials(oc *v1alpha1.OAuthClient) bool { return writesCredentials(oc) }

// CredentialsSecret is what the reconciler writes to an OAuthClient's credentials Secret, for a
// store of Secrets other than the API server (the no-cluster mode keeps them as files). Given
// the Secret that now stands under CredentialsSecretName (nil: none), it returns a new one with
// a fresh client secret, current with what is missing added, or current untouched when Latchkey
// did not create it for this OAuthClient (docs/decisions/0019) or the client's secret comes from
// spec.clientSecretRef; changed says whether it must be written.
func CredentialsSecret(oc *v1alpha1.OAuthClient, current *corev1.Secret) (sec *corev1.Secret, changed bool, err error) {
	if !writesCredentials(oc) {
		// Its secret is in the administrator's Secret; Latchkey writes none.
		return current, false, nil
	}
	if current == nil {
		sec, err = desiredCredentials(oc, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: oc.Namespace, Name: credentialsSecretName(oc)},
			Type:       corev1.SecretTypeOpaque,
		})
		return sec, err == nil, err
	}
	if !writesSecret(oc, current) {
		return current, false, nil
	}
	sec, err = desiredCredentials(oc, current.DeepCopy())
	if err != nil {
		return nil, false, err
	}
	changed = !equality.Semantic.DeepEqual(current.Data, sec.Data) ||
		!equality.Semantic.DeepEqual(current.Labels, sec.Labels) ||
		!equality.Semantic.DeepEqual(current.OwnerReferences, sec.OwnerReferences)
	return sec, changed, nil
}

// desiredCredentials adds to sec what the OAuthClient needs there; scheme names its kind in the
// owner reference.
func desiredCredentials(oc *v1alpha1.OAuthClient, sec *corev1.Secret) (*corev1.Secret, error) {
	sec.Labels = maps.Clone(sec.Labels)
	if sec.Labels == nil {
		sec.Labels = map[string]string{}
	}
	sec.Labels[managedByLabel] = managedByValue
	// Read back through the cache, which holds only Secrets with this label; its value lets no
	// Connector use the client's secret.
	sec.Labels[v1alpha1.SecretUseLabel] = v1alpha1.SecretUseLatchkey
	sec.Labels[oauthClientNameLabel] = truncateLabel(oc.Name)
	if err := setControllerReference(oc, sec); err != nil {
		return nil, fmt.Errorf("owning Secret %s/%s: %w", sec.Namespace, sec.Name, err)
	}
	data := maps.Clone(sec.Data)
	if data == nil {
		data = map[string][]byte{}
	}
	data[v1alpha1.ClientIDSecretKey] = []byte(clientIDFor(oc))
	if !hasSecret(oc) {
		// A public or private_key_jwt client has no secret; a leftover one would only mislead
		// whoever reads this.
		delete(data, v1alpha1.ClientSecretSecretKey)
	} else if len(data[v1alpha1.ClientSecretSecretKey]) == 0 {
		data[v1alpha1.ClientSecretSecretKey] = []byte(secret.New(secret.PrefixClientSecret))
	}
	sec.Data = data
	return sec, nil
}

// truncateLabel fits a resource name into a label value (63 characters).
func truncateLabel(s string) string {
	if len(s) <= 63 {
		return s
	}
	return strings.TrimRight(s[:63], "-.")
}

func (r *clientPhases) reconcileReady(ctx context.Context, s *clientScope) (Result, error) {
	oc := s.oc
	err := r.holdClientID(ctx, s)
	var res *clientResult
	if err == nil {
		res, err = s.res.client(ctx, oc, s.secret)
	}
	if err != nil {
		if _, ok := asNotReady(err); !ok {
			return Result{}, err
		}
		r.setReady(&oc.Status.Conditions, oc.Generation, err, "")
		meta.RemoveStatusCondition(&oc.Status.Conditions, v1alpha1.OAuthClientConnectorsResolvedCondition)
		meta.RemoveStatusCondition(&oc.Status.Conditions, v1alpha1.OAuthClientResourcesOwnedCondition)
		meta.RemoveStatusCondition(&oc.Status.Conditions, v1alpha1.DegradedCondition)
		return bundleRequeue(s), nil
	}
	where := fmt.Sprintf("credentials in Secret %s/%s", oc.Namespace, oc.Status.SecretName)
	if ref := oc.Spec.ClientSecretRef; ref != nil {
		where = fmt.Sprintf("client secret from Secret %s/%s key %s", oc.Namespace, ref.Name, ref.Key)
	}
	if w := res.compiled.Workload; w != nil {
		where = workloadWhere(w)
	}
	r.setReady(&oc.Status.Conditions, oc.Generation, nil,
		fmt.Sprintf("client %s of Project %s; %s", oc.Status.ClientID, res.project, where))

	var connErr error
	msg := fmt.Sprintf("%d of %d connectors usable", len(res.compiled.Connectors), len(oc.Spec.Connectors))
	switch {
	case len(res.refused) > 0:
		// A refusal comes first: it will not go away by waiting, only by the Connector's owner
		// granting this namespace.
		connErr = notReadyf(v1alpha1.OAuthClientConnectorNotAllowedReason, "%s", strings.Join(append(res.refused, res.unresolved...), "; "))
	case len(res.unresolved) > 0:
		connErr = notReadyf(v1alpha1.OAuthClientConnectorNotFoundReason, "%s", strings.Join(res.unresolved, "; "))
	}
	r.setCondition(&oc.Status.Conditions, oc.Generation, v1alpha1.OAuthClientConnectorsResolvedCondition, connErr,
		v1alpha1.OAuthClientConnectorsResolvedReason, msg)
	// The client serves with the connectors that resolved and the resources it owns: Degraded,
	// not un-Ready, when some are not usable (docs/decisions/0028).
	var problems []*notReady
	if nr, ok := asNotReady(connErr); ok {
		problems = append(problems, notReadyf(nr.reason, "%s; serving with %s until they are fixed", nr.message, msg))
	}
	resMsg := fmt.Sprintf("%d of %d resources owned or shared with this namespace", len(res.compiled.Resources), len(oc.Spec.Resources))
	if len(oc.Spec.Resources) == 0 {
		meta.RemoveStatusCondition(&oc.Status.Conditions, v1alpha1.OAuthClientResourcesOwnedCondition)
	} else {
		var resErr error
		if len(res.resourceConflicts) > 0 {
			// Not a wait: only the owner sharing the URL, or the owner going, changes it.
			resErr = notReadyf(v1alpha1.OAuthClientResourceConflictReason, "%s", strings.Join(res.resourceConflicts, "; "))
			problems = append(problems, notReadyf(v1alpha1.OAuthClientResourceConflictReason,
				"%s; serving with %s", strings.Join(res.resourceConflicts, "; "), resMsg))
		}
		r.setCondition(&oc.Status.Conditions, oc.Generation, v1alpha1.OAuthClientResourcesOwnedCondition, resErr,
			v1alpha1.OAuthClientResourcesOwnedReason, resMsg)
	}
	if res.staleBundle != nil {
		problems = append(problems, res.staleBundle)
	}
	var degErr error
	if len(problems) > 0 {
		degErr = joinNotReady(problems)
	}
	r.setDegraded(&oc.Status.Conditions, oc.Generation, degErr, msg)
	return bundleRequeue(s), nil
}

// bundleRequeue reconciles a client whose trust bundle comes from an endpoint again when the
// endpoint is next fetched, so its conditions follow what the compiler serves.
func bundleRequeue(s *clientScope) Result {
	next := s.res.bundleNext[types.NamespacedName{Namespace: s.oc.Namespace, Name: s.oc.Name}]
	if next.IsZero() {
		return Result{}
	}
	return Result{RequeueAfter: max(s.res.bundles.Until(next), time.Second)}
}

// reconcileRedirects lists the registered redirect URIs in status with their classification
// under the Project's RedirectPolicies, and whether a policy refuses the client (enforce.go).
func (r *clientPhases) reconcileRedirects(ctx context.Context, s *clientScope) (Result, error) {
	return r.classifyRedirects(ctx, s)
}

// secretConflict says why sec is not this client's credentials Secret, and what to do.
func secretConflict(oc *v1alpha1.OAuthClient, sec *corev1.Secret) error {
	why := "was not created by Latchkey for this OAuthClient"
	if owner := metav1.GetControllerOf(sec); owner != nil && owner.UID != oc.UID {
		why = fmt.Sprintf("is controlled by %s %s", owner.Kind, owner.Name)
	}
	return notReadyf(v1alpha1.OAuthClientSecretConflictReason,
		"Secret %s/%s (spec.secretName) %s; Latchkey leaves it untouched: choose another spec.secretName, or delete the Secret to have it created",
		sec.Namespace, sec.Name, why)
}

// setControllerReference makes oc the controlling owner of sec, as controller-runtime's
// controllerutil.SetControllerReference does (Controller and BlockOwnerDeletion set, an
// existing reference to oc replaced), so the garbage collector deletes the Secret with its
// OAuthClient. A Secret another object controls is an error.
func setControllerReference(oc *v1alpha1.OAuthClient, sec *corev1.Secret) error {
	ref := *metav1.NewControllerRef(oc, v1alpha1.GroupVersion.WithKind("OAuthClient"))
	if c := metav1.GetControllerOfNoCopy(sec); c != nil && !sameOwner(*c, ref) {
		return fmt.Errorf("it is already controlled by %s %s", c.Kind, c.Name)
	}
	refs := sec.GetOwnerReferences()
	for i := range refs {
		if sameOwner(refs[i], ref) {
			refs[i] = ref
			return nil
		}
	}
	sec.SetOwnerReferences(append(refs, ref))
	return nil
}

// sameOwner reports whether a and b name the same object: group, kind and name (the version
// may differ).
func sameOwner(a, b metav1.OwnerReference) bool {
	ga, errA := schema.ParseGroupVersion(a.APIVersion)
	gb, errB := schema.ParseGroupVersion(b.APIVersion)
	return errA == nil && errB == nil && ga.Group == gb.Group && a.Kind == b.Kind && a.Name == b.Name
}

package controllers

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

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

// OAuthClientReconciler writes an OAuthClient's credentials into its Secret and reports whether
// the client is usable.
type OAuthClientReconciler struct {
	base
	deps *dependents
	// live reads the metadata of a credentials Secret the cache does not hold (see
	// existingSecret); never a Secret's data.
	live client.Reader
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

// Reconcile implements reconcile.Reconciler.
func (r *OAuthClientReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return reconcileWith(ctx, &r.base, req, &v1alpha1.OAuthClient{}, oauthClientKind,
		func(oc *v1alpha1.OAuthClient) *clientScope { return &clientScope{oc: oc, res: r.resolver()} },
		r.reconcileSecret, r.reconcileReady, r.reconcileRedirects)
}

// reconcileSecret makes sure the credentials Secret holds the client id and, for a confidential
// client, a client secret. An existing client secret is kept: rotation is the administrator's
// choice. A Secret controlled by another object is left untouched (reconcileReady reports the
// conflict). The Secret is written only when something is missing or different.
func (r *OAuthClientReconciler) reconcileSecret(ctx context.Context, s *clientScope) (ctrl.Result, error) {
	oc := s.oc
	key := types.NamespacedName{Namespace: oc.Namespace, Name: credentialsSecretName(oc)}
	oc.Status.SecretName = key.Name
	if !writesCredentials(oc) {
		// The secret is in the administrator's Secret (spec.clientSecretRef), which Latchkey
		// only reads, or there is none (spec.workloadIdentity); the agent's id is in
		// spec.clientID or status.clientID.
		return ctrl.Result{}, nil
	}

	current := &corev1.Secret{}
	if err := r.client.Get(ctx, key, current); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("reading Secret %s: %w", key, err)
		}
		desired, err := r.desiredSecret(oc, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
			Type:       corev1.SecretTypeOpaque,
		})
		if err != nil {
			return ctrl.Result{}, err
		}
		if err := r.client.Create(ctx, desired); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return r.existingSecret(ctx, s, key)
			}
			return ctrl.Result{}, fmt.Errorf("creating Secret %s: %w", key, err)
		}
		s.secret = desired
		return ctrl.Result{}, nil
	}
	if !writesSecret(oc, current) {
		// Someone else's Secret, or one nobody owns that a tenant named to have Latchkey take
		// it over: not a byte of it is changed (reconcileReady reports SecretConflict).
		s.secret = current
		return ctrl.Result{}, nil
	}
	desired, err := r.desiredSecret(oc, current.DeepCopy())
	if err != nil {
		return ctrl.Result{}, err
	}
	if equality.Semantic.DeepEqual(current.Data, desired.Data) &&
		equality.Semantic.DeepEqual(current.Labels, desired.Labels) &&
		equality.Semantic.DeepEqual(current.OwnerReferences, desired.OwnerReferences) {
		s.secret = current
		return ctrl.Result{}, nil
	}
	// The optimistic lock keeps an administrator's concurrent rotation from being overwritten.
	if err := r.client.Patch(ctx, desired, client.MergeFromWithOptions(current, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, fmt.Errorf("updating Secret %s: %w", key, err)
	}
	s.secret = desired
	return ctrl.Result{}, nil
}

// existingSecret handles a credentials Secret that exists but is not in the cache, which holds
// only Secrets labelled v1alpha1.SecretUseLabel: someone else's Secret, one Latchkey created
// before it labelled its Secrets so, or one the cache has not caught up with yet. Only the
// Secret's metadata is read from the API server, never its data. Latchkey's own gets the label,
// so the cache takes it in and the next reconcile goes on from there; anyone else's is left
// untouched and reported as a conflict.
func (r *OAuthClientReconciler) existingSecret(ctx context.Context, s *clientScope, key types.NamespacedName) (ctrl.Result, error) {
	if r.live == nil {
		return ctrl.Result{}, fmt.Errorf("creating Secret %s: it already exists", key)
	}
	md := &metav1.PartialObjectMetadata{}
	md.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := r.live.Get(ctx, key, md); err != nil {
		return ctrl.Result{}, fmt.Errorf("reading the metadata of Secret %s: %w", key, err)
	}
	sec := &corev1.Secret{ObjectMeta: md.ObjectMeta}
	if !writesSecret(s.oc, sec) {
		s.secret = sec // reconcileReady reports SecretConflict; not a byte of it is read
		return ctrl.Result{}, nil
	}
	if _, ok := md.Labels[v1alpha1.SecretUseLabel]; ok {
		// The cache lags behind a Secret written moments ago; the retry reads it.
		return ctrl.Result{}, fmt.Errorf("creating Secret %s: it already exists and the cache has not caught up yet", key)
	}
	patch := client.RawPatch(types.MergePatchType,
		fmt.Appendf(nil, `{"metadata":{"resourceVersion":%q,"labels":{%q:%q}}}`, md.ResourceVersion, v1alpha1.SecretUseLabel, v1alpha1.SecretUseLatchkey))
	if err := r.client.Patch(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}, patch); err != nil {
		return ctrl.Result{}, fmt.Errorf("labelling Secret %s %s=%s: %w", key, v1alpha1.SecretUseLabel, v1alpha1.SecretUseLatchkey, err)
	}
	// The labelled Secret enters the cache, and its watch event brings the client back.
	return ctrl.Result{}, nil
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

// desiredSecret adds to sec what the OAuthClient needs there.
func (r *OAuthClientReconciler) desiredSecret(oc *v1alpha1.OAuthClient, sec *corev1.Secret) (*corev1.Secret, error) {
	return desiredCredentials(r.client.Scheme(), oc, sec)
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
		sec, err = desiredCredentials(standaloneScheme, oc, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: oc.Namespace, Name: credentialsSecretName(oc)},
			Type:       corev1.SecretTypeOpaque,
		})
		return sec, err == nil, err
	}
	if !writesSecret(oc, current) {
		return current, false, nil
	}
	sec, err = desiredCredentials(standaloneScheme, oc, current.DeepCopy())
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
func desiredCredentials(scheme *runtime.Scheme, oc *v1alpha1.OAuthClient, sec *corev1.Secret) (*corev1.Secret, error) {
	sec.Labels = maps.Clone(sec.Labels)
	if sec.Labels == nil {
		sec.Labels = map[string]string{}
	}
	sec.Labels[managedByLabel] = managedByValue
	// Read back through the cache, which holds only Secrets with this label; its value lets no
	// Connector use the client's secret.
	sec.Labels[v1alpha1.SecretUseLabel] = v1alpha1.SecretUseLatchkey
	sec.Labels[oauthClientNameLabel] = truncateLabel(oc.Name)
	if err := controllerutil.SetControllerReference(oc, sec, scheme); err != nil {
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

func (r *OAuthClientReconciler) reconcileReady(ctx context.Context, s *clientScope) (ctrl.Result, error) {
	oc := s.oc
	err := r.holdClientID(ctx, s)
	var res *clientResult
	if err == nil {
		res, err = s.res.client(ctx, oc, s.secret)
	}
	if err != nil {
		if _, ok := asNotReady(err); !ok {
			return ctrl.Result{}, err
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
func bundleRequeue(s *clientScope) ctrl.Result {
	next := s.res.bundleNext[types.NamespacedName{Namespace: s.oc.Namespace, Name: s.oc.Name}]
	if next.IsZero() {
		return ctrl.Result{}
	}
	return ctrl.Result{RequeueAfter: max(s.res.bundles.Until(next), time.Second)}
}

// reconcileRedirects lists the registered redirect URIs in status with their classification
// under the Project's RedirectPolicies, and whether a policy refuses the client (enforce.go).
func (r *OAuthClientReconciler) reconcileRedirects(ctx context.Context, s *clientScope) (ctrl.Result, error) {
	return r.classifyRedirects(ctx, s)
}

// SetupWithManager watches OAuthClients, the Secrets they and their Projects use, the ConfigMaps
// holding their SPIFFE trust bundles, their Projects,
// the Connectors they list, the other OAuthClients listing their resources, and namespace labels.
func (r *OAuthClientReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.OAuthClient{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.deps.clientsForSecret)).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.deps.clientsForConfigMap)).
		Watches(&v1alpha1.Project{}, handler.EnqueueRequestsFromMapFunc(r.deps.clientsForProject),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// Any change of another client listing the same URL, its status too (it became Ready or
		// stopped being), may change who owns the URL.
		Watches(&v1alpha1.OAuthClient{}, handler.EnqueueRequestsFromMapFunc(r.deps.clientsSharingResources)).
		// Another client with the same id appearing, going, or being refused the id (its
		// status) changes who holds the id.
		Watches(&v1alpha1.OAuthClient{}, handler.EnqueueRequestsFromMapFunc(r.deps.clientsSharingClientID)).
		Watches(&v1alpha1.Connector{}, handler.EnqueueRequestsFromMapFunc(r.deps.clientsForConnector),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.RedirectPolicy{}, handler.EnqueueRequestsFromMapFunc(r.deps.clientsForPolicy),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.deps.clientsForNamespace),
			builder.WithPredicates(predicate.LabelChangedPredicate{})).
		WithOptions(opts).
		Named("oauthclient").
		Complete(r)
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

//go:build !latchkey_local

package controllers

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"latchkey.dev/latchkey/api/v1alpha1"
)

// This file, with setup.go, compiler.go, clusterreader.go and securityevents.go, is the cluster
// side: each kind's reconciler runs its status phases (project.go, connector.go, oauthclient.go,
// redirectpolicy.go) on what the manager's cache holds, patches status, and writes the
// credentials Secrets. The build `make build-local` makes leaves these files out, and with them
// controller-runtime's client and manager and client-go (docs/decisions/0085); Standalone runs
// the same phases there.

// ProjectReconciler reports whether a Project's Secrets exist and parse, and its issuer. A
// Project with a broken Secret still serves, without the feature that needs the Secret
// (docs/decisions/0014), so it is Ready=True and Degraded=True, the message listing every problem
// and what is off (docs/decisions/0028). The Project's configuration reaches the server
// through the Compiler, not through this reconciler.
type ProjectReconciler struct {
	projectPhases
	kube client.Client
	deps *dependents
}

// Reconcile implements reconcile.Reconciler.
func (r *ProjectReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return reconcileWith(ctx, &r.base, r.kube, req, &v1alpha1.Project{}, projectKind,
		func(p *v1alpha1.Project) *projectScope { return &projectScope{project: p, res: r.resolver()} },
		r.reconcileIssuer, r.reconcileReady, r.reconcileAudit)
}

// SetupWithManager watches Projects and the Secrets and ConfigMaps they refer to.
func (r *ProjectReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.Project{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.deps.projectsForSecret)).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.deps.projectsForConfigMap)).
		WithOptions(opts).
		Named("project").
		Complete(r)
}

// ConnectorReconciler reports a Connector's callback URL (to register at the service), its
// audience, and whether it is usable: attached to a Ready Project that admits its namespace,
// client secret present, audience not taken by an older Connector.
type ConnectorReconciler struct {
	connectorPhases
	kube client.Client
	deps *dependents
}

// Reconcile implements reconcile.Reconciler.
func (r *ConnectorReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return reconcileWith(ctx, &r.base, r.kube, req, &v1alpha1.Connector{}, connectorKind,
		func(c *v1alpha1.Connector) *connectorScope { return &connectorScope{conn: c, res: r.resolver()} },
		r.reconcileCallback, r.reconcileReady, r.reconcileSharing)
}

// SetupWithManager watches Connectors, their Secrets, their Projects (and those Projects'
// Secrets), namespace labels (for allowedNamespaces selectors), and sibling Connectors of the
// same Project (for the audience rule).
func (r *ConnectorReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.Connector{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.deps.connectorsForSecret)).
		Watches(&v1alpha1.Project{}, handler.EnqueueRequestsFromMapFunc(r.deps.connectorsForProject),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.deps.connectorsForNamespace),
			builder.WithPredicates(predicate.LabelChangedPredicate{})).
		Watches(&v1alpha1.Connector{}, handler.EnqueueRequestsFromMapFunc(r.deps.connectorSiblings),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(opts).
		Named("connector").
		Complete(r)
}

// OAuthClientReconciler writes an OAuthClient's credentials into its Secret and reports whether
// the client is usable.
type OAuthClientReconciler struct {
	clientPhases
	kube client.Client
	deps *dependents
	// live reads the metadata of a credentials Secret the cache does not hold (see
	// existingSecret); never a Secret's data.
	live client.Reader
}

// Reconcile implements reconcile.Reconciler.
func (r *OAuthClientReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return reconcileWith(ctx, &r.base, r.kube, req, &v1alpha1.OAuthClient{}, oauthClientKind,
		func(oc *v1alpha1.OAuthClient) *clientScope { return &clientScope{oc: oc, res: r.resolver()} },
		r.reconcileSecret, r.reconcileReady, r.reconcileRedirects)
}

// reconcileSecret makes sure the credentials Secret holds the client id and, for a confidential
// client, a client secret. An existing client secret is kept: rotation is the administrator's
// choice. A Secret controlled by another object is left untouched (reconcileReady reports the
// conflict). The Secret is written only when something is missing or different.
func (r *OAuthClientReconciler) reconcileSecret(ctx context.Context, s *clientScope) (Result, error) {
	oc := s.oc
	key := types.NamespacedName{Namespace: oc.Namespace, Name: credentialsSecretName(oc)}
	oc.Status.SecretName = key.Name
	if !writesCredentials(oc) {
		// The secret is in the administrator's Secret (spec.clientSecretRef), which Latchkey
		// only reads, or there is none (spec.workloadIdentity); the agent's id is in
		// spec.clientID or status.clientID.
		return Result{}, nil
	}

	current := &corev1.Secret{}
	if err := r.kube.Get(ctx, key, current); err != nil {
		if !apierrors.IsNotFound(err) {
			return Result{}, fmt.Errorf("reading Secret %s: %w", key, err)
		}
		desired, err := r.desiredSecret(oc, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
			Type:       corev1.SecretTypeOpaque,
		})
		if err != nil {
			return Result{}, err
		}
		if err := r.kube.Create(ctx, desired); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return r.existingSecret(ctx, s, key)
			}
			return Result{}, fmt.Errorf("creating Secret %s: %w", key, err)
		}
		s.secret = desired
		return Result{}, nil
	}
	if !writesSecret(oc, current) {
		// Someone else's Secret, or one nobody owns that a tenant named to have Latchkey take
		// it over: not a byte of it is changed (reconcileReady reports SecretConflict).
		s.secret = current
		return Result{}, nil
	}
	desired, err := r.desiredSecret(oc, current.DeepCopy())
	if err != nil {
		return Result{}, err
	}
	if equality.Semantic.DeepEqual(current.Data, desired.Data) &&
		equality.Semantic.DeepEqual(current.Labels, desired.Labels) &&
		equality.Semantic.DeepEqual(current.OwnerReferences, desired.OwnerReferences) {
		s.secret = current
		return Result{}, nil
	}
	// The optimistic lock keeps an administrator's concurrent rotation from being overwritten.
	if err := r.kube.Patch(ctx, desired, client.MergeFromWithOptions(current, client.MergeFromWithOptimisticLock{})); err != nil {
		return Result{}, fmt.Errorf("updating Secret %s: %w", key, err)
	}
	s.secret = desired
	return Result{}, nil
}

// existingSecret handles a credentials Secret that exists but is not in the cache, which holds
// only Secrets labelled v1alpha1.SecretUseLabel: someone else's Secret, one Latchkey created
// before it labelled its Secrets so, or one the cache has not caught up with yet. Only the
// Secret's metadata is read from the API server, never its data. Latchkey's own gets the label,
// so the cache takes it in and the next reconcile goes on from there; anyone else's is left
// untouched and reported as a conflict.
func (r *OAuthClientReconciler) existingSecret(ctx context.Context, s *clientScope, key types.NamespacedName) (Result, error) {
	if r.live == nil {
		return Result{}, fmt.Errorf("creating Secret %s: it already exists", key)
	}
	md := &metav1.PartialObjectMetadata{}
	md.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := r.live.Get(ctx, key, md); err != nil {
		return Result{}, fmt.Errorf("reading the metadata of Secret %s: %w", key, err)
	}
	sec := &corev1.Secret{ObjectMeta: md.ObjectMeta}
	if !writesSecret(s.oc, sec) {
		s.secret = sec // reconcileReady reports SecretConflict; not a byte of it is read
		return Result{}, nil
	}
	if _, ok := md.Labels[v1alpha1.SecretUseLabel]; ok {
		// The cache lags behind a Secret written moments ago; the retry reads it.
		return Result{}, fmt.Errorf("creating Secret %s: it already exists and the cache has not caught up yet", key)
	}
	patch := client.RawPatch(types.MergePatchType,
		fmt.Appendf(nil, `{"metadata":{"resourceVersion":%q,"labels":{%q:%q}}}`, md.ResourceVersion, v1alpha1.SecretUseLabel, v1alpha1.SecretUseLatchkey))
	if err := r.kube.Patch(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}, patch); err != nil {
		return Result{}, fmt.Errorf("labelling Secret %s %s=%s: %w", key, v1alpha1.SecretUseLabel, v1alpha1.SecretUseLatchkey, err)
	}
	// The labelled Secret enters the cache, and its watch event brings the client back.
	return Result{}, nil
}

// desiredSecret adds to sec what the OAuthClient needs there.
func (r *OAuthClientReconciler) desiredSecret(oc *v1alpha1.OAuthClient, sec *corev1.Secret) (*corev1.Secret, error) {
	return desiredCredentials(oc, sec)
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

// RedirectPolicyReconciler reports whether a RedirectPolicy is in force. The rules themselves
// reach the server through the Compiler.
type RedirectPolicyReconciler struct {
	policyPhases
	kube client.Client
	deps *dependents
}

// Reconcile implements reconcile.Reconciler.
func (r *RedirectPolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return reconcileWith(ctx, &r.base, r.kube, req, &v1alpha1.RedirectPolicy{}, redirectPolicyKind,
		func(p *v1alpha1.RedirectPolicy) *policyScope { return &policyScope{policy: p, res: r.resolver()} },
		r.reconcileReady, r.reconcileIgnored, r.reconcileEnforcement, r.reconcileAudit)
}

// SetupWithManager watches RedirectPolicies, their Projects, the Projects' Secrets, and
// namespace labels.
func (r *RedirectPolicyReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.RedirectPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.RedirectPolicy{}, handler.EnqueueRequestsFromMapFunc(r.deps.policySiblings),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.OAuthClient{}, handler.EnqueueRequestsFromMapFunc(r.deps.policiesForClient),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.deps.policiesForSecret)).
		Watches(&v1alpha1.Project{}, handler.EnqueueRequestsFromMapFunc(r.deps.policiesForProject),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.deps.policiesForNamespace),
			builder.WithPredicates(predicate.LabelChangedPredicate{})).
		WithOptions(opts).
		Named("redirectpolicy").
		Complete(r)
}

// AccessPolicyReconciler reports whether an AccessPolicy is in force, and if its Cedar text does
// not parse, where. There is no admission webhook: the condition is where a mistake shows, and
// the compiler, reading the same resolver, turns an invalid policy into a Project that refuses
// everything rather than one that serves without it (docs/decisions/0077).
type AccessPolicyReconciler struct {
	base
	kube client.Client
	deps *dependents
}

type accessScope struct {
	policy  *v1alpha1.AccessPolicy
	res     *resolver
	project string
	ready   bool
}

var accessPolicyKind = statusKind[*v1alpha1.AccessPolicy]{
	status: func(p *v1alpha1.AccessPolicy) statusFields {
		return statusFields{&p.Status.ObservedGeneration, &p.Status.Conditions}
	},
}

// Reconcile implements reconcile.Reconciler.
func (r *AccessPolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return reconcileWith(ctx, &r.base, r.kube, req, &v1alpha1.AccessPolicy{}, accessPolicyKind,
		func(p *v1alpha1.AccessPolicy) *accessScope { return &accessScope{policy: p, res: r.resolver()} },
		r.reconcileReady, r.reconcileAudit)
}

func (r *AccessPolicyReconciler) reconcileReady(ctx context.Context, s *accessScope) (Result, error) {
	p := s.policy
	project, parsed, err := s.res.accessPolicy(ctx, p)
	if _, ok := asNotReady(err); err != nil && !ok {
		return Result{}, err
	}
	s.project, s.ready = project, err == nil
	p.Status.PolicyIDs = nil
	msg := "in force for Project " + project
	if err == nil {
		p.Status.PolicyIDs = parsed.IDs
		if len(p.Status.PolicyIDs) > 256 {
			p.Status.PolicyIDs = p.Status.PolicyIDs[:256]
		}
	}
	r.setReady(&p.Status.Conditions, p.Generation, err, msg)
	if err == nil && len(parsed.IgnoredPermits) > 0 {
		// Ready, but not all of it: say which permits count for nothing.
		c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ReadyCondition)
		projectNamespace, _, _ := strings.Cut(project, "/")
		c.Reason = v1alpha1.AccessPolicyPermitsIgnoredReason
		c.Message = truncate("forbid policies in force for Project " + project + "; permit policies ignored (" +
			strings.Join(parsed.IgnoredPermits, ", ") + "): only AccessPolicies in the Project's namespace " +
			projectNamespace + " may permit, one from namespace " + p.Namespace + " may only forbid")
	}
	return Result{}, nil
}

// reconcileAudit records a new generation of the policy in its Project's audit log.
func (r *AccessPolicyReconciler) reconcileAudit(ctx context.Context, s *accessScope) (Result, error) {
	p := s.policy
	in := "false"
	if s.ready {
		in = "true"
	}
	return Result{}, r.recordPolicyChange(ctx, p, "AccessPolicy", s.project, p.Status.ObservedGeneration,
		map[string]string{"in_force": in, "policies": strings.Join(p.Status.PolicyIDs, ",")})
}

// SetupWithManager watches AccessPolicies, their Projects and namespace labels (which decide
// whether a Project admits a policy's namespace).
func (r *AccessPolicyReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.AccessPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.Project{}, handler.EnqueueRequestsFromMapFunc(r.deps.accessPoliciesForProject),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.deps.accessPoliciesForNamespace),
			builder.WithPredicates(predicate.LabelChangedPredicate{})).
		WithOptions(opts).
		Named("accesspolicy").
		Complete(r)
}

// reconcileWith is the body of every Reconcile, in Cluster API's patch-helper pattern. It reads
// the object named by req into obj (nothing to do when it is gone), keeps a copy to patch status
// against, runs the phases on the scope newScope makes from obj, and patches status once, only
// when it changed. Phases write only status.
//
// status.observedGeneration advances only when every phase ran without an error: it says the
// controller has acted on that generation completely. After an error the status is still
// patched with what the phases that ran found, and the conditions they set record the
// generation they were computed from; the error is retried. See docs/decisions/0023.
func reconcileWith[T Object, S any](ctx context.Context, b *base, kube client.Client, req ctrl.Request, obj T, kind statusKind[T],
	newScope func(T) S, phases ...phase[S]) (ctrl.Result, error) {
	if err := kube.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if kind.skipDeleting && !obj.GetDeletionTimestamp().IsZero() {
		return ctrl.Result{}, nil
	}
	before := obj.DeepCopyObject().(T)
	// Not deferred: a panicking phase must not have its generation recorded as observed.
	r, err := runPhases(ctx, newScope(obj), phases...)
	res := ctrl.Result{RequeueAfter: r.RequeueAfter}
	if err == nil {
		*kind.status(obj).observedGeneration = obj.GetGeneration()
	}
	if perr := patchStatus(ctx, b, kube, before, obj, kind); perr != nil {
		return res, kerrors.NewAggregate([]error{err, perr})
	}
	return res, err
}

// patchStatus writes after's status when the phases changed anything (they write only status),
// then records an Event when Ready changed (readyEvent). An object deleted meanwhile is no error.
func patchStatus[T Object](ctx context.Context, b *base, kube client.Client, before, after T, kind statusKind[T]) error {
	if equality.Semantic.DeepEqual(before, after) {
		return nil
	}
	if err := kube.Status().Patch(ctx, after, client.MergeFrom(before)); err != nil {
		return client.IgnoreNotFound(err)
	}
	b.readyEvent(after,
		meta.FindStatusCondition(*kind.status(before).conditions, v1alpha1.ReadyCondition),
		meta.FindStatusCondition(*kind.status(after).conditions, v1alpha1.ReadyCondition))
	b.degradedEvent(after,
		meta.FindStatusCondition(*kind.status(before).conditions, v1alpha1.DegradedCondition),
		meta.FindStatusCondition(*kind.status(after).conditions, v1alpha1.DegradedCondition))
	return nil
}

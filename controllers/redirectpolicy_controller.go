package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/clientdoc"
	"latchkey.dev/latchkey/internal/store"
)

// RedirectPolicyReconciler reports whether a RedirectPolicy is in force. The rules themselves
// reach the server through the Compiler.
type RedirectPolicyReconciler struct {
	base
	deps  *dependents
	store store.Store // nil: refused clients are reported, nothing is revoked
	// documents reads client ID metadata documents of clients holding tokens; nil means a
	// fetcher with production defaults.
	documents *clientdoc.Fetcher
}

type policyScope struct {
	policy *v1alpha1.RedirectPolicy
	res    *resolver
	// project ("namespace/name") and ready are what reconcileEnforcement starts from.
	project string
	ready   bool
}

// Reconcile implements reconcile.Reconciler.
func (r *RedirectPolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	p := &v1alpha1.RedirectPolicy{}
	if err := r.client.Get(ctx, req.NamespacedName, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := p.DeepCopy()
	defer func() {
		p.Status.ObservedGeneration = p.Generation
		changed := !equality.Semantic.DeepEqual(before.Status, p.Status)
		if err := r.finish(ctx, before, p, before.Status.Conditions, p.Status.Conditions, changed); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
	}()
	s := &policyScope{policy: p, res: r.resolver()}
	return runPhases(ctx, s, r.reconcileReady, r.reconcileEnforcement)
}

func (r *RedirectPolicyReconciler) reconcileReady(ctx context.Context, s *policyScope) (ctrl.Result, error) {
	project, err := s.res.policy(ctx, s.policy)
	if _, ok := asNotReady(err); err != nil && !ok {
		return ctrl.Result{}, err
	}
	s.project, s.ready = project, err == nil
	r.setReady(&s.policy.Status.Conditions, s.policy.Generation, err, "in force for Project "+project)
	return ctrl.Result{}, nil
}

// reconcileEnforcement is "Only recognised apps can connect" (seed 004): when this policy
// turns onlyRecognisedApps on, the live tokens of every client the Project's merged rules
// refuse are revoked at once, and status.revokedTokens and status.refusedClients say so
// (enforce.go).
func (r *RedirectPolicyReconciler) reconcileEnforcement(ctx context.Context, s *policyScope) (ctrl.Result, error) {
	return r.enforce(ctx, s)
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

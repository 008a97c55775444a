package controllers

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"latchkey.dev/latchkey/api/v1alpha1"
)

// ProjectReconciler reports whether a Project's Secrets exist and parse, and its issuer. A
// Project with a broken Secret still serves, without the feature that needs the Secret
// (docs/decisions/0014), so it is Ready=True and Degraded=True, the message listing every problem
// and what is off (docs/decisions/0028). The Project's configuration reaches the server
// through the Compiler, not through this reconciler.
type ProjectReconciler struct {
	base
	deps *dependents
}

type projectScope struct {
	project *v1alpha1.Project
	res     *resolver
}

var projectKind = statusKind[*v1alpha1.Project]{
	status: func(p *v1alpha1.Project) statusFields {
		return statusFields{&p.Status.ObservedGeneration, &p.Status.Conditions}
	},
}

// Reconcile implements reconcile.Reconciler.
func (r *ProjectReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return reconcileWith(ctx, &r.base, req, &v1alpha1.Project{}, projectKind,
		func(p *v1alpha1.Project) *projectScope { return &projectScope{project: p, res: r.resolver()} },
		r.reconcileIssuer, r.reconcileReady, r.reconcileAudit)
}

// reconcileAudit records a new generation of the Project in its audit log.
func (r *ProjectReconciler) reconcileAudit(ctx context.Context, s *projectScope) (ctrl.Result, error) {
	p := s.project
	return ctrl.Result{}, r.recordPolicyChange(ctx, p, "Project", p.Namespace+"/"+p.Name, p.Status.ObservedGeneration, nil)
}

func (r *ProjectReconciler) reconcileIssuer(_ context.Context, s *projectScope) (ctrl.Result, error) {
	s.project.Status.Issuer = s.res.issuer(s.project.Namespace, s.project.Name)
	return ctrl.Result{}, nil
}

func (r *ProjectReconciler) reconcileReady(ctx context.Context, s *projectScope) (ctrl.Result, error) {
	pr, err := s.res.projectFromObject(ctx, s.project)
	if err != nil {
		return ctrl.Result{}, err
	}
	conds, gen := &s.project.Status.Conditions, s.project.Generation
	if pr.compiled == nil {
		// Not serving at all: Ready says so, and there is nothing to be degraded from.
		r.setReady(conds, gen, pr.err, "")
		meta.RemoveStatusCondition(conds, v1alpha1.DegradedCondition)
		return ctrl.Result{}, nil
	}
	r.setReady(conds, gen, nil, "serving at "+s.project.Status.Issuer)
	r.setDegraded(conds, gen, pr.err, "every Secret, logo and colour the Project refers to is usable")
	return ctrl.Result{}, nil
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

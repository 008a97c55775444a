package controllers

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	corev1 "k8s.io/api/core/v1"

	"latchkey.dev/latchkey/api/v1alpha1"
)

// ProjectReconciler reports whether a Project's Secrets exist and parse, and its issuer. A
// Project with a broken Secret is Ready=False but still serves, without the feature that needs
// the Secret; the message ends with what is off. The Project's configuration reaches the server
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
		r.reconcileIssuer, r.reconcileReady)
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
	r.setReady(&s.project.Status.Conditions, s.project.Generation, pr.err, "serving at "+s.project.Status.Issuer)
	return ctrl.Result{}, nil
}

// SetupWithManager watches Projects and the Secrets they refer to.
func (r *ProjectReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.Project{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.deps.projectsForSecret)).
		WithOptions(opts).
		Named("project").
		Complete(r)
}

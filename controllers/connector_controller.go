package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"latchkey.dev/latchkey/api/v1alpha1"
)

// ConnectorReconciler reports a Connector's callback URL (to register at the service), its
// audience, and whether it is usable: attached to a Ready Project that admits its namespace,
// client secret present, audience not taken by an older Connector.
type ConnectorReconciler struct {
	base
	deps *dependents
}

type connectorScope struct {
	conn *v1alpha1.Connector
	res  *resolver
}

var connectorKind = statusKind[*v1alpha1.Connector]{
	status: func(c *v1alpha1.Connector) statusFields {
		return statusFields{&c.Status.ObservedGeneration, &c.Status.Conditions}
	},
}

// Reconcile implements reconcile.Reconciler.
func (r *ConnectorReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return reconcileWith(ctx, &r.base, req, &v1alpha1.Connector{}, connectorKind,
		func(c *v1alpha1.Connector) *connectorScope { return &connectorScope{conn: c, res: r.resolver()} },
		r.reconcileCallback, r.reconcileReady, r.reconcileSharing)
}

// reconcileCallback publishes what the administrator needs to register the OAuth app at the
// service, as soon as the Project is known; the client secret they get back may come later.
func (r *ConnectorReconciler) reconcileCallback(ctx context.Context, s *connectorScope) (ctrl.Result, error) {
	s.conn.Status.Audience = connectorAudience(s.conn)
	project, _, err := s.res.attach(ctx, s.conn.Spec.ProjectRef, s.conn.Namespace)
	if nr, ok := asNotReady(err); err != nil && !ok {
		return ctrl.Result{}, err
	} else if project == nil || (ok && nr.reason == v1alpha1.NotAllowedReason) {
		s.conn.Status.CallbackURL = ""
		return ctrl.Result{}, nil
	}
	s.conn.Status.CallbackURL = s.res.callbackURL(client.ObjectKeyFromObject(project), client.ObjectKeyFromObject(s.conn))
	if s.conn.Spec.APIKey != nil {
		// People paste a key on Latchkey's own page: there is no OAuth app to register.
		s.conn.Status.CallbackURL = ""
	}
	return ctrl.Result{}, nil
}

func (r *ConnectorReconciler) reconcileReady(ctx context.Context, s *connectorScope) (ctrl.Result, error) {
	res, err := s.res.connector(ctx, s.conn)
	if err != nil {
		return ctrl.Result{}, err
	}
	ready := "audience " + s.conn.Status.Audience + "; callback " + s.conn.Status.CallbackURL
	if s.conn.Spec.APIKey != nil {
		ready = "audience " + s.conn.Status.Audience + "; people connect by pasting an API key"
	}
	r.setReady(&s.conn.Status.Conditions, s.conn.Generation, res.err, ready)
	return ctrl.Result{}, nil
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

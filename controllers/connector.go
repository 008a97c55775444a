package controllers

import (
	"context"

	"latchkey.dev/latchkey/api/v1alpha1"
)

// connectorPhases are the Connector's status phases (ConnectorReconciler, Standalone).
type connectorPhases struct {
	base
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

// reconcileCallback publishes what the administrator needs to register the OAuth app at the
// service, as soon as the Project is known; the client secret they get back may come later.
func (r *connectorPhases) reconcileCallback(ctx context.Context, s *connectorScope) (Result, error) {
	s.conn.Status.Audience = connectorAudience(s.conn)
	project, _, err := s.res.attach(ctx, s.conn.Spec.ProjectRef, s.conn.Namespace)
	if nr, ok := asNotReady(err); err != nil && !ok {
		return Result{}, err
	} else if project == nil || (ok && nr.reason == v1alpha1.NotAllowedReason) {
		s.conn.Status.CallbackURL = ""
		return Result{}, nil
	}
	s.conn.Status.CallbackURL = s.res.callbackURL(objectKey(project), objectKey(s.conn))
	if s.conn.Spec.APIKey != nil {
		// People paste a key on Latchkey's own page: there is no OAuth app to register.
		s.conn.Status.CallbackURL = ""
	}
	return Result{}, nil
}

func (r *connectorPhases) reconcileReady(ctx context.Context, s *connectorScope) (Result, error) {
	res, err := s.res.connector(ctx, s.conn)
	if err != nil {
		return Result{}, err
	}
	ready := "audience " + s.conn.Status.Audience + "; callback " + s.conn.Status.CallbackURL
	if s.conn.Spec.APIKey != nil {
		ready = "audience " + s.conn.Status.Audience + "; people connect by pasting an API key"
	}
	r.setReady(&s.conn.Status.Conditions, s.conn.Generation, res.err, ready)
	return Result{}, nil
}

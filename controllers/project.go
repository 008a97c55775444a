package controllers

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"

	"latchkey.dev/latchkey/api/v1alpha1"
)

// projectPhases are the Project's status phases: ProjectReconciler runs them on the objects
// the API server holds, Standalone on those read from files.
type projectPhases struct {
	base
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

// reconcileAudit records a new generation of the Project in its audit log.
func (r *projectPhases) reconcileAudit(ctx context.Context, s *projectScope) (Result, error) {
	p := s.project
	return Result{}, r.recordPolicyChange(ctx, p, "Project", p.Namespace+"/"+p.Name, p.Status.ObservedGeneration, nil)
}

func (r *projectPhases) reconcileIssuer(_ context.Context, s *projectScope) (Result, error) {
	s.project.Status.Issuer = s.res.issuer(s.project.Namespace, s.project.Name)
	return Result{}, nil
}

func (r *projectPhases) reconcileReady(ctx context.Context, s *projectScope) (Result, error) {
	pr, err := s.res.projectFromObject(ctx, s.project)
	if err != nil {
		return Result{}, err
	}
	conds, gen := &s.project.Status.Conditions, s.project.Generation
	if pr.compiled == nil {
		// Not serving at all: Ready says so, and there is nothing to be degraded from.
		r.setReady(conds, gen, pr.err, "")
		meta.RemoveStatusCondition(conds, v1alpha1.DegradedCondition)
		return Result{}, nil
	}
	r.setReady(conds, gen, nil, "serving at "+s.project.Status.Issuer)
	r.setDegraded(conds, gen, pr.err, "every Secret, logo and colour the Project refers to is usable")
	return Result{}, nil
}

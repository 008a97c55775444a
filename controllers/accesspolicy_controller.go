package controllers

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/policy"
)

// AccessPolicyReconciler reports whether an AccessPolicy is in force, and if its Cedar text does
// not parse, where. There is no admission webhook: the condition is where a mistake shows, and
// the compiler, reading the same resolver, turns an invalid policy into a Project that refuses
// everything rather than one that serves without it (docs/decisions/0077).
type AccessPolicyReconciler struct {
	base
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
	return reconcileWith(ctx, &r.base, req, &v1alpha1.AccessPolicy{}, accessPolicyKind,
		func(p *v1alpha1.AccessPolicy) *accessScope { return &accessScope{policy: p, res: r.resolver()} },
		r.reconcileReady, r.reconcileAudit)
}

func (r *AccessPolicyReconciler) reconcileReady(ctx context.Context, s *accessScope) (ctrl.Result, error) {
	p := s.policy
	project, parsed, err := s.res.accessPolicy(ctx, p)
	if _, ok := asNotReady(err); err != nil && !ok {
		return ctrl.Result{}, err
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
	return ctrl.Result{}, nil
}

// reconcileAudit records a new generation of the policy in its Project's audit log.
func (r *AccessPolicyReconciler) reconcileAudit(ctx context.Context, s *accessScope) (ctrl.Result, error) {
	p := s.policy
	in := "false"
	if s.ready {
		in = "true"
	}
	return ctrl.Result{}, r.recordPolicyChange(ctx, p, "AccessPolicy", s.project, p.Status.ObservedGeneration,
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

func accessPolicyItems(l *v1alpha1.AccessPolicyList) []v1alpha1.AccessPolicy { return l.Items }

func (d *dependents) accessPoliciesForProject(ctx context.Context, p client.Object) []reconcile.Request {
	return attached[v1alpha1.AccessPolicy](ctx, d, projectKeySet(p), accessPolicyItems)
}

func (d *dependents) accessPoliciesForNamespace(ctx context.Context, ns client.Object) []reconcile.Request {
	return listed(ctx, d, accessPolicyItems, client.InNamespace(ns.GetName()))
}

// accessPolicy resolves an AccessPolicy: the Project it attaches to ("namespace/name") and its
// parsed policies. It is in force when it may attach to a Ready Project and parses; one that
// may attach but does not parse is notReady(PolicyInvalid), and the compiler makes its Project
// refuse everything.
func (r *resolver) accessPolicy(ctx context.Context, p *v1alpha1.AccessPolicy) (string, *policy.Parsed, error) {
	key := projectKeyOf(p.Spec.ProjectRef, p.Namespace)
	if _, _, err := r.attach(ctx, p.Spec.ProjectRef, p.Namespace); err != nil {
		return key.String(), nil, err
	}
	parsed, err := policy.Parse(accessSource(p, key.Namespace))
	if err != nil {
		return key.String(), nil, notReadyf(v1alpha1.AccessPolicyInvalidReason, "%v; Project %s refuses every consent, token and token exchange until it is fixed", err, key)
	}
	return key.String(), parsed, nil
}

func accessSource(p *v1alpha1.AccessPolicy, projectNamespace string) policy.Source {
	return policy.Source{Name: p.Namespace + "/" + p.Name, Text: p.Spec.Policies, NarrowOnly: p.Namespace != projectNamespace}
}

// addAccessPolicies compiles, for each Project, the AccessPolicies that may attach to it, and
// its spec.accessDecisions, into config.Project.AccessPolicy. An AccessPolicy that may attach
// but does not parse is compiled too: policy.Compile turns it into a refusal of everything. One
// that may not attach (its namespace not admitted, the Project missing) reaches nothing.
func addAccessPolicies(ctx context.Context, r client.Reader, res *resolver, snap *config.Snapshot) error {
	var list v1alpha1.AccessPolicyList
	if err := r.List(ctx, &list, noCopy); err != nil {
		return fmt.Errorf("listing AccessPolicies: %w", err)
	}
	byProject := map[string][]policy.Source{}
	for i := range list.Items {
		p := &list.Items[i]
		key, _, err := res.accessPolicy(ctx, p)
		nr, ok := asNotReady(err)
		if err != nil && !ok {
			return err
		}
		if err == nil || nr.reason == v1alpha1.AccessPolicyInvalidReason {
			ns, _, _ := strings.Cut(key, "/")
			byProject[key] = append(byProject[key], accessSource(p, ns))
		}
	}
	for key, cp := range snap.Projects {
		pr, err := res.project(ctx, types.NamespacedName{Namespace: cp.Namespace, Name: cp.Name})
		if err != nil {
			return err
		}
		srcs := byProject[key]
		slices.SortFunc(srcs, func(a, b policy.Source) int { return cmp.Compare(a.Name, b.Name) })
		cp.AccessPolicy = compileAccess(pr.obj, srcs)
	}
	return nil
}

// compileAccess builds a Project's policy Set from its sources and spec.accessDecisions. A time
// zone the server does not know makes the Set refuse everything: the policies' hours would
// otherwise be read in another zone than the one they were written for.
func compileAccess(p *v1alpha1.Project, srcs []policy.Source) *policy.Set {
	var opts policy.Options
	if ad := p.Spec.AccessDecisions; ad != nil {
		if ad.TimeZone != "" {
			loc, err := time.LoadLocation(ad.TimeZone)
			if err != nil {
				return policy.Refuse("Project "+p.Namespace+"/"+p.Name+" spec.accessDecisions.timeZone",
					fmt.Sprintf("time zone %q is unknown to the server", ad.TimeZone))
			}
			opts.Location = loc
		}
		if ad.DecisionPoint != "" {
			opts.DecisionPoint = &policy.DecisionPoint{URL: ad.DecisionPoint, Allowed: allowedNetworks(p)}
		}
	}
	return policy.Compile(srcs, opts)
}

package controllers

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/policy"
)

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
func addAccessPolicies(ctx context.Context, r Reader, res *resolver, snap *config.Snapshot) error {
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

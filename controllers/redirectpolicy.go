package controllers

import (
	"context"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/clientdoc"
	"latchkey.dev/latchkey/internal/config"
)

// policyPhases are the RedirectPolicy's status phases (RedirectPolicyReconciler, Standalone).
type policyPhases struct {
	base
	store Store // nil: refused clients are reported, nothing is revoked
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

var redirectPolicyKind = statusKind[*v1alpha1.RedirectPolicy]{
	status: func(p *v1alpha1.RedirectPolicy) statusFields {
		return statusFields{&p.Status.ObservedGeneration, &p.Status.Conditions}
	},
}

// reconcileAudit records a new generation of the policy in its Project's audit log.
func (r *policyPhases) reconcileAudit(ctx context.Context, s *policyScope) (Result, error) {
	p := s.policy
	return Result{}, r.recordPolicyChange(ctx, p, "RedirectPolicy", s.project, p.Status.ObservedGeneration,
		map[string]string{"only_recognised_apps": strconv.FormatBool(p.Spec.OnlyRecognisedApps), "in_force": strconv.FormatBool(s.ready)})
}

func (r *policyPhases) reconcileReady(ctx context.Context, s *policyScope) (Result, error) {
	project, err := s.res.policy(ctx, s.policy)
	if _, ok := asNotReady(err); err != nil && !ok {
		return Result{}, err
	}
	s.project, s.ready = project, err == nil
	r.setReady(&s.policy.Status.Conditions, s.policy.Generation, err, "in force for Project "+project)
	return Result{}, nil
}

// reconcileIgnored reports, for a policy in force outside its Project's namespace, what of it
// the Project's rules ignore: such a policy may only narrow them (mergeRedirectRules).
func (r *policyPhases) reconcileIgnored(ctx context.Context, s *policyScope) (Result, error) {
	p := s.policy
	if !s.ready {
		meta.RemoveStatusCondition(&p.Status.Conditions, v1alpha1.RedirectPolicyIgnoredFieldsCondition)
		return Result{}, nil
	}
	projectNamespace, _, _ := strings.Cut(s.project, "/")
	var ignored []string
	if p.Namespace != projectNamespace {
		rules, err := projectRules(ctx, r.reader, s.res, s.project)
		if err != nil {
			return Result{}, err
		}
		ignored = foreignIgnored(p, rules)
	}
	var err error
	if len(ignored) > 0 {
		err = notReadyf(v1alpha1.RedirectPolicyOutsideProjectNamespaceReason,
			"%s ignored: only RedirectPolicies in the Project's namespace %q may add recognised destinations or turn built-ins on; a policy from namespace %q may only turn onlyRecognisedApps on and built-ins off",
			strings.Join(ignored, ", "), projectNamespace, p.Namespace)
	}
	// The condition is True when something is ignored, the opposite of setCondition's sense.
	before := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.RedirectPolicyIgnoredFieldsCondition)
	wasIgnored := before != nil && before.Status == metav1.ConditionTrue
	r.setCondition(&p.Status.Conditions, p.Generation, v1alpha1.RedirectPolicyIgnoredFieldsCondition, err,
		v1alpha1.RedirectPolicyNoneIgnoredReason, "all of the policy is in force")
	c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.RedirectPolicyIgnoredFieldsCondition)
	if err != nil {
		c.Status = metav1.ConditionTrue
	} else {
		c.Status = metav1.ConditionFalse
	}
	if err != nil && !wasIgnored {
		r.recorder.Eventf(p, nil, corev1.EventTypeWarning, v1alpha1.RedirectPolicyOutsideProjectNamespaceReason, "Reconcile", "%s", c.Message)
	}
	return Result{}, nil
}

// foreignIgnored lists what of a policy outside the Project's namespace has no effect on the
// merged rules: every recognised entry, and each built-in it leaves on (explicitly or by
// default) that the rules have off. A built-in it leaves on that is on anyway loses nothing.
func foreignIgnored(p *v1alpha1.RedirectPolicy, rules config.RedirectRules) []string {
	var out []string
	if len(p.Spec.Recognised) > 0 {
		out = append(out, "spec.recognised")
	}
	b := p.Spec.Builtins
	if b == nil {
		b = &v1alpha1.Builtins{}
	}
	on := func(v *bool) bool { return v == nil || *v }
	for _, bi := range []struct {
		field   string
		wants   bool
		inForce bool
	}{
		{"spec.builtins.claude", on(b.Claude), rules.Claude},
		{"spec.builtins.chatgpt", on(b.ChatGPT), rules.ChatGPT},
		{"spec.builtins.loopback", on(b.Loopback), rules.Loopback},
		{"spec.builtins.appSchemes", on(b.AppSchemes), rules.AppSchemes},
	} {
		if bi.wants && !bi.inForce {
			out = append(out, bi.field)
		}
	}
	return out
}

// reconcileEnforcement is "Only recognised apps can connect" (docs/recognised-apps.md): when this policy
// turns onlyRecognisedApps on, the live tokens of every client the Project's merged rules
// refuse are revoked at once, and status.revokedTokens and status.refusedClients say so
// (enforce.go).
func (r *policyPhases) reconcileEnforcement(ctx context.Context, s *policyScope) (Result, error) {
	return r.enforce(ctx, s)
}

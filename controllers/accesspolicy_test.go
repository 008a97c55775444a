//go:build !latchkey_local

package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/policy"
)

func newAccessPolicy(namespace, name string, ref v1alpha1.ProjectReference, text string) *v1alpha1.AccessPolicy {
	return &v1alpha1.AccessPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       v1alpha1.AccessPolicySpec{ProjectRef: ref, Policies: text},
	}
}

// decideIn asks the compiled policies of project in s about alice's agent exchanging for
// connector: "" when allowed, otherwise the policy that denied.
func decideIn(s *config.Snapshot, project, connector string) string {
	p := s.Project(project)
	if p == nil {
		return "no project"
	}
	d := policy.NewEngine(time.Now, logr.Discard(), 0, 0).Decide(context.Background(), policy.Request{
		Policies: p.AccessPolicy, Action: policy.ActionExchange,
		Person: policy.Person{Subject: "alice"}, Agent: policy.Agent{ClientID: "agent"},
		Resource: policy.Resource{Kind: policy.KindConnector, ID: connector}, Time: time.Now(),
	})
	if d.Allow {
		return ""
	}
	return d.Policy
}

func decides(project, connector, want string) func(*config.Snapshot) error {
	return func(s *config.Snapshot) error {
		if got := decideIn(s, project, connector); got != want {
			return fmt.Errorf("%s for %s: denied by %q, want %q", project, connector, got, want)
		}
		return nil
	}
}

// TestAccessPolicyTenantBoundary plays the tenants around a Project. A namespace the Project
// does not admit can attach nothing: neither a forbid-everything policy nor an invalid one
// (which would otherwise make the Project refuse everything) reaches it. An admitted namespace
// may only narrow: its permits are ignored, its forbids count. The Project's own namespace
// decides, and an invalid policy there makes the Project refuse everything, naming it, until
// it is fixed.
func TestAccessPolicyTenantBoundary(t *testing.T) {
	needEnv(t)
	names := []string{newNamespace(t, nil), newNamespace(t, nil), newNamespace(t, nil)}
	slices.Sort(names)
	teamA, teamB, outsider := names[0], names[1], names[2]
	newProject(t, teamA, "proj", &v1alpha1.AllowedNamespaces{From: v1alpha1.NamespacesFromSelector,
		Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{teamA, teamB}},
		}}})
	ref := v1alpha1.ProjectReference{Name: "proj", Namespace: teamA}
	project := teamA + "/proj"

	// The outsider tries to shut the Project down, once with a policy and once with a typo.
	shut := newAccessPolicy(outsider, "shut", ref, `@id("everything") forbid(principal, action, resource);`)
	broken := newAccessPolicy(outsider, "broken", ref, `forbid(principal, action resource);`)
	create(t, shut)
	create(t, broken)
	waitNotReady(t, shut, v1alpha1.AccessPolicyNotAllowedReason)
	waitNotReady(t, broken, v1alpha1.AccessPolicyNotAllowedReason)

	// The Project's own policy: everything, but GitHub for self-registered agents.
	home := newAccessPolicy(teamA, "home", ref, `permit(principal, action, resource);
@id("declared-github") forbid(principal, action, resource == Connector::"github") unless { context.agent.declared };`)
	create(t, home)
	waitReady(t, home)
	waitSnapshot(t, "only the home policy is in force", decides(project, "gitlab", ""))

	// An admitted team may narrow, not widen.
	narrow := newAccessPolicy(teamB, "narrow", ref, `@id("wide-open") permit(principal, action, resource);
@id("no-linear") forbid(principal, action, resource == Connector::"linear");`)
	create(t, narrow)
	cond := waitCondition(t, narrow, v1alpha1.ReadyCondition, metav1.ConditionTrue, v1alpha1.AccessPolicyPermitsIgnoredReason)
	if !strings.Contains(cond.Message, "wide-open") {
		t.Errorf("PermitsIgnored message %q does not name the permit", cond.Message)
	}
	waitSnapshot(t, "the admitted team's forbid counts", decides(project, "linear", teamB+"/narrow/no-linear"))
	waitSnapshot(t, "and nothing else of it", decides(project, "gitlab", ""))

	// A typo in the Project's own namespace: the Project refuses everything, naming it.
	update(t, home, func(p *v1alpha1.AccessPolicy) {
		p.Spec.Policies = "permit(principal, action, resource);\nforbid(principal action, resource);"
	})
	cond = waitNotReady(t, home, v1alpha1.AccessPolicyInvalidReason)
	if !strings.Contains(cond.Message, teamA+"/home:2:") {
		t.Errorf("PolicyInvalid message %q does not say where (line 2)", cond.Message)
	}
	waitSnapshot(t, "an invalid home policy refuses everything", decides(project, "gitlab", teamA+"/home"))
	update(t, home, func(p *v1alpha1.AccessPolicy) { p.Spec.Policies = "permit(principal, action, resource);" })
	waitReady(t, home)
	waitSnapshot(t, "fixed, the Project serves again", decides(project, "gitlab", ""))
}

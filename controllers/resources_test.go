package controllers

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"latchkey.dev/latchkey/api/v1alpha1"
)

// The owner of a contested resource URL is the first Ready OAuthClient to list it, by creation
// time and then namespace/name, whatever order the objects come in: a client that is not Ready
// owns nothing until it is, and then takes the URL back from the younger ones.
func TestResourceOwnerIsFirstReadyClient(t *testing.T) {
	const url = "https://mcp.example.com/mcp"
	client := func(ns, name, uid string, created time.Time) v1alpha1.OAuthClient {
		m := objMeta(ns, name, uid)
		m.CreationTimestamp = metav1.NewTime(created)
		return v1alpha1.OAuthClient{ObjectMeta: m, Spec: v1alpha1.OAuthClientSpec{
			ProjectRef: v1alpha1.ProjectReference{Name: "p", Namespace: "demo"},
			GrantTypes: []v1alpha1.GrantType{v1alpha1.GrantClientCredentials}, Resources: []v1alpha1.ResourceURI{url},
		}}
	}
	objs := &Objects{
		Secrets: []corev1.Secret{{ObjectMeta: objMeta("demo", "people", ""), Data: map[string][]byte{"passwords.yaml": []byte(demoPasswords)}}},
		Projects: []v1alpha1.Project{{ObjectMeta: objMeta("demo", "p", "u-p"), Spec: v1alpha1.ProjectSpec{
			SignIn:            v1alpha1.SignIn{PasswordSecretRef: &v1alpha1.SecretKeyReference{Name: "people", Key: "passwords.yaml"}},
			AllowedNamespaces: &v1alpha1.AllowedNamespaces{From: v1alpha1.NamespacesFromAll},
		}}},
		// Listed youngest first: the order of the list decides nothing.
		OAuthClients: []v1alpha1.OAuthClient{
			client("z-team", "y", "00000000-0000-0000-0000-0000000000a3", testNow.Add(time.Minute)),
			client("a-team", "x", "00000000-0000-0000-0000-0000000000a2", testNow.Add(time.Minute)),
			client("m-team", "early", "00000000-0000-0000-0000-0000000000a1", testNow),
		},
	}
	// The oldest client has no credentials Secret yet, so it is not Ready.
	for i := range objs.OAuthClients[:2] {
		sec, _, err := CredentialsSecret(&objs.OAuthClients[i], nil)
		if err != nil {
			t.Fatal(err)
		}
		objs.Secrets = append(objs.Secrets, *sec)
	}
	s, h := newStandalone(t)
	check := func(owner string, conflicted ...string) {
		t.Helper()
		if err := s.Apply(context.Background(), objs); err != nil {
			t.Fatal(err)
		}
		p := h.Load().Projects["demo/p"]
		for i := range objs.OAuthClients {
			oc := &objs.OAuthClients[i]
			key := oc.Namespace + "/" + oc.Name
			c := p.Clients[oc.Status.ClientID]
			cond := meta.FindStatusCondition(oc.Status.Conditions, v1alpha1.OAuthClientResourcesOwnedCondition)
			switch {
			case key == owner:
				if c == nil || !slices.Equal(c.Resources, []string{url}) || cond == nil || cond.Status != metav1.ConditionTrue {
					t.Errorf("owner %s: compiled %+v, condition %+v", key, c, cond)
				}
			case slices.Contains(conflicted, key):
				if c == nil || len(c.Resources) != 0 || cond == nil || cond.Reason != v1alpha1.OAuthClientResourceConflictReason ||
					!strings.Contains(cond.Message, owner) {
					t.Errorf("%s: compiled %+v, condition %+v, want a conflict naming %s", key, c, cond, owner)
				}
				if !meta.IsStatusConditionTrue(oc.Status.Conditions, v1alpha1.ReadyCondition) ||
					!meta.IsStatusConditionTrue(oc.Status.Conditions, v1alpha1.DegradedCondition) {
					t.Errorf("%s: want Ready and Degraded: %+v", key, oc.Status.Conditions)
				}
			default:
				if c != nil || cond != nil {
					t.Errorf("%s is not Ready but compiled %+v, condition %+v", key, c, cond)
				}
			}
		}
	}
	// Created in the same second: the namespace/name decides.
	check("a-team/x", "z-team/y")

	// The oldest becomes Ready: it owns the URL, and the other two lose it.
	sec, _, err := CredentialsSecret(&objs.OAuthClients[2], nil)
	if err != nil {
		t.Fatal(err)
	}
	objs.Secrets = append(objs.Secrets, *sec)
	check("m-team/early", "a-team/x", "z-team/y")

	// Shared with every namespace the Project admits: all three serve it.
	objs.OAuthClients[2].Spec.ResourceSharing = &v1alpha1.AllowedClientNamespaces{From: v1alpha1.NamespacesFromAll}
	objs.OAuthClients[2].Generation++
	if err := s.Apply(context.Background(), objs); err != nil {
		t.Fatal(err)
	}
	p := h.Load().Projects["demo/p"]
	for i := range objs.OAuthClients {
		oc := &objs.OAuthClients[i]
		if c := p.Clients[oc.Status.ClientID]; c == nil || !slices.Equal(c.Resources, []string{url}) ||
			!meta.IsStatusConditionTrue(oc.Status.Conditions, v1alpha1.OAuthClientResourcesOwnedCondition) {
			t.Errorf("%s/%s once shared: compiled %+v, conditions %+v", oc.Namespace, oc.Name, c, oc.Status.Conditions)
		}
	}
}

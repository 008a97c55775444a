//go:build !latchkey_local

package controllers

import (
	"context"
	"errors"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
)

// TestStandaloneMatchesTheCluster applies config/samples to a real API server, waits for the
// reconcilers and the Compiler, then hands the very objects the API server holds to Standalone:
// the compiled Project and every object's conditions must be the same.
func TestStandaloneMatchesTheCluster(t *testing.T) {
	needEnv(t)
	applySamples(t)
	const ns = "latchkey-demo"
	oc := &v1alpha1.OAuthClient{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "repo-helper"}}
	waitReady(t, oc)
	waitComplete(t, oc)
	waitReady(t, &v1alpha1.RedirectPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}})
	waitReady(t, &v1alpha1.Connector{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "github"}})
	waitReady(t, &v1alpha1.Project{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"}})
	cluster := waitSnapshot(t, "demo project with its client", func(s *config.Snapshot) error {
		if p := s.Project(ns + "/demo"); p == nil || p.Clients[oc.Status.ClientID] == nil {
			return errors.New("not yet")
		}
		return nil
	}).Project(ns + "/demo")

	ctx := context.Background()
	objs := &Objects{}
	var (
		secrets  corev1.SecretList
		projects v1alpha1.ProjectList
		clients  v1alpha1.OAuthClientList
		conns    v1alpha1.ConnectorList
		policies v1alpha1.RedirectPolicyList
	)
	for _, l := range []client.ObjectList{&secrets, &projects, &clients, &conns, &policies} {
		if err := k8s.List(ctx, l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
	}
	objs.Secrets, objs.Projects, objs.OAuthClients = secrets.Items, projects.Items, clients.Items
	objs.Connectors, objs.RedirectPolicies = conns.Items, policies.Items
	var nsObj corev1.Namespace
	if err := k8s.Get(ctx, client.ObjectKey{Name: ns}, &nsObj); err != nil {
		t.Fatal(err)
	}
	objs.Namespaces = []corev1.Namespace{nsObj}
	type conds = []metav1.Condition
	want := map[string]conds{}
	record := func(into map[string]conds) {
		for _, p := range objs.Projects {
			into["Project "+p.Name] = p.Status.Conditions
		}
		for _, c := range objs.Connectors {
			into["Connector "+c.Name] = c.Status.Conditions
		}
		for _, c := range objs.OAuthClients {
			into["OAuthClient "+c.Name] = c.Status.Conditions
		}
		for _, p := range objs.RedirectPolicies {
			into["RedirectPolicy "+p.Name] = p.Status.Conditions
		}
	}
	record(want)
	// Standalone starts from no status at all, as on a first start.
	for i := range objs.Projects {
		objs.Projects[i].Status = v1alpha1.ProjectStatus{}
	}
	for i := range objs.Connectors {
		objs.Connectors[i].Status = v1alpha1.ConnectorStatus{}
	}
	for i := range objs.OAuthClients {
		objs.OAuthClients[i].Status = v1alpha1.OAuthClientStatus{}
	}
	for i := range objs.RedirectPolicies {
		objs.RedirectPolicies[i].Status = v1alpha1.RedirectPolicyStatus{}
	}

	s, h := newStandalone(t)
	if err := s.Apply(ctx, objs); err != nil {
		t.Fatal(err)
	}
	got := map[string]conds{}
	record(got)
	for key, w := range want {
		g := got[key]
		if len(g) != len(w) {
			t.Errorf("%s: conditions %+v, the cluster's %+v", key, g, w)
			continue
		}
		for _, wc := range w {
			gc := meta.FindStatusCondition(g, wc.Type)
			if gc == nil || gc.Status != wc.Status || gc.Reason != wc.Reason || gc.Message != wc.Message {
				t.Errorf("%s: condition %s = %+v, the cluster's %+v", key, wc.Type, gc, wc)
			}
		}
	}
	if p := h.Load().Project(ns + "/demo"); !reflect.DeepEqual(p, cluster) {
		t.Errorf("compiled Project differs from the cluster's:\nstandalone %+v\ncluster    %+v", p, cluster)
	}
}

//go:build !latchkey_local

package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/events/audittest"
	"latchkey.dev/latchkey/internal/store"
)

// A Project's and a RedirectPolicy's new generations are policy.changed records in the
// Project's audit log, written once per generation by the reconcilers (however many times
// they reconcile it: the counts below are exact), and delivered to the
// Project's event sink (whose Secret holds a Standard Webhooks secret).
func TestPolicyChangesAreAudited(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	key := ns + "/proj"
	sink := audittest.NewSink(t, time.Now)
	create(t, passwordSecret(ns, "pw"))
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sink", Labels: forProject()}, StringData: map[string]string{"secret": audittest.Secret}})
	p := &v1alpha1.Project{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "proj"},
		Spec: v1alpha1.ProjectSpec{
			SignIn: v1alpha1.SignIn{PasswordSecretRef: &v1alpha1.SecretKeyReference{Name: "pw", Key: "passwords.yaml"}},
			EventSinks: []v1alpha1.EventSink{{Name: audittest.SinkName, URL: v1alpha1.EndpointURL(sink.URL),
				HMACSecretRef: v1alpha1.SecretKeyReference{Name: "sink", Key: "secret"}, Types: []v1alpha1.EventType{"policy.*"}}},
		},
	}
	bad := p.DeepCopy()
	bad.Name, bad.Spec.EventSinks[0].Types = "bad", []v1alpha1.EventType{"Policy"}
	if err := k8s.Create(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "types") {
		t.Fatalf("a sink type that is no type or family was accepted: %v", err)
	}
	create(t, p)
	waitComplete(t, p)
	rp := &v1alpha1.RedirectPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "only-recognised"},
		Spec:       v1alpha1.RedirectPolicySpec{ProjectRef: v1alpha1.ProjectReference{Name: "proj"}, OnlyRecognisedApps: true},
	}
	create(t, rp)
	waitReady(t, rp)
	update(t, p, func(p *v1alpha1.Project) { p.Spec.DisplayName = "Team A" })
	waitComplete(t, p)
	waitSnapshot(t, "the project with its sink", func(s *config.Snapshot) error {
		if pr := s.Project(key); pr == nil || len(pr.EventSinks) != 1 || pr.EventSinks[0].Unavailable || pr.DisplayName != "Team A" ||
			fmt.Sprint(pr.EventSinks[0].Types) != "[policy.*]" {
			return errors.New("not yet")
		}
		return nil
	})

	recs, err := testStore.ListAudit(context.Background(), key, 100)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, r := range recs {
		if r.Action != events.PolicyChanged {
			continue
		}
		got[fmt.Sprintf("%s gen %s from %s", r.Details["kind"], r.Details["generation"], r.Details["previous_generation"])]++
		if r.Actor != "system" || r.Outcome != store.OutcomeSuccess {
			t.Errorf("policy.changed %+v", r)
		}
	}
	want := map[string]int{"Project gen 1 from 0": 1, "Project gen 2 from 1": 1, "RedirectPolicy gen 1 from 0": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("policy.changed records %v, want %v", got, want)
	}
	rec := audittest.Trail(t, testStore, holder, time.Now, sink, key, events.PolicyChanged)[events.PolicyChanged]
	if rec.Target != "Project:"+key || rec.Details["generation"] != "2" {
		t.Errorf("newest policy.changed: %+v", rec)
	}
	for _, d := range sink.Deliveries() {
		if d.Event.Data.Action == events.PolicyChanged && d.Event.Data.Details["kind"] == "RedirectPolicy" && d.Event.Data.Details["only_recognised_apps"] != "true" {
			t.Errorf("RedirectPolicy change: %+v", d.Event.Data)
		}
	}
}

package controllers

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
)

const demoPasswords = `- email: alice@example.com
  hash: $2a$10$5ai4.gQFC2HTMrdNoweK0eV.EidIA5.eyvrOffs4Ao4TM7P23dxoe
`

func objMeta(ns, name, uid string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), Generation: 1,
		CreationTimestamp: metav1.NewTime(testNow)}
}

func labelled(m metav1.ObjectMeta, labels map[string]string) metav1.ObjectMeta {
	m.Labels = labels
	return m
}

// standaloneObjects is a Project with a password file, a Connector and a confidential client
// listing it, and a RedirectPolicy, as a directory of files would declare them.
func standaloneObjects(t *testing.T) *Objects {
	t.Helper()
	objs := &Objects{
		Secrets: []corev1.Secret{
			{ObjectMeta: labelled(objMeta("demo", "people", ""), forProject()), Data: map[string][]byte{"passwords.yaml": []byte(demoPasswords)}},
			{ObjectMeta: labelled(objMeta("demo", "gh", ""), forConnector()), Data: map[string][]byte{"clientSecret": []byte("upstream-secret")}},
		},
		Projects: []v1alpha1.Project{{ObjectMeta: objMeta("demo", "p", "u-p"), Spec: v1alpha1.ProjectSpec{
			SignIn: v1alpha1.SignIn{PasswordSecretRef: &v1alpha1.SecretKeyReference{Name: "people", Key: "passwords.yaml"}},
		}}},
		Connectors: []v1alpha1.Connector{{ObjectMeta: objMeta("demo", "github", "u-c"), Spec: v1alpha1.ConnectorSpec{
			ProjectRef: v1alpha1.ProjectReference{Name: "p"}, Preset: v1alpha1.PresetGitHub, ClientID: "app",
			ClientSecretRef: v1alpha1.SecretKeyReference{Name: "gh", Key: "clientSecret"},
		}}},
		OAuthClients: []v1alpha1.OAuthClient{{ObjectMeta: objMeta("demo", "helper", "0f3c5a2e-1b7d-4c9a-8e6f-2d4b6a8c0e1f"), Spec: v1alpha1.OAuthClientSpec{
			ProjectRef:   v1alpha1.ProjectReference{Name: "p"},
			RedirectURIs: []v1alpha1.RedirectURI{"http://127.0.0.1:8070/callback"},
			Connectors:   []v1alpha1.ConnectorName{"github"},
		}}},
		RedirectPolicies: []v1alpha1.RedirectPolicy{{ObjectMeta: objMeta("demo", "default", "u-r"), Spec: v1alpha1.RedirectPolicySpec{
			ProjectRef: v1alpha1.ProjectReference{Name: "p"},
		}}},
	}
	sec, changed, err := CredentialsSecret(&objs.OAuthClients[0], nil)
	if err != nil || !changed {
		t.Fatalf("CredentialsSecret = %v, %v", changed, err)
	}
	objs.Secrets = append(objs.Secrets, *sec)
	return objs
}

func newStandalone(t *testing.T) (*Standalone, *config.Holder) {
	t.Helper()
	h := &config.Holder{}
	s, err := NewStandalone(Options{PublicURL: testPublicURL, Config: h, Clock: func() time.Time { return testNow }}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return s, h
}

func TestStandaloneApply(t *testing.T) {
	s, h := newStandalone(t)
	objs := standaloneObjects(t)
	if err := s.Apply(context.Background(), objs); err != nil {
		t.Fatal(err)
	}
	snap := h.Load()
	p := snap.Projects["demo/p"]
	if p == nil {
		t.Fatalf("Project demo/p not compiled: %v", snap.Projects)
	}
	if p.Issuer != testPublicURL+"/demo/p" || len(p.SignIn.Passwords) != 1 {
		t.Errorf("Project compiled as issuer %q with %d people", p.Issuer, len(p.SignIn.Passwords))
	}
	oc := &objs.OAuthClients[0]
	c := p.Clients[clientIDFor(oc)]
	if c == nil || len(c.Connectors) != 1 || c.Connectors[0] != "demo/github" {
		t.Fatalf("client %s compiled as %+v", clientIDFor(oc), c)
	}
	if p.ConnectorsByAudience["github"] == nil {
		t.Error("Connector not compiled under its audience")
	}
	for name, conds := range map[string][]metav1.Condition{
		"Project": objs.Projects[0].Status.Conditions, "Connector": objs.Connectors[0].Status.Conditions,
		"OAuthClient": oc.Status.Conditions, "RedirectPolicy": objs.RedirectPolicies[0].Status.Conditions,
	} {
		if !meta.IsStatusConditionTrue(conds, v1alpha1.ReadyCondition) {
			t.Errorf("%s not Ready: %+v", name, conds)
		}
	}
	if oc.Status.ClientID != c.ID || oc.Status.ObservedGeneration != 1 {
		t.Errorf("OAuthClient status %+v", oc.Status)
	}
	if got := objs.Connectors[0].Status.CallbackURL; got != p.Issuer+config.CallbackPath("demo", "github") {
		t.Errorf("callbackURL %q", got)
	}

	// The credentials Secret is kept as it is once written: a second pass changes nothing.
	sec, changed, err := CredentialsSecret(oc, &objs.Secrets[2])
	if err != nil || changed || !equality.Semantic.DeepEqual(sec, &objs.Secrets[2]) {
		t.Errorf("CredentialsSecret on its own output: changed=%v err=%v", changed, err)
	}
}

// A Secret Latchkey did not create is never taken over as credentials, without an API server
// as with one (docs/decisions/0019).
func TestStandaloneCredentialsConflict(t *testing.T) {
	s, h := newStandalone(t)
	objs := standaloneObjects(t)
	foreign := corev1.Secret{ObjectMeta: objMeta("demo", "helper-credentials", ""),
		Data: map[string][]byte{"client_secret": []byte("chosen-by-whoever-wrote-the-file-0123456789")}}
	objs.Secrets[2] = foreign
	sec, changed, err := CredentialsSecret(&objs.OAuthClients[0], &foreign)
	if err != nil || changed || sec != &foreign {
		t.Fatalf("CredentialsSecret on a foreign Secret: changed=%v err=%v", changed, err)
	}
	if err := s.Apply(context.Background(), objs); err != nil {
		t.Fatal(err)
	}
	ready := meta.FindStatusCondition(objs.OAuthClients[0].Status.Conditions, v1alpha1.ReadyCondition)
	if ready == nil || ready.Reason != v1alpha1.OAuthClientSecretConflictReason {
		t.Fatalf("Ready = %+v, want SecretConflict", ready)
	}
	if len(h.Load().Projects["demo/p"].Clients) != 0 {
		t.Error("a client whose credentials Secret is not Latchkey's is served")
	}
}

func TestMemReaderIndexes(t *testing.T) {
	m := newMemReader()
	if err := addIndexes(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	objs := standaloneObjects(t)
	m.add(&objs.Connectors[0])
	other := objs.Connectors[0]
	other.Name, other.Spec.ProjectRef.Name = "elsewhere", "q"
	m.add(&other)
	var l v1alpha1.ConnectorList
	if err := m.List(context.Background(), &l, MatchingFields{projectIndex: "demo/p"}); err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 || l.Items[0].Name != "github" {
		t.Errorf("List by project = %v", l.Items)
	}
	if err := m.Get(context.Background(), client.ObjectKey{Namespace: "demo", Name: "nope"}, &v1alpha1.Project{}); !apierrors.IsNotFound(err) {
		t.Errorf("Get of a missing object = %v, want NotFound", err)
	}
}

// TestStandaloneConnectorSecretOptIn: the no-cluster mode applies the cluster's rule. A
// Connector uses its Secret only when it is labelled latchkey.dev/use=connector; a Secret with
// no label or another use reads exactly like one that does not exist, and nothing of it is
// compiled.
func TestStandaloneConnectorSecretOptIn(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels map[string]string // nil with absent: no Secret at all
		absent bool
		ok     bool
	}{
		{name: "missing", absent: true},
		{name: "unlabelled"},
		{name: "a Project's Secret", labels: forProject()},
		{name: "Latchkey's own", labels: map[string]string{v1alpha1.SecretUseLabel: v1alpha1.SecretUseLatchkey}},
		{name: "another value", labels: map[string]string{v1alpha1.SecretUseLabel: "connectors"}},
		{name: "opted in", labels: forConnector(), ok: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, h := newStandalone(t)
			objs := standaloneObjects(t)
			if tc.absent {
				objs.Secrets = slices.Delete(objs.Secrets, 1, 2)
			} else {
				objs.Secrets[1].Labels = tc.labels
			}
			if err := s.Apply(context.Background(), objs); err != nil {
				t.Fatal(err)
			}
			c := h.Load().Projects["demo/p"].Connectors["demo/github"]
			cond := meta.FindStatusCondition(objs.Connectors[0].Status.Conditions, v1alpha1.ReadyCondition)
			if tc.ok {
				if c == nil || c.ClientSecret != "upstream-secret" || cond.Status != metav1.ConditionTrue {
					t.Fatalf("opted-in Secret not used: %+v, %+v", c, cond)
				}
				return
			}
			if c != nil {
				t.Fatalf("Connector compiled with a Secret it may not use: %q", c.ClientSecret)
			}
			const want = "Secret demo/gh (spec.clientSecretRef) not found, or not labelled latchkey.dev/use=connector"
			if cond.Status != metav1.ConditionFalse || cond.Reason != v1alpha1.ConnectorSecretMissingReason || cond.Message != want {
				t.Errorf("condition %s %s %q, want False %s %q (as for a missing Secret)", cond.Status, cond.Reason, cond.Message,
					v1alpha1.ConnectorSecretMissingReason, want)
			}
		})
	}
}

package callback_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/controllers"
	"latchkey.dev/latchkey/internal/config"
)

// compileConnectors compiles, the way the operator does (controllers.Standalone), a Project in
// namespace platform that admits every namespace and opens 127.0.0.1/32 with a bare
// spec.upstreamNetwork.allowedCIDRs entry for its own in-cluster provider, its own Connector
// there, and a tenant's Connector in namespace tenant whose token endpoint is tokenURL too.
func compileConnectors(t *testing.T, tokenURL string) (own, tenant *config.Connector) {
	t.Helper()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	meta := func(ns, name, uid string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), Generation: 1, CreationTimestamp: metav1.NewTime(now)}
	}
	// Secrets opt in to their use (docs/security.md, "Which Secrets Latchkey reads").
	secretFor := func(ns, name, use string) metav1.ObjectMeta {
		m := meta(ns, name, "")
		m.Labels = map[string]string{v1alpha1.SecretUseLabel: use}
		return m
	}
	connector := func(ns, name string) v1alpha1.Connector {
		return v1alpha1.Connector{ObjectMeta: meta(ns, name, "u-"+ns), Spec: v1alpha1.ConnectorSpec{
			ProjectRef: v1alpha1.ProjectReference{Name: "p", Namespace: "platform"},
			ClientID:   "app", ClientSecretRef: v1alpha1.SecretKeyReference{Name: "app", Key: "clientSecret"},
			Audience: name,
			Endpoints: &v1alpha1.ConnectorEndpoints{AuthorizationURL: "https://idp.example/auth",
				TokenURL: v1alpha1.EndpointURL(tokenURL), UserInfoURL: "https://idp.example/user"},
		}}
	}
	objs := &controllers.Objects{
		Secrets: []corev1.Secret{
			{ObjectMeta: secretFor("platform", "people", "project"), Data: map[string][]byte{"passwords.yaml": []byte("[]")}},
			{ObjectMeta: secretFor("platform", "app", "connector"), Data: map[string][]byte{"clientSecret": []byte("s")}},
			{ObjectMeta: secretFor("tenant", "app", "connector"), Data: map[string][]byte{"clientSecret": []byte("s")}},
		},
		Projects: []v1alpha1.Project{{ObjectMeta: meta("platform", "p", "u-p"), Spec: v1alpha1.ProjectSpec{
			SignIn:            v1alpha1.SignIn{PasswordSecretRef: &v1alpha1.SecretKeyReference{Name: "people", Key: "passwords.yaml"}},
			AllowedNamespaces: &v1alpha1.AllowedNamespaces{From: v1alpha1.NamespacesFromAll},
			UpstreamNetwork:   &v1alpha1.UpstreamNetwork{AllowedCIDRs: []v1alpha1.CIDR{"127.0.0.1/32"}},
		}}},
		Connectors: []v1alpha1.Connector{connector("platform", "dex"), connector("tenant", "evil")},
	}
	holder := &config.Holder{}
	s, err := controllers.NewStandalone(controllers.Options{PublicURL: "https://latchkey.example", Config: holder,
		Clock: func() time.Time { return now }}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(context.Background(), objs); err != nil {
		t.Fatal(err)
	}
	p := holder.Load().Projects["platform/p"]
	if p == nil || p.Connectors["platform/dex"] == nil || p.Connectors["tenant/evil"] == nil {
		t.Fatalf("not compiled: %+v", p)
	}
	return p.Connectors["platform/dex"], p.Connectors["tenant/evil"]
}

// The Project opens a private range for its own in-cluster provider. A tenant in another
// namespace adds a Connector whose token endpoint is in that range: a person who connects is
// refused, and the address never receives a request. The Project's own Connector, compiled from
// the same Project, reaches it.
func TestTenantConnectorNeverDialsTheRangeTheProjectOpenedForItself(t *testing.T) {
	internal, hits := tokenServer(t)
	own, tenant := compileConnectors(t, internal.URL+"/token")
	for _, tc := range []struct {
		name    string
		allowed *config.Connector
		dialled bool
	}{
		{"the tenant's Connector", tenant, false},
		{"the Project's own Connector", own, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hits.Store(0)
			h, res := connectThrough(t, internal.URL+"/token", tc.allowed.AllowedNetworks)
			if tc.dialled {
				if hits.Load() != 1 {
					t.Fatalf("the allowed address received %d requests, want 1", hits.Load())
				}
				return
			}
			assertNotDialled(t, h, res, hits.Load())
		})
	}
}

package install_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"latchkey.dev/latchkey/api/v1alpha1"
)

// TestTenantRole installs the chart's people roles for real, binds <release>-tenant to a person
// in team-a with a RoleBinding, as docs/operations.md says to, and acts as that person: they
// manage Connectors and OAuthClients in team-a and nothing else there (no Secrets, no Projects
// or RedirectPolicies to change, no status to write), and nothing at all in team-b.
func TestTenantRole(t *testing.T) {
	skip(t)
	ctx := context.Background()
	const release, releaseNS = "roles", "latchkey-system"
	teamA, teamB := "tenant-a", "tenant-b"
	for _, ns := range []string{teamA, teamB} {
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	roles, err := helm(t, "template", release, filepath.Join(root, "charts", "latchkey"), "--namespace", releaseNS,
		"--kube-version", kubeVersion, "--set", "publicURL=https://latchkey.example.com",
		"--show-only", "templates/userroles.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl(t, roles, "apply", "--server-side", "--field-manager=latchkey-install-test", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	const person = "carol@team-a.example"
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: teamA, Name: "latchkey-tenant"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: release + "-latchkey-tenant"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: person}},
	}
	if err := k8s.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(restConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: person, Groups: []string{"system:authenticated"}}
	tenant, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	// What the person may do in team-a, exactly: the rules the API server reports for them.
	review := &authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: teamA}}
	if err := tenant.Create(ctx, review); err != nil {
		t.Fatal(err)
	}
	write := []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	read := []string{"get", "list", "watch"}
	want := map[string][]string{
		"connectors": write, "oauthclients": write,
		"connectors/status": read, "oauthclients/status": read,
		"projects": read, "projects/status": read, "redirectpolicies": read, "redirectpolicies/status": read,
		"accesspolicies": read, "accesspolicies/status": read,
	}
	got := map[string][]string{}
	for _, r := range review.Status.ResourceRules {
		if !slices.Contains(r.APIGroups, v1alpha1.GroupVersion.Group) {
			continue
		}
		for _, res := range r.Resources {
			got[res] = append(got[res], r.Verbs...)
		}
	}
	for res := range got {
		slices.Sort(got[res])
		got[res] = slices.Compact(got[res])
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("latchkey.dev rules of the tenant in %s:\n got %v\nwant %v", teamA, got, want)
	}

	// And by doing it.
	allowed := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v, want allowed", what, err)
		}
	}
	forbidden := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want Forbidden", what, err)
		}
	}
	connector := func(ns string) *v1alpha1.Connector {
		return &v1alpha1.Connector{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "github"},
			Spec: v1alpha1.ConnectorSpec{
				ProjectRef: v1alpha1.ProjectReference{Name: "demo"}, Preset: v1alpha1.PresetGitHub,
				ClientID: "gh", ClientSecretRef: v1alpha1.SecretKeyReference{Name: "gh", Key: "clientSecret"},
			},
		}
	}
	oauthClient := func(ns string) *v1alpha1.OAuthClient {
		return &v1alpha1.OAuthClient{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"},
			Spec: v1alpha1.OAuthClientSpec{
				ProjectRef: v1alpha1.ProjectReference{Name: "demo"}, RedirectURIs: []v1alpha1.RedirectURI{"http://127.0.0.1:8070/callback"},
			},
		}
	}
	project := func(ns string) *v1alpha1.Project {
		return &v1alpha1.Project{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"},
			Spec: v1alpha1.ProjectSpec{SignIn: v1alpha1.SignIn{
				PasswordSecretRef: &v1alpha1.SecretKeyReference{Name: "passwords", Key: "passwords.yaml"},
			}},
		}
	}
	policy := func(ns string) *v1alpha1.RedirectPolicy {
		return &v1alpha1.RedirectPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mine"},
			Spec:       v1alpha1.RedirectPolicySpec{ProjectRef: v1alpha1.ProjectReference{Name: "demo"}},
		}
	}
	secret := func(ns string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, StringData: map[string]string{"password": "x"}}
	}
	for _, ns := range []string{teamA, teamB} {
		if err := k8s.Create(ctx, secret(ns)); err != nil {
			t.Fatal(err)
		}
	}
	// An administrator's Project in team-a, for the tenant to read and not change.
	if err := adminClient(t, scheme).Create(ctx, project(teamA)); err != nil {
		t.Fatal(err)
	}

	c := connector(teamA)
	allowed("create a Connector in team-a", tenant.Create(ctx, c))
	oc := oauthClient(teamA)
	allowed("create an OAuthClient in team-a", tenant.Create(ctx, oc))
	allowed("list OAuthClients in team-a", tenant.List(ctx, &v1alpha1.OAuthClientList{}, client.InNamespace(teamA)))
	oc.Spec.DisplayName = "Agent"
	allowed("update an OAuthClient in team-a", tenant.Update(ctx, oc))
	p := &v1alpha1.Project{}
	allowed("read the Project in team-a", tenant.Get(ctx, client.ObjectKey{Namespace: teamA, Name: "demo"}, p))

	oc.Status.ClientID = "lkc_forged"
	forbidden("write an OAuthClient's status", tenant.Status().Update(ctx, oc))
	c.Status.CallbackURL = "https://evil.example/callback"
	forbidden("write a Connector's status", tenant.Status().Update(ctx, c))
	p.Spec.DisplayName = "Taken"
	forbidden("change the Project in team-a", tenant.Update(ctx, p))
	forbidden("create a Project in team-a", tenant.Create(ctx, &v1alpha1.Project{ObjectMeta: metav1.ObjectMeta{Namespace: teamA, Name: "own"}, Spec: project(teamA).Spec}))
	forbidden("create a RedirectPolicy in team-a", tenant.Create(ctx, policy(teamA)))
	forbidden("read a Secret in team-a", tenant.Get(ctx, client.ObjectKeyFromObject(secret(teamA)), &corev1.Secret{}))

	forbidden("create a Connector in team-b", tenant.Create(ctx, connector(teamB)))
	forbidden("create an OAuthClient in team-b", tenant.Create(ctx, oauthClient(teamB)))
	forbidden("list Connectors in team-b", tenant.List(ctx, &v1alpha1.ConnectorList{}, client.InNamespace(teamB)))
	forbidden("read a Secret in team-b", tenant.Get(ctx, client.ObjectKeyFromObject(secret(teamB)), &corev1.Secret{}))
	forbidden("list Secrets in team-b", tenant.List(ctx, &corev1.SecretList{}, client.InNamespace(teamB)))
	forbidden("create a RedirectPolicy in team-b", tenant.Create(ctx, policy(teamB)))
	forbidden("list OAuthClients in every namespace", tenant.List(ctx, &v1alpha1.OAuthClientList{}))
	forbidden("bind itself more", tenant.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "more"},
		RoleRef:    binding.RoleRef,
		Subjects:   binding.Subjects,
	}))
	if t.Failed() {
		t.Logf("rendered roles:\n%s", strings.TrimSpace(roles))
	}
}

// adminClient talks to the API server as the test's administrator, with the Latchkey kinds.
func adminClient(t *testing.T, scheme *runtime.Scheme) client.Client {
	t.Helper()
	c, err := client.New(restConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

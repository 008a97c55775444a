//go:build !latchkey_local

package install_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/controllers"
	"latchkey.dev/latchkey/internal/config"
)

// TestWatchNamespaces installs the chart's RBAC with watchNamespaces for real and runs the
// controllers as its service account, limited to that namespace as --watch-namespaces limits
// them: the caches sync without cluster-wide Secret access, a Project and an OAuthClient in the
// watched namespace turn Ready and are compiled, and one in another namespace is neither read
// nor written.
func TestWatchNamespaces(t *testing.T) {
	skip(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const release, releaseNS, watched, other = "scoped", "latchkey-system", "scoped-team", "scoped-other"
	for _, ns := range []string{watched, other} {
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	chart := filepath.Join(root, "charts", "latchkey")
	rbac, err := helm(t, "template", release, chart, "--namespace", releaseNS, "--kube-version", kubeVersion,
		"--set", "publicURL=https://latchkey.example.com", "--set", "watchNamespaces={"+watched+"}",
		"--show-only", "templates/clusterrole.yaml", "--show-only", "templates/clusterrolebinding.yaml",
		"--show-only", "templates/serviceaccount.yaml", "--show-only", "templates/secret-write-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kind: RoleBinding", "namespace: " + watched, "name: scoped-latchkey-namespaces"} {
		if !strings.Contains(rbac, want) {
			t.Fatalf("rendered RBAC lacks %q:\n%s", want, rbac)
		}
	}
	if out, err := kubectl(t, rbac, "apply", "--server-side", "--field-manager=latchkey-install-test", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	// The operator's identity: the chart's service account, nothing more.
	cfg := rest.CopyConfig(restConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: fmt.Sprintf("system:serviceaccount:%s:%s-latchkey", releaseNS, release)}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}

	// The chart's admission policy: the service account creates no Secret without Latchkey's
	// managed-by label, whatever RBAC grants it. A policy takes a moment to be enforced.
	operator, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	unlabelled := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: watched, Name: "planted"},
		StringData: map[string]string{"k": "v"}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := operator.Create(ctx, unlabelled.DeepCopy(), client.DryRunAll)
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			if !strings.Contains(err.Error(), "app.kubernetes.io/managed-by=latchkey") {
				t.Errorf("refused, but not by the chart's policy: %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service account may create a Secret without the managed-by label: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	labelled := unlabelled.DeepCopy()
	labelled.Labels = map[string]string{"app.kubernetes.io/managed-by": "latchkey"}
	if err := operator.Create(ctx, labelled, client.DryRunAll); err != nil {
		t.Errorf("the service account may not create a Secret with the managed-by label: %v", err)
	}
	if _, err := helm(t, "template", release, chart, "--namespace", releaseNS, "--kube-version", kubeVersion,
		"--set", "publicURL=https://latchkey.example.com", "--set", "watchNamespaces={kube-system}"); err == nil ||
		!strings.Contains(err.Error(), "kube-system") {
		t.Errorf("the chart renders watchNamespaces kube-system: %v", err)
	}
	cacheOpts := controllers.CacheOptions()
	cacheOpts.DefaultNamespaces = map[string]cache.Config{watched: {}}
	// Should the RBAC fall short, the caches never sync: fail in seconds, not after the
	// controllers' default two minutes each.
	syncTimeout, shutdown := 20*time.Second, 5*time.Second
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme, Cache: cacheOpts,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller:              ctrlconfig.Controller{CacheSyncTimeout: syncTimeout},
		GracefulShutdownTimeout: &shutdown,
	})
	if err != nil {
		t.Fatal(err)
	}
	holder := &config.Holder{}
	compiler, err := controllers.SetupWithCompiler(mgr, controllers.Options{PublicURL: "https://latchkey.example.com", Config: holder})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("the manager did not stop")
		}
	}()
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := compiler.WaitForFirst(wctx); err != nil {
		t.Fatalf("no snapshot as the service account (a cache that needs more than the RBAC grants never syncs): %v", err)
	}

	admin, err := client.New(restConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	agents := map[string]*v1alpha1.OAuthClient{}
	for _, ns := range []string{watched, other} {
		for _, obj := range []client.Object{
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "passwords", Labels: map[string]string{v1alpha1.SecretUseLabel: v1alpha1.SecretUseProject}},
				StringData: map[string]string{"passwords.yaml": "[]"}},
			&v1alpha1.Project{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "proj"},
				Spec: v1alpha1.ProjectSpec{SignIn: v1alpha1.SignIn{PasswordSecretRef: &v1alpha1.SecretKeyReference{Name: "passwords", Key: "passwords.yaml"}}}},
		} {
			if err := admin.Create(ctx, obj); err != nil {
				t.Fatal(err)
			}
		}
		agents[ns] = &v1alpha1.OAuthClient{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"},
			Spec: v1alpha1.OAuthClientSpec{ProjectRef: v1alpha1.ProjectReference{Name: "proj"},
				RedirectURIs: []v1alpha1.RedirectURI{"https://agent.example.com/callback"}},
		}
		if err := admin.Create(ctx, agents[ns]); err != nil {
			t.Fatal(err)
		}
	}

	inWatched := &v1alpha1.OAuthClient{}
	deadline = time.Now().Add(30 * time.Second)
	for {
		if err := admin.Get(ctx, client.ObjectKeyFromObject(agents[watched]), inWatched); err != nil {
			t.Fatal(err)
		}
		if meta.IsStatusConditionTrue(inWatched.Status.Conditions, v1alpha1.ReadyCondition) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the OAuthClient in the watched namespace never turned Ready: %+v", inWatched.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
	sec := &corev1.Secret{}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: watched, Name: "agent-credentials"}, sec); err != nil {
		t.Fatalf("the credentials Secret was not written as the service account: %v", err)
	}
	for {
		if p := holder.Load().Project(watched + "/proj"); p != nil && p.Clients[inWatched.Status.ClientID] != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the watched namespace's client is not in the snapshot")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Given the watched namespace's Ready as a clock: the other namespace is untouched.
	inOther := &v1alpha1.OAuthClient{}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(agents[other]), inOther); err != nil {
		t.Fatal(err)
	}
	if len(inOther.Status.Conditions) != 0 || holder.Load().Project(other+"/proj") != nil {
		t.Errorf("the other namespace was reconciled or compiled: %+v", inOther.Status)
	}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: other, Name: "agent-credentials"}, &corev1.Secret{}); err == nil {
		t.Error("a credentials Secret was written in a namespace not watched")
	}

	// A Secret Latchkey did not create cannot be changed by it either, though RBAC grants patch.
	passwords := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: watched, Name: "passwords"}}
	err = operator.Patch(ctx, passwords, client.RawPatch(types.MergePatchType, []byte(`{"stringData":{"planted":"x"}}`)))
	if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
		t.Errorf("the service account changed a Secret it did not create: %v", err)
	}
}

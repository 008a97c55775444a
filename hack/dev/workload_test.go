//go:build !latchkey_local

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"latchkey.dev/latchkey/internal/testenv"
)

// TestWorkloadDemo: make run's workload-identity demo creates Repo Helper's ServiceAccount and
// its secret-less OAuthClient (which the API server accepts as valid), and mints a token for the
// issuer into the state directory, readable by its owner only.
func TestWorkloadDemo(t *testing.T) {
	testenv.SkipShort(t, "a kube-apiserver and etcd (envtest)")
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("KUBEBUILDER_ASSETS is not set")
	}
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cs := mustClientset(t, cfg)
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), namespace(demoNamespace), createOpts); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	const issuer = "http://127.0.0.1:8080/latchkey-demo/demo"
	cmd, err := setUpWorkloadDemo(context.Background(), cfg, issuer, state)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(state, "repo-helper.token")
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() == 0 {
		t.Fatalf("token file: %v %v", fi, err)
	}
	if !strings.Contains(cmd, "client_id="+workloadClientID) || !strings.Contains(cmd, "client_assertion@"+path) || !strings.Contains(cmd, issuer+"/token") {
		t.Errorf("command %q", cmd)
	}
	// Running it again (a restart against the same cluster) keeps what exists.
	if _, err := setUpWorkloadDemo(context.Background(), cfg, issuer, state); err != nil {
		t.Fatal(err)
	}
}

var createOpts = metav1.CreateOptions{}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func mustClientset(t *testing.T, cfg *rest.Config) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

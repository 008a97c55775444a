package install_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"

	"latchkey.dev/latchkey/internal/keys"
	"latchkey.dev/latchkey/internal/secret"
)

// TestRenderedTwiceKeepsKeys installs the chart the way Argo CD does: `helm template` (where
// lookup sees nothing), applied with server-side apply, and rendered and applied again on the
// next sync. The operator, started from the rendered Deployment's own arguments under the
// chart's service account, creates the keys Secret; a value sealed with it before the second
// sync still opens after it, because no render holds key material and the operator never
// replaces the Secret.
//
// Before the operator kept the keys, each render carried a fresh randBytes key, and the second
// sync replaced the first: everything sealed before it became unreadable.
func TestRenderedTwiceKeepsKeys(t *testing.T) {
	skip(t)
	const ns, release = "gitops", "argo"
	if err := k8s.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	render := func() string {
		t.Helper()
		out, err := helm(t, "template", release, filepath.Join(root, "charts", "latchkey"), "--namespace", ns,
			"--kube-version", kubeVersion, "--set", "publicURL=https://latchkey.example.com")
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	first, second := render(), render()
	if first != second {
		t.Fatal("two renders of the same values differ: a GitOps tool would see drift on every sync")
	}
	for _, o := range objects(t, first) {
		if o.GetKind() == "Secret" {
			t.Fatalf("the render holds Secret %s: key material would be replaced on every sync", o.GetName())
		}
	}
	apply := func(manifests string) {
		t.Helper()
		if _, err := kubectl(t, manifests, "apply", "--server-side", "--force-conflicts",
			"--field-manager=argocd-controller", "-f", "-"); err != nil {
			t.Fatal(err)
		}
	}
	apply(first)

	// The chart's Role: update on the keys Secret only (create cannot be limited to a name).
	as := "--as=system:serviceaccount:" + ns + ":" + release + "-latchkey"
	for res, want := range map[string]string{
		"secrets/" + release + "-latchkey-keys": "yes", "secrets/another": "no",
		// The admin API's certificate and the one APIService whose caBundle it writes; no other.
		"secrets/" + release + "-latchkey-admin-serving":                 "yes",
		"apiservices.apiregistration.k8s.io/v1alpha1.admin.latchkey.dev": "yes",
		"apiservices.apiregistration.k8s.io/v1.apps":                     "no",
	} {
		out, _ := kubectl(t, "", "auth", "can-i", "update", res, "-n", ns, as)
		if strings.TrimSpace(out) != want {
			t.Errorf("may the operator update %s: %q, want %s", res, out, want)
		}
	}

	bin := buildLatchkey(t)
	args := operatorArgs(t, deployment(t, objects(t, first)).Spec.Template.Spec.Containers[0].Args,
		filepath.Join(t.TempDir(), "latchkey.db"), serviceAccountKubeconfig(t, ns, release+"-latchkey"))
	keysSecret := types.NamespacedName{Namespace: ns, Name: release + "-latchkey-keys"}

	stop := startOperator(t, bin, args)
	before := readKeys(t, keysSecret)
	kr, err := secret.NewKeyring(before.set.Sealing, before.set.PrimarySealing(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	kid, sealed := kr.Seal("test/gitops", []byte("gho_sealed_before_the_second_sync"))
	// The admin API's serving certificate, kept the same way: created by the operator under
	// the chart's RBAC, its CA written into the APIService the render left without one.
	certBefore := readAdminCert(t, types.NamespacedName{Namespace: ns, Name: release + "-latchkey-admin-serving"})
	stop()

	// The next sync: render again, apply, and prune what the application tracks but the render
	// no longer holds (the operator's Secret is not the application's, so it is never pruned).
	apply(second)
	if _, err := kubectl(t, "", "delete", "secrets", "-n", ns, "-l", "app.kubernetes.io/instance="+release); err != nil {
		t.Fatal(err)
	}
	stop = startOperator(t, bin, args)
	defer stop()

	after := readKeys(t, keysSecret)
	if after.uid != before.uid {
		t.Fatal("the keys Secret was replaced")
	}
	if certAfter := readAdminCert(t, types.NamespacedName{Namespace: ns, Name: release + "-latchkey-admin-serving"}); certAfter.UID != certBefore.UID ||
		!bytes.Equal(certAfter.Data["tls.crt"], certBefore.Data["tls.crt"]) {
		t.Fatal("the admin API's serving certificate was replaced by the second sync")
	}
	if !maps.EqualFunc(before.set.Sealing, after.set.Sealing, bytes.Equal) {
		t.Fatal("the sealing keys changed across the second sync")
	}
	kr, err = secret.NewKeyring(after.set.Sealing, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := kr.Open("test/gitops", kid, sealed); err != nil || string(got) != "gho_sealed_before_the_second_sync" {
		t.Fatalf("a value sealed before the second sync does not open after it: %v", err)
	}
}

type storedKeys struct {
	uid types.UID
	set *keys.Set
}

func readKeys(t *testing.T, key types.NamespacedName) storedKeys {
	t.Helper()
	var sec corev1.Secret
	if err := k8s.Get(t.Context(), key, &sec); err != nil {
		t.Fatalf("the operator did not create the keys Secret: %v", err)
	}
	set, err := keys.Parse(sec.Data)
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Sealing) == 0 || len(set.Signing) == 0 {
		t.Fatalf("keys Secret holds %d sealing and %d signing keys", len(set.Sealing), len(set.Signing))
	}
	return storedKeys{uid: sec.UID, set: set}
}

// readAdminCert waits until the operator has created the admin API's certificate Secret and
// the APIService's caBundle is its CA bundle.
func readAdminCert(t *testing.T, key types.NamespacedName) *corev1.Secret {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var sec corev1.Secret
		err := k8s.Get(t.Context(), key, &sec)
		if err == nil {
			svc := &unstructured.Unstructured{}
			svc.SetAPIVersion("apiregistration.k8s.io/v1")
			svc.SetKind("APIService")
			if err = k8s.Get(t.Context(), types.NamespacedName{Name: "v1alpha1.admin.latchkey.dev"}, svc); err == nil {
				b, _, _ := unstructured.NestedString(svc.Object, "spec", "caBundle")
				if b == base64.StdEncoding.EncodeToString(sec.Data["ca.crt"]) && b != "" {
					return &sec
				}
				err = fmt.Errorf("APIService caBundle %q is not the Secret's ca.crt", b)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the operator did not keep the admin API's certificate: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// buildLatchkey builds the operator's binary once per test run.
func buildLatchkey(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "latchkey")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/latchkey")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// operatorArgs are the rendered container's arguments with what a pod has and a test process
// has not replaced: the listen addresses, the database path and the API server.
func operatorArgs(t *testing.T, rendered []string, db, kubeconfig string) []string {
	t.Helper()
	var out []string
	for _, a := range rendered {
		name, _, _ := strings.Cut(a, "=")
		switch name {
		case "--listen", "--metrics-listen", "--database", "--admin-bind-address":
			continue
		}
		out = append(out, a)
	}
	if !slices.ContainsFunc(out, func(a string) bool { return strings.HasPrefix(a, "--keys-secret=") }) {
		t.Fatalf("the rendered Deployment names no keys Secret: %v", rendered)
	}
	return append(out, "--listen=127.0.0.1:"+freePort(t), "--metrics-listen=0", "--database=sqlite:"+db, "--kubeconfig="+kubeconfig,
		"--admin-bind-address=127.0.0.1:"+freePort(t))
}

// serviceAccountKubeconfig talks to the API server as the chart's service account, so the
// operator has exactly the permissions the chart grants it.
func serviceAccountKubeconfig(t *testing.T, ns, sa string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = "system:serviceaccount:" + ns + ":" + sa
		a.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
}

// startOperator runs the binary until it answers /-/readyz (keys loaded, configuration
// compiled) and returns a function that stops it as Kubernetes stops a pod.
func startOperator(t *testing.T, bin string, args []string) func() {
	t.Helper()
	var listen string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--listen="); ok {
			listen = v
		}
	}
	logs := &strings.Builder{}
	cmd := exec.Command(bin, append(args, "--shutdown-grace=1s", "--log-format=text")...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+listen+"/-/readyz", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return stop
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("the operator stopped: %v\n%s", err, logs)
		case <-ctx.Done():
			stop()
			t.Fatalf("the operator did not become ready:\n%s", logs)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

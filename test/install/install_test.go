// Package install checks what an administrator installs: the Helm chart rendered with
// `helm template` for several value sets, and the kustomizations under config/, each applied
// with server-side dry-run (strict field validation) to a real kube-apiserver that has the CRDs.
// It also checks that the CRDs themselves refuse absurd input (lifetimes), since that is what a
// GitOps pipeline meets first.
//
// Helm comes from the hack/tools module (`go tool helm`), kubectl from KUBEBUILDER_ASSETS
// (hack/control-plane.sh builds both into the cache). Without KUBEBUILDER_ASSETS the tests
// skip, except under CI=true, where they fail.
package install_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"latchkey.dev/latchkey/internal/devcerts"
	"latchkey.dev/latchkey/internal/testenv"
)

var (
	root       string // the repository
	assets     string // KUBEBUILDER_ASSETS
	kubeconfig string
	restConfig *rest.Config
	k8s        client.Client
	skipReason string
	gatewayCRD string // the HTTPRoute CRD manifest, from the Gateway API module
)

const kubeVersion = "1.37.2"

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	root = filepath.Join(wd, "..", "..")
	flag.Parse() // for testing.Short
	if testing.Short() {
		skipReason = testenv.ShortReason("a kube-apiserver (envtest), Helm and kubectl")
		return m.Run()
	}
	if gatewayCRD, err = httpRouteCRD(); err != nil {
		fmt.Fprintln(os.Stderr, "the Gateway API's HTTPRoute CRD:", err)
		return 1
	}
	assets = os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		msg := "KUBEBUILDER_ASSETS is not set: run hack/control-plane.sh and export KUBEBUILDER_ASSETS=<the directory it prints>"
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "FAIL: "+msg)
			return 1
		}
		skipReason = msg
		return m.Run()
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		CRDs:                  []*apiextensionsv1.CustomResourceDefinition{serviceMonitorCRD()},
		CRDInstallOptions:     envtest.CRDInstallOptions{Paths: []string{gatewayCRD}},
		ErrorIfCRDPathMissing: true,
	}
	// API aggregation configured as in real clusters, so the operator serves the admin API and
	// keeps its serving certificate (TestRenderedTwiceKeepsKeys).
	aggDir, err := os.MkdirTemp("", "latchkey-install-agg-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(aggDir)
	agg, err := devcerts.NewAggregation(aggDir)
	if err != nil {
		panic(err)
	}
	agg.Configure(env)
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting envtest:", err)
		return 1
	}
	defer env.Stop()
	restConfig = cfg
	dir, err := os.MkdirTemp("", "latchkey-install-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		panic(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		return 1
	}
	// Dry-run does not create a namespace for what follows it in the same apply, so the
	// namespaces the manifests live in exist for real.
	for _, ns := range []string{"latchkey", "latchkey-system", "team"} {
		if err := k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			fmt.Fprintln(os.Stderr, "namespace:", err)
			return 1
		}
	}
	return m.Run()
}

// httpRouteCRD returns the path of the Gateway API's HTTPRoute CRD in the module cache, at the
// version `make chart-lint` validates against (GATEWAY_API_VERSION in the Makefile).
func httpRouteCRD() (string, error) {
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`(?m)^GATEWAY_API_VERSION \?= (v[0-9.]+)$`).FindSubmatch(mk)
	if m == nil {
		return "", errors.New("no GATEWAY_API_VERSION in the Makefile")
	}
	cmd := exec.Command("go", "mod", "download", "-json", "sigs.k8s.io/gateway-api@"+string(m[1]))
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-modcacherw")
	out, err := cmd.Output()
	var mod struct{ Dir string }
	if err != nil || json.Unmarshal(out, &mod) != nil || mod.Dir == "" {
		return "", fmt.Errorf("go mod download sigs.k8s.io/gateway-api@%s: %w %s", m[1], err, out)
	}
	return filepath.Join(mod.Dir, "config", "crd", "standard", "gateway.networking.k8s.io_httproutes.yaml"), nil
}

func skip(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}

// helm runs Helm from the hack/tools module.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"tool", "helm"}, args...)...)
	cmd.Dir = filepath.Join(root, "hack", "tools")
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

func kubectl(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(assets, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// dryRun applies manifests as `kubectl apply --server-side --dry-run=server` would in a
// pipeline: the API server validates every object against its schema (built-in or CRD),
// strictly (unknown fields are errors), and runs admission, without storing anything.
func dryRun(t *testing.T, manifests string) {
	t.Helper()
	out, err := kubectl(t, manifests, "apply", "--server-side", "--force-conflicts", "--dry-run=server",
		"--field-manager=latchkey-install-test", "--validate=strict", "-f", "-")
	if err != nil {
		t.Fatalf("the manifests do not apply: %v", err)
	}
	if !strings.Contains(out, "serverside-applied (server dry run)") {
		t.Fatalf("kubectl applied nothing:\n%s", out)
	}
}

// objects decodes a multi-document YAML stream.
func objects(t *testing.T, manifests string) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifests), 4096)
	var out []*unstructured.Unstructured
	for {
		var u unstructured.Unstructured
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("rendered YAML does not parse: %v", err)
		}
		if len(u.Object) > 0 {
			out = append(out, &u)
		}
	}
}

func kinds(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetKind()+"/"+o.GetName())
	}
	slices.Sort(out)
	return out
}

func deployment(t *testing.T, objs []*unstructured.Unstructured) *appsv1.Deployment {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
			t.Fatal(err)
		}
		return &d
	}
	t.Fatalf("no Deployment among %v", kinds(objs))
	return nil
}

// hardened checks what every install must have, whatever the values: a non-root pod that
// cannot gain privileges, a read-only root file system, no capabilities, the runtime's
// seccomp profile, probes on the health paths, and resource requests and a memory limit.
func hardened(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	ps := d.Spec.Template.Spec.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v: want runAsNonRoot and seccomp RuntimeDefault", ps)
	}
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%d containers", len(d.Spec.Template.Spec.Containers))
	}
	c := d.Spec.Template.Spec.Containers[0]
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("no container security context")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("root file system is writable")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("privilege escalation allowed")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("capabilities %+v: want drop [ALL]", sc.Capabilities)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/-/readyz" {
		t.Errorf("readiness probe %+v: want /-/readyz", c.ReadinessProbe)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/-/healthz" {
		t.Errorf("liveness probe %+v: want /-/healthz", c.LivenessProbe)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit", c.Resources)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Error("no preStop delay: a stopping pod would refuse requests the Service still sends it")
	}
	if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g < 25 {
		t.Errorf("terminationGracePeriodSeconds %v leaves no room to drain", g)
	}
}

func volume(d *appsv1.Deployment, name string) *corev1.Volume {
	for i, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return &d.Spec.Template.Spec.Volumes[i]
		}
	}
	return nil
}

func object(t *testing.T, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind {
			return o
		}
	}
	t.Fatalf("no %s among %v", kind, kinds(objs))
	return nil
}

func testPod(t *testing.T, objs []*unstructured.Unstructured) *corev1.Pod {
	t.Helper()
	var p corev1.Pod
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(object(t, objs, "Pod").Object, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

func arg(c corev1.Container, prefix string) (string, bool) {
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, prefix); ok {
			return v, true
		}
	}
	return "", false
}

func TestChart(t *testing.T) {
	skip(t)
	chart := filepath.Join(root, "charts", "latchkey")
	if _, err := helm(t, "lint", chart, "--set", "publicURL=https://latchkey.example.com"); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name   string
		values []string
		files  []string // under charts/latchkey/ci
		check  func(t *testing.T, objs []*unstructured.Unstructured)
	}{
		{
			name:   "defaults: SQLite on a volume, one replica, generated key, helm test",
			values: []string{"publicURL=https://latchkey.example.com"},
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				d := deployment(t, objs)
				c := d.Spec.Template.Spec.Containers[0]
				if *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
					t.Errorf("replicas %d strategy %s: SQLite needs one pod at a time", *d.Spec.Replicas, d.Spec.Strategy.Type)
				}
				if v, _ := arg(c, "--database="); v != "sqlite:/var/lib/latchkey/latchkey.db" {
					t.Errorf("--database=%s", v)
				}
				if v, _ := arg(c, "--leader-elect="); v != "false" {
					t.Errorf("--leader-elect=%s: one SQLite pod needs no Lease", v)
				}
				// An emptyDir would lose every grant with the pod.
				if v := volume(d, "data"); v == nil || v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "rel-latchkey-data" {
					t.Errorf("data volume %+v: want the PersistentVolumeClaim rel-latchkey-data", v)
				}
				if v, _ := arg(c, "--keys-secret="); v != "latchkey/rel-latchkey-keys" {
					t.Errorf("--keys-secret=%s", v)
				}
				// The admin API is on, its certificate kept by the operator: the APIService
				// carries no caBundle (the operator writes it), and no certificate is rendered.
				if v, _ := arg(c, "--admin-tls-secret="); v != "latchkey/rel-latchkey-admin-serving" {
					t.Errorf("--admin-tls-secret=%s", v)
				}
				if v, _ := arg(c, "--admin-service="); v != "rel-latchkey-admin" {
					t.Errorf("--admin-service=%s", v)
				}
				if volume(d, "admin-tls") != nil {
					t.Error("a certificate volume is mounted though the operator keeps the certificate")
				}
				for _, o := range objs {
					if o.GetKind() == "APIService" {
						if b, ok, _ := unstructured.NestedString(o.Object, "spec", "caBundle"); ok {
							t.Errorf("APIService rendered with caBundle %q: every render would fight the operator's", b)
						}
					}
				}
				for _, want := range []string{"CustomResourceDefinition/projects.latchkey.dev", "Role/rel-latchkey-keys",
					"NetworkPolicy/rel-latchkey", "PodDisruptionBudget/rel-latchkey", "ClusterRole/rel-latchkey-admin",
					"ClusterRole/rel-latchkey-tenant", "Service/rel-latchkey", "PersistentVolumeClaim/rel-latchkey-data",
					"Pod/rel-latchkey-test-issuer", "APIService/v1alpha1.admin.latchkey.dev", "Service/rel-latchkey-admin",
					"Role/rel-latchkey-admin-serving", "ClusterRole/rel-latchkey-admin-apiservice"} {
					if !slices.Contains(kinds(objs), want) {
						t.Errorf("%s not rendered (have %v)", want, kinds(objs))
					}
				}
				if slices.Contains(kinds(objs), "Role/rel-latchkey-leader-election") {
					t.Error("leader-election Role rendered without leader election")
				}
			},
		},
		{
			name: "PostgreSQL, three replicas, ingress, ServiceMonitor, egress policy, aggregated roles",
			values: []string{
				"publicURL=https://auth.example.com/latchkey", "replicaCount=3",
				"database.existingSecret=latchkey-db", "keys.existingSecret=latchkey-keys",
				"ingress.enabled=true", "ingress.className=nginx", "ingress.tls.secretName=latchkey-tls",
				"metrics.serviceMonitor.enabled=true", "networkPolicy.egress.enabled=true",
				"rbac.aggregateToDefaultRoles=true",
			},
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				d := deployment(t, objs)
				c := d.Spec.Template.Spec.Containers[0]
				if *d.Spec.Replicas != 3 || d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
					t.Errorf("replicas %d strategy %s", *d.Spec.Replicas, d.Spec.Strategy.Type)
				}
				if v, _ := arg(c, "--leader-elect="); v != "true" {
					t.Errorf("--leader-elect=%s: three replicas must elect one controller leader", v)
				}
				if v, ok := arg(c, "--database="); ok {
					t.Errorf("--database=%s on the command line: the DSN comes from the Secret", v)
				}
				env := map[string]corev1.EnvVar{}
				for _, e := range c.Env {
					env[e.Name] = e
				}
				if db := env["LATCHKEY_DATABASE"]; db.Value != "" || db.ValueFrom == nil ||
					db.ValueFrom.SecretKeyRef == nil || db.ValueFrom.SecretKeyRef.Name != "latchkey-db" {
					t.Errorf("env %+v: want LATCHKEY_DATABASE from the Secret latchkey-db", c.Env)
				}
				// The binary derives its Go memory limit from the container's (with headroom);
				// a GOMEMLIMIT of the whole limit would override that and leave none.
				if m, ok := env["GOMEMLIMIT"]; ok {
					t.Errorf("env GOMEMLIMIT %+v: the binary sets its own limit below the container's", m)
				}
				if c.Resources.Limits.Memory().IsZero() {
					t.Error("no memory limit: the Go runtime's soft limit is derived from it")
				}
				for _, v := range d.Spec.Template.Spec.Volumes {
					if v.Name == "data" {
						t.Error("a SQLite data volume on PostgreSQL")
					}
				}
				if len(d.Spec.Template.Spec.TopologySpreadConstraints) == 0 {
					t.Error("three replicas are not spread over nodes")
				}
				for _, want := range []string{"Ingress/rel-latchkey", "ServiceMonitor/rel-latchkey", "Role/rel-latchkey-leader-election",
					"ClusterRole/rel-latchkey-view"} {
					if !slices.Contains(kinds(objs), want) {
						t.Errorf("%s not rendered (have %v)", want, kinds(objs))
					}
				}
				if v, _ := arg(c, "--keys-secret="); v != "latchkey/latchkey-keys" {
					t.Errorf("--keys-secret=%s: want keys.existingSecret", v)
				}
			},
		},
		{
			name: "SQLite on a volume, no policy objects, existing service account",
			values: []string{
				"publicURL=https://latchkey.example.com", "persistence.enabled=true",
				"networkPolicy.enabled=false", "podDisruptionBudget.enabled=false", "rbac.userRoles=false",
				"serviceAccount.create=false", "serviceAccount.name=default", "keys.existingSecret=latchkey-keys",
			},
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				d := deployment(t, objs)
				found := false
				for _, v := range d.Spec.Template.Spec.Volumes {
					if v.Name == "data" && v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "rel-latchkey-data" {
						found = true
					}
				}
				if !found || !slices.Contains(kinds(objs), "PersistentVolumeClaim/rel-latchkey-data") {
					t.Errorf("no persistent data volume: %v", kinds(objs))
				}
				if d.Spec.Template.Spec.ServiceAccountName != "default" || slices.Contains(kinds(objs), "ServiceAccount/rel-latchkey") {
					t.Errorf("service account %q", d.Spec.Template.Spec.ServiceAccountName)
				}
			},
		},
		{
			name:  "HTTPRoute under a path, CA bundle inline, extra env and volumes, helm test for a Project, restricted HTTP port",
			files: []string{"features-values.yaml"},
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				d := deployment(t, objs)
				c := d.Spec.Template.Spec.Containers[0]
				if v, _ := arg(c, "--ca-bundle="); v != "/etc/latchkey/ca/ca.crt" {
					t.Errorf("--ca-bundle=%s", v)
				}
				if v := volume(d, "ca-bundle"); v == nil || v.ConfigMap == nil || v.ConfigMap.Name != "rel-latchkey-ca-bundle" {
					t.Errorf("ca-bundle volume %+v", v)
				}
				if d.Spec.Template.Annotations["checksum/ca-bundle"] == "" {
					t.Error("no checksum/ca-bundle: a changed bundle would not restart the pods that read it at start")
				}
				if volume(d, "scratch") == nil || !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/scratch" }) ||
					!slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "TZ" }) {
					t.Errorf("extra volume, mount or env missing: %+v %+v", c.VolumeMounts, c.Env)
				}
				for _, want := range []string{"HTTPRoute/rel-latchkey", "ConfigMap/rel-latchkey-ca-bundle", "Pod/rel-latchkey-test-issuer"} {
					if !slices.Contains(kinds(objs), want) {
						t.Errorf("%s not rendered (have %v)", want, kinds(objs))
					}
				}
				p := testPod(t, objs)
				if !slices.Contains(p.Spec.Containers[0].Args, "team/demo") || p.Spec.Containers[0].Image != c.Image {
					t.Errorf("test Pod %+v: want the server's image checking team/demo", p.Spec.Containers[0])
				}
				// The Service must never send people's requests to the test Pod.
				if sel := labels.SelectorFromSet(map[string]string{"app.kubernetes.io/name": "latchkey", "app.kubernetes.io/instance": "rel"}); sel.Matches(labels.Set(p.Labels)) {
					t.Errorf("the test Pod's labels %v match the server's selector", p.Labels)
				}
				np := object(t, objs, "NetworkPolicy")
				from, _, _ := unstructured.NestedSlice(np.Object, "spec", "ingress")
				if !strings.Contains(fmt.Sprint(from), "latchkey-test") {
					t.Errorf("the NetworkPolicy does not admit the test Pod: %v", from)
				}
			},
		},
		{
			name: "admin API with a certificate you bring (cert-manager)",
			values: []string{"publicURL=https://latchkey.example.com", "adminAPI.tls.existingSecret=admin-cert",
				"adminAPI.tls.caBundle=company-ca-pem"},
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				d := deployment(t, objs)
				c := d.Spec.Template.Spec.Containers[0]
				if v, _ := arg(c, "--admin-tls-cert-file="); v != "/etc/latchkey/admin-tls/tls.crt" {
					t.Errorf("--admin-tls-cert-file=%s", v)
				}
				if _, ok := arg(c, "--admin-tls-secret="); ok {
					t.Error("--admin-tls-secret with a certificate brought in")
				}
				if v := volume(d, "admin-tls"); v == nil || v.Secret == nil || v.Secret.SecretName != "admin-cert" {
					t.Errorf("admin-tls volume %+v", v)
				}
				if b, _, _ := unstructured.NestedString(object(t, objs, "APIService").Object, "spec", "caBundle"); b != "Y29tcGFueS1jYS1wZW0=" {
					t.Errorf("APIService caBundle %q, want adminAPI.tls.caBundle", b)
				}
				if slices.Contains(kinds(objs), "Role/rel-latchkey-admin-serving") || slices.Contains(kinds(objs), "ClusterRole/rel-latchkey-admin-apiservice") {
					t.Error("the operator is granted to keep a certificate it does not keep")
				}
			},
		},
		{
			name:  "SQLite on an emptyDir, CA bundle from a Secret",
			files: []string{"ephemeral-values.yaml"},
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				d := deployment(t, objs)
				if v := volume(d, "data"); v == nil || v.EmptyDir == nil || slices.Contains(kinds(objs), "PersistentVolumeClaim/rel-latchkey-data") {
					t.Errorf("data volume %+v with persistence off", v)
				}
				if v := volume(d, "ca-bundle"); v == nil || v.Secret == nil || v.Secret.SecretName != "company-ca" {
					t.Errorf("ca-bundle volume %+v", v)
				}
				if v, _ := arg(d.Spec.Template.Spec.Containers[0], "--ca-bundle="); v != "/etc/latchkey/ca/bundle.pem" {
					t.Errorf("--ca-bundle=%s", v)
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"template", "rel", chart, "--namespace", "latchkey", "--include-crds", "--kube-version", kubeVersion}
			for _, f := range c.files {
				args = append(args, "-f", filepath.Join(chart, "ci", f))
			}
			for _, v := range c.values {
				args = append(args, "--set", v)
			}
			out, err := helm(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			objs := objects(t, out)
			// The operator creates the keys Secret; a render never holds key material.
			for _, o := range objs {
				if o.GetKind() == "Secret" {
					t.Errorf("Secret %s rendered: the chart must not render key material", o.GetName())
				}
			}
			hardened(t, deployment(t, objs))
			c.check(t, objs)
			dryRun(t, out)
		})
	}

	// What an administrator gets wrong must stop the render with a message saying what to do.
	for _, c := range []struct {
		name   string
		values []string
		want   string
	}{
		{"three replicas on SQLite", []string{"publicURL=https://a.example", "replicaCount=3"}, "replicaCount=3 needs PostgreSQL: set database.existingSecret"},
		{"no public URL", nil, "publicURL is required"},
		{"plain http", []string{"publicURL=http://a.example"}, "must be an https:// URL"},
		{"password in database.url", []string{"publicURL=https://a.example", "database.url=postgres://latchkey:hunter2@db/latchkey"}, "must not carry a password"},
		{"replicas without leader election", []string{"publicURL=https://a.example", "replicaCount=2", "database.existingSecret=db", "leaderElection.enabled=false"}, "needs leaderElection.enabled"},
		{"no key at all", []string{"publicURL=https://a.example", "keys.generate=false"}, "keys.existingSecret is required"},
		{"an HTTPRoute attached to nothing", []string{"publicURL=https://a.example", "httpRoute.enabled=true"}, "httpRoute.parentRefs is required"},
		{"admin certificate without its CA", []string{"publicURL=https://a.example", "adminAPI.tls.existingSecret=admin-cert"}, "adminAPI.tls.caBundle is required"},
		{"two CA bundles", []string{"publicURL=https://a.example", "caBundle.existingSecret=a", "caBundle.existingConfigMap=b"}, "set only one of pem, existingConfigMap and existingSecret"},
	} {
		t.Run("refused: "+c.name, func(t *testing.T) {
			args := []string{"template", "rel", chart, "--kube-version", kubeVersion}
			for _, v := range c.values {
				args = append(args, "--set", v)
			}
			_, err := helm(t, args...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("render: %v; want it refused with %q", err, c.want)
			}
		})
	}
}

func TestKustomize(t *testing.T) {
	skip(t)
	for _, dir := range []string{"default", "postgres", "prometheus"} {
		t.Run(dir, func(t *testing.T) {
			out, err := kubectl(t, "", "kustomize", filepath.Join(root, "config", dir))
			if err != nil {
				t.Fatal(err)
			}
			objs := objects(t, out)
			if dir != "prometheus" {
				d := deployment(t, objs)
				hardened(t, d)
				v, _ := arg(d.Spec.Template.Spec.Containers[0], "--leader-elect=")
				if want := map[string]string{"default": "false", "postgres": "true"}[dir]; v != want {
					t.Errorf("--leader-elect=%s, want %s", v, want)
				}
				for _, want := range []string{"ClusterRole/latchkey-admin", "ClusterRole/latchkey-tenant", "NetworkPolicy/latchkey", "PodDisruptionBudget/latchkey"} {
					if !slices.Contains(kinds(objs), want) {
						t.Errorf("%s not rendered (have %v)", want, kinds(objs))
					}
				}
			}
			dryRun(t, out)
		})
	}
}

// A Project with an absurd lifetime is refused by the API server with a message naming the
// field, before any controller sees it.
func TestAbsurdLifetimesRefused(t *testing.T) {
	skip(t)
	project := func(lifetimes map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "latchkey.dev/v1alpha1",
			"kind":       "Project",
			"metadata":   map[string]any{"generateName": "p-", "namespace": "team"},
			"spec": map[string]any{
				"signIn":    map[string]any{"passwordSecretRef": map[string]any{"name": "people", "key": "people.yaml"}},
				"lifetimes": lifetimes,
			},
		}}
		return u
	}
	ctx := context.Background()
	if err := k8s.Create(ctx, project(map[string]any{"accessToken": "2h", "link": "45m"}), client.DryRunAll); err != nil {
		t.Fatalf("a sensible Project is refused: %v", err)
	}
	for _, c := range []struct {
		field, value string
	}{
		{"accessToken", "8760h"},
		{"accessToken", "0s"},
		{"accessToken", "-1h"},
		{"refreshToken", "99999999999999h"},
		{"refreshToken", "forever"},
		{"session", "1e9h"},
		{"recentSignIn", "9999h"},
		{"authCode", "1h"},
		{"refreshGrace", "24h"},
		{"link", "1s"},
		{"callbackState", "720h"},
		{"link", ""},
		{"session", "5m 5m"},
	} {
		t.Run(c.field+"="+c.value, func(t *testing.T) {
			err := k8s.Create(ctx, project(map[string]any{c.field: c.value}), client.DryRunAll)
			if !apierrors.IsInvalid(err) {
				t.Fatalf("create: %v; want the API server to refuse it as Invalid", err)
			}
			if !strings.Contains(err.Error(), "lifetimes") {
				t.Errorf("the refusal does not name the field: %v", err)
			}
		})
	}
}

// serviceMonitorCRD is a stand-in for the Prometheus Operator's CRD, so the chart's optional
// ServiceMonitor can be applied: it checks the group, version and kind exist, not the fields.
func serviceMonitorCRD() *apiextensionsv1.CustomResourceDefinition {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal([]byte(`
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: servicemonitors.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {plural: servicemonitors, singular: servicemonitor, kind: ServiceMonitor, listKind: ServiceMonitorList}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              x-kubernetes-preserve-unknown-fields: true
`), &crd); err != nil {
		panic(err)
	}
	return &crd
}

//go:build !latchkey_local

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"latchkey.dev/latchkey/internal/devcerts"
)

// runCluster is `make run`: a control plane from envtest, config/samples applied to it, and
// bin/latchkey reading them through the Kubernetes API. The build `make run-local` makes leaves
// it out (cluster_local.go), with envtest and the clients it links.
func runCluster(ctx context.Context, o options, state, listen string) error {
	assets, err := controlPlaneBinaries(ctx)
	if err != nil {
		return err
	}

	// The control plane is new on every run, so are the certificates that let it aggregate
	// the admin API.
	aggDir := filepath.Join(state, "aggregation")
	if err := os.MkdirAll(aggDir, 0o700); err != nil {
		return err
	}
	agg, err := devcerts.NewAggregation(aggDir)
	if err != nil {
		return err
	}

	say("starting etcd and kube-apiserver (a few seconds)")
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{"config/crd/bases"},
		ErrorIfCRDPathMissing: true,
	}
	agg.Configure(env)
	if _, err := env.Start(); err != nil {
		_ = env.Stop()
		return fmt.Errorf("control plane: %w", err)
	}
	defer func() {
		say("stopping the control plane")
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the control plane: %v\n", err)
		}
	}()
	say("installed %d CRDs from config/crd/bases", len(env.CRDs))

	admin, err := env.AddUser(envtest.User{Name: "latchkey-dev", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("admin user: %w", err)
	}
	kubeconfigBytes, err := admin.KubeConfig()
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(state, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kubeconfigBytes, 0o600); err != nil {
		return err
	}

	cl, err := client.New(admin.Config(), client.Options{})
	if err != nil {
		return err
	}
	objs, err := readManifests("config/samples")
	if err != nil {
		return err
	}
	say("applying %d objects from config/samples", len(objs))
	for _, u := range objs {
		if err := cl.Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
			client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("apply %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
		}
	}
	issuers := issuersOf(objs, strings.TrimSuffix(o.publicURL, "/"))
	if len(issuers) == 0 {
		return errors.New("config/samples declares no Project, so there is nothing to serve")
	}

	stopGitHub, err := startFakeGitHub() //nolint:contextcheck // its stop function shuts down after ctx has ended
	if err != nil {
		return err
	}
	defer stopGitHub()
	stopServices, err := startDemoServices(issuers[0]) //nolint:contextcheck // as the fake GitHub's
	if err != nil {
		return err
	}
	defer stopServices()

	logPath := filepath.Join(state, "latchkey.log")
	srv, err := startLatchkey(o, logPath,
		"--kubeconfig", kubeconfig,
		"--database", "sqlite:"+filepath.Join(state, "latchkey.db"),
		"--public-url", o.publicURL,
		"--listen", listen,
		"--metrics-listen", "127.0.0.1:9090",
		"--log-format", "text",
		// The front-proxy CA and names are read from kube-system/extension-apiserver-authentication,
		// as in a cluster.
		"--admin-bind-address", adminAddr,
		"--admin-tls-cert-file", agg.ServingCert,
		"--admin-tls-key-file", agg.ServingKy,
	)
	if err != nil {
		return err
	}
	defer srv.stop()

	creds := func(ctx context.Context) (string, string, error) {
		var sec corev1.Secret
		err := cl.Get(ctx, client.ObjectKey{Namespace: demoNamespace, Name: repoHelperSecret}, &sec)
		return string(sec.Data["client_id"]), string(sec.Data["client_secret"]), err
	}
	// A ServiceAccount token in place of a client secret (docs/workload-identity.md).
	workloadCmd, err := setUpWorkloadDemo(ctx, admin.Config(), issuers[0], state)
	if err != nil {
		return err
	}
	var tenantKubeconfig string
	setUpAdmin := func() (err error) {
		tenantKubeconfig, err = setUpAdminAPI(ctx, env, cl, agg, admin.Config(), state)
		return err
	}
	return serveDemo(ctx, srv, issuers, logPath, creds, setUpAdmin, func() {
		fmt.Printf("kubeconfig: %s\n", kubeconfig)
	}, func() {
		fmt.Printf("resources:  bin/k8s/kubectl --kubeconfig %s get projects,oauthclients,connectors,redirectpolicies -A\n", kubeconfig)
		fmt.Printf("admin API:  bin/kubectl-latchkey --kubeconfig %s -n %s people   (walkthrough in docs/admin.md)\n", kubeconfig, demoNamespace)
		fmt.Printf("            tenant admin of %s only: --kubeconfig %s\n", demoNamespace, tenantKubeconfig)
		fmt.Printf("workload:   %s\n", workloadCmd)
		fmt.Println("            (a ServiceAccount token instead of a client secret; docs/workload-identity.md)")
	}, fmt.Sprintf("bin/k8s/kubectl --kubeconfig %s -n %s get secret %s -o jsonpath='{.data.client_secret}' | base64 -d",
		kubeconfig, demoNamespace, repoHelperSecret))
}

// controlPlaneBinaries returns the directory holding etcd and kube-apiserver, building them with
// hack/control-plane.sh when KUBEBUILDER_ASSETS does not already point at them.
func controlPlaneBinaries(ctx context.Context) (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err == nil {
			return dir, nil
		}
	}
	say("checking etcd, kube-apiserver and kubectl (the first build from source takes about 10 minutes on 2 cores; later runs take seconds)")
	cmd := exec.CommandContext(ctx, "hack/control-plane.sh")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/control-plane.sh: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

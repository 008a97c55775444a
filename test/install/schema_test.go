package install_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"latchkey.dev/latchkey/internal/testenv"
)

// schemaRefusal is how Helm starts the error when values.schema.json rejects the values.
const schemaRefusal = "values don't meet the specifications of the schema"

// TestValuesSchema plays an administrator with a typo in their values. Without a schema Helm
// renders a misspelled key as if it were absent: `replicaCont: 3` installs one replica,
// `ingress: {enabeld: true}` installs no Ingress, and nobody is told. values.schema.json makes
// every such install fail with the key's path, while every value set the chart documents, and
// anything passed through to Kubernetes as written, still renders.
//
// It needs only Helm; the `helm install` case also needs the API server TestMain starts.
func TestValuesSchema(t *testing.T) {
	testenv.SkipShort(t, "Helm, built from hack/tools")
	chart := filepath.Join(root, "charts", "latchkey")
	render := func(t *testing.T, values []string, extra ...string) error {
		t.Helper()
		args := append([]string{"template", "rel", chart, "--namespace", "latchkey", "--kube-version", kubeVersion}, extra...)
		for _, v := range values {
			args = append(args, "--set", v)
		}
		_, err := helm(t, args...)
		return err
	}

	// The value sets `make chart-lint` and TestChart render, and values passed through to
	// Kubernetes, which the schema leaves to the API server.
	for _, c := range []struct {
		name   string
		values []string
	}{
		{"defaults", []string{"publicURL=https://latchkey.example.com"}},
		{"PostgreSQL, three replicas, ingress, ServiceMonitor, egress policy", []string{
			"publicURL=https://latchkey.example.com", "replicaCount=3",
			"database.existingSecret=latchkey-db", "keys.existingSecret=latchkey-keys",
			"ingress.enabled=true", "ingress.className=nginx", "ingress.tls.secretName=latchkey-tls",
			"metrics.serviceMonitor.enabled=true", "networkPolicy.egress.enabled=true",
			"rbac.aggregateToDefaultRoles=true", "leaderElection.enabled=true",
		}},
		{"SQLite on a volume", []string{"publicURL=https://latchkey.example.com", "persistence.enabled=true", "persistence.size=5Gi"}},
		{"pass-through to Kubernetes", []string{
			"publicURL=https://latchkey.example.com", "resources.limits.cpu=2", "resources.limits.memory=1Gi",
			"podAnnotations.example\\.com/team=identity", "nodeSelector.kubernetes\\.io/arch=arm64",
			"tolerations[0].key=dedicated", "tolerations[0].operator=Exists",
			"affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=zone",
			"podSecurityContext.runAsUser=1000", "podDisruptionBudget.maxUnavailable=50%",
			"global.imageRegistry=registry.example",
		}},
	} {
		t.Run("renders: "+c.name, func(t *testing.T) {
			if err := render(t, c.values); err != nil {
				t.Fatal(err)
			}
		})
	}

	// A values file, the way most administrators write them.
	valuesFile := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(valuesFile, []byte("publicURL: https://latchkey.example.com\ningress:\n  enable: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		values []string
		extra  []string
		want   string
	}{
		{"misspelled top-level key", []string{"replicaCont=3"}, nil, "at '': additional properties 'replicaCont' not allowed"},
		{"misspelled nested key", []string{"ingress.enabeld=true"}, nil, "at '/ingress': additional properties 'enabeld' not allowed"},
		{"misspelled key two levels down", []string{"metrics.serviceMonitor.enable=true"}, nil,
			"at '/metrics/serviceMonitor': additional properties 'enable' not allowed"},
		{"misspelled key in a values file", nil, []string{"-f", valuesFile}, "at '/ingress': additional properties 'enable' not allowed"},
		{"wrong type", []string{"replicaCount=three"}, nil, "at '/replicaCount': got string, want integer"},
		{"a choice not offered", []string{"logFormat=xml"}, nil, "at '/logFormat': value must be one of 'json', 'text'"},
		{"not a duration", []string{"gcInterval=5 minutes"}, nil, "at '/gcInterval': '5 minutes' does not match pattern"},
		{"a Project without its namespace", []string{"tests.projects={demo}"}, nil, "at '/tests/projects/0': 'demo' does not match pattern"},
		{"a CA bundle that is not PEM", []string{"caBundle.pem=MIIBdzCCAR2g"}, nil, "at '/caBundle/pem': 'MIIBdzCCAR2g' does not match pattern"},
		{"a misspelled HTTPRoute key", []string{"httpRoute.parentRef[0].name=public"}, nil, "at '/httpRoute': additional properties 'parentRef' not allowed"},
	} {
		t.Run("refused: "+c.name, func(t *testing.T) {
			err := render(t, append([]string{"publicURL=https://latchkey.example.com"}, c.values...), c.extra...)
			if err == nil || !strings.Contains(err.Error(), schemaRefusal) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("render: %v; want it refused by the schema with %q", err, c.want)
			}
		})
	}

	// `helm install` validates the same way before it sends anything: no release is recorded.
	t.Run("refused: helm install with a misspelled value", func(t *testing.T) {
		skip(t)
		_, err := helm(t, "install", "typo", chart, "--kubeconfig", kubeconfig, "--namespace", "latchkey",
			"--set", "publicURL=https://latchkey.example.com", "--set", "keys.existingSecret=latchkey-keys",
			"--set", "ingress.enabeld=true")
		if err == nil || !strings.Contains(err.Error(), schemaRefusal) ||
			!strings.Contains(err.Error(), "additional properties 'enabeld' not allowed") {
			t.Fatalf("install: %v; want it refused by the schema", err)
		}
		var release corev1.Secret
		err = k8s.Get(context.Background(), client.ObjectKey{Namespace: "latchkey", Name: "sh.helm.release.v1.typo.v1"}, &release)
		if !apierrors.IsNotFound(err) {
			t.Fatalf("release record after a refused install: %v", err)
		}
	})
}

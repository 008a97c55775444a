package admission_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"latchkey.dev/latchkey/config/crd"
	"latchkey.dev/latchkey/internal/admission"
	"latchkey.dev/latchkey/internal/testenv"
)

func admitter(t *testing.T) *admission.Admitter {
	t.Helper()
	bases, err := fs.Sub(crd.Bases, "bases")
	if err != nil {
		t.Fatal(err)
	}
	a, err := admission.New(bases)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func obj(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// refusals are objects the API server refuses, each for one reason the CRDs state: a CEL rule,
// a required field, an enum, an unknown field, a pattern, a name.
var refusals = []struct {
	name string
	doc  string
	// want are parts of the message, as the API server words them.
	want []string
}{
	{
		name: "CEL rule: signIn needs a method",
		doc: `apiVersion: latchkey.dev/v1alpha1
kind: Project
metadata: {name: p, namespace: ns}
spec:
  signIn: {}
`,
		want: []string{`Project.latchkey.dev "p" is invalid`, "spec.signIn", "signIn must set passwordSecretRef, oidc, or both"},
	},
	{
		name: "required field",
		doc: `apiVersion: latchkey.dev/v1alpha1
kind: Connector
metadata: {name: c, namespace: ns}
spec:
  projectRef: {name: p}
  clientID: x
`,
		want: []string{`Connector.latchkey.dev "c" is invalid`, "clientID and clientSecretRef are required unless apiKey is set"},
	},
	{
		name: "enum",
		doc: `apiVersion: latchkey.dev/v1alpha1
kind: OAuthClient
metadata: {name: c, namespace: ns}
spec:
  projectRef: {name: p}
  redirectURIs: [https://app.example.com/cb]
  tokenEndpointAuthMethod: tls_client_auth
`,
		want: []string{`OAuthClient.latchkey.dev "c" is invalid`, `spec.tokenEndpointAuthMethod: Unsupported value: "tls_client_auth"`, `"client_secret_basic"`},
	},
	{
		name: "unknown field",
		doc: `apiVersion: latchkey.dev/v1alpha1
kind: RedirectPolicy
metadata: {name: r, namespace: ns}
spec:
  projectRef: {name: p}
  onlyRecognizedApps: true
`,
		want: []string{`unknown field "spec.onlyRecognizedApps"`},
	},
	{
		name: "lifetime out of range (CEL)",
		doc: `apiVersion: latchkey.dev/v1alpha1
kind: Project
metadata: {name: p, namespace: ns}
spec:
  signIn: {passwordSecretRef: {name: s, key: k}}
  lifetimes: {link: 48h}
`,
		want: []string{"spec.lifetimes.link", "lifetimes.link must be between 1m and 24h"},
	},
	{
		name: "name not a DNS subdomain",
		doc: `apiVersion: latchkey.dev/v1alpha1
kind: RedirectPolicy
metadata: {name: Not_A_Name, namespace: ns}
spec:
  projectRef: {name: p}
`,
		want: []string{"metadata.name: Invalid value"},
	},
}

func TestAdmitRefusesWhatTheCRDRefuses(t *testing.T) {
	a := admitter(t)
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			err := a.Admit(context.Background(), obj(t, tc.doc))
			if err == nil {
				t.Fatal("admitted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

func TestAdmitDefaultsAndDropsStatus(t *testing.T) {
	a := admitter(t)
	u := obj(t, `apiVersion: latchkey.dev/v1alpha1
kind: Project
metadata: {name: p, namespace: ns}
spec:
  signIn: {passwordSecretRef: {name: s, key: k}}
  lifetimes: {link: 10m}
status:
  issuer: https://forged.example
`)
	if err := a.Admit(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	if _, ok := u.Object["status"]; ok {
		t.Error("status kept: a status subresource is written only by its controller")
	}
	if u.GetGeneration() != 1 {
		t.Errorf("generation = %d, want 1", u.GetGeneration())
	}
	got, _, _ := unstructured.NestedString(u.Object, "spec", "lifetimes", "recentSignIn")
	if got != "15m" {
		t.Errorf("spec.lifetimes.recentSignIn = %q, want the CRD's default 15m", got)
	}
}

// TestAdmitMatchesTheAPIServer creates every refused object through a real kube-apiserver with
// the same CRDs and compares the messages word for word, and the defaults of an admitted one.
func TestAdmitMatchesTheAPIServer(t *testing.T) {
	testenv.SkipShort(t, "a kube-apiserver and etcd (envtest)")
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("KUBEBUILDER_ASSETS is not set")
		}
		t.Skip("KUBEBUILDER_ASSETS is not set: run hack/control-plane.sh")
	}
	env := &envtest.Environment{CRDDirectoryPaths: []string{"../../config/crd/bases"}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	k8s, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := obj(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: ns}\n")
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	a := admitter(t)
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			ours := a.Admit(ctx, obj(t, tc.doc))
			theirs := k8s.Create(ctx, obj(t, tc.doc), client.FieldValidation("Strict"))
			if ours == nil || theirs == nil {
				t.Fatalf("admission: %v; API server: %v", ours, theirs)
			}
			if apierrors.ReasonForError(ours) != apierrors.ReasonForError(theirs) {
				t.Errorf("reason %s, the API server's %s", apierrors.ReasonForError(ours), apierrors.ReasonForError(theirs))
			}
			if ours.Error() != theirs.Error() {
				t.Errorf("messages differ:\nadmission:  %s\nAPI server: %s", ours, theirs)
			}
		})
	}
	t.Run("defaults", func(t *testing.T) {
		doc := `apiVersion: latchkey.dev/v1alpha1
kind: Project
metadata: {name: defaults, namespace: ns}
spec:
  signIn: {passwordSecretRef: {name: s, key: k}}
  lifetimes: {link: 10m}
  registration: {}
`
		ours := obj(t, doc)
		if err := a.Admit(ctx, ours); err != nil {
			t.Fatal(err)
		}
		theirs := obj(t, doc)
		if err := k8s.Create(ctx, theirs); err != nil {
			t.Fatal(err)
		}
		o, _ := yaml.Marshal(ours.Object["spec"])
		s, _ := yaml.Marshal(theirs.Object["spec"])
		if !bytes.Equal(o, s) {
			t.Errorf("spec after admission:\n%s\nafter the API server:\n%s", o, s)
		}
	})
}

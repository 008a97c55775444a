//go:build !latchkey_local

package controllers

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
)

// These run without a control plane.

const aliceHash = "$2a$10$5ai4.gQFC2HTMrdNoweK0eV.EidIA5.eyvrOffs4Ao4TM7P23dxoe"

func TestParsePasswordFile(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []string // lower-cased emails
		wantErr string
	}{
		{"yaml", "- email: Alice@Example.com\n  name: Alice\n  hash: " + aliceHash + "\n", []string{"alice@example.com"}, ""},
		{"json", `[{"email":"bob@example.com","hash":"$argon2id$v=19$m=65536,t=3,p=4$c2FsdA$aGFzaA"}]`, []string{"bob@example.com"}, ""},
		{"empty list", "[]", nil, ""},
		{"plain password", "- email: a@example.com\n  hash: hunter2\n", nil, "entry 1 (a@example.com): hash must be bcrypt"},
		{"truncated bcrypt", "- email: a@example.com\n  hash: $2a$10$short\n", nil, "hash must be bcrypt"},
		{"not an email", "- email: alice\n  hash: " + aliceHash + "\n", nil, `entry 1: email "alice" is not an email address`},
		{"duplicate, any case", "- {email: a@example.com, hash: \"" + aliceHash + "\"}\n- {email: A@example.com, hash: \"" + aliceHash + "\"}\n", nil, "entry 2: email A@example.com appears more than once"},
		{"unknown field", "- email: a@example.com\n  password: hunter2\n  hash: " + aliceHash + "\n", nil, "not a YAML or JSON list"},
		{"not a list", "email: a@example.com\n", nil, "not a YAML or JSON list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parsePasswordFile([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Fatalf("error quotes the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d people, want %d", len(got), len(tt.want))
			}
			for _, e := range tt.want {
				if _, ok := got[e]; !ok {
					t.Errorf("no entry for %s", e)
				}
			}
		})
	}
}

func testECKeyPEM(t *testing.T) []byte {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

func TestParseSigningKeys(t *testing.T) {
	ec := testECKeyPEM(t)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	der384, _ := x509.MarshalECPrivateKey(p384)
	weakRSA, _ := rsa.GenerateKey(rand.Reader, 1024)

	keys, err := parseSigningKeys(map[string][]byte{"2026-01.pem": ec, "2026-07.pem": ec})
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0].ID != "2026-07.pem" || keys[1].ID != "2026-01.pem" || keys[0].Algorithm != "ES256" {
		t.Fatalf("keys = %+v; the name that sorts last must come first", keys)
	}

	for name, data := range map[string]map[string][]byte{
		"empty":      {},
		"not pem":    {"k": []byte("hello")},
		"P-384":      {"k": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der384})},
		"weak RSA":   {"k": pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(weakRSA)})},
		"public key": {"k": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte{1}})},
	} {
		if _, err := parseSigningKeys(data); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestMergeRedirectRules(t *testing.T) {
	policy := func(b *v1alpha1.Builtins, only bool, named ...v1alpha1.RecognisedRedirect) *v1alpha1.RedirectPolicy {
		return &v1alpha1.RedirectPolicy{Spec: v1alpha1.RedirectPolicySpec{Builtins: b, OnlyRecognisedApps: only, Recognised: named}}
	}
	off := &v1alpha1.Builtins{Claude: ptr.To(false), ChatGPT: ptr.To(false), Loopback: ptr.To(false), AppSchemes: ptr.To(false)}
	portal := v1alpha1.RecognisedRedirect{Name: "Portal", URI: "https://portal.example/{tenant}/cb"}
	wiki := v1alpha1.RecognisedRedirect{Name: "Wiki", URI: "https://wiki.example/cb"}

	tests := []struct {
		name     string
		policies []*v1alpha1.RedirectPolicy
		want     config.RedirectRules
	}{
		{"no policy", nil, config.DefaultRedirectRules()},
		{"builtins default to on", []*v1alpha1.RedirectPolicy{policy(nil, false)}, config.DefaultRedirectRules()},
		{"all off", []*v1alpha1.RedirectPolicy{policy(off, true)}, config.RedirectRules{OnlyRecognisedApps: true}},
		{"any policy enabling a builtin wins", []*v1alpha1.RedirectPolicy{
			policy(off, false), policy(&v1alpha1.Builtins{Claude: ptr.To(true), ChatGPT: ptr.To(false), Loopback: ptr.To(false), AppSchemes: ptr.To(false)}, false),
		}, config.RedirectRules{Claude: true}},
		{"named entries are a union; strict if any is", []*v1alpha1.RedirectPolicy{
			policy(off, false, wiki, portal), policy(off, true, portal),
		}, config.RedirectRules{OnlyRecognisedApps: true, Named: []config.NamedRedirect{
			{Name: "Portal", Pattern: "https://portal.example/{tenant}/cb"}, {Name: "Wiki", Pattern: "https://wiki.example/cb"},
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mergeRedirectRules("", tt.policies)
			if got.Claude != tt.want.Claude || got.ChatGPT != tt.want.ChatGPT || got.Loopback != tt.want.Loopback ||
				got.AppSchemes != tt.want.AppSchemes || got.OnlyRecognisedApps != tt.want.OnlyRecognisedApps ||
				len(got.Named) != len(tt.want.Named) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			for i := range got.Named {
				if got.Named[i] != tt.want.Named[i] {
					t.Fatalf("named[%d] = %+v, want %+v", i, got.Named[i], tt.want.Named[i])
				}
			}
		})
	}
}

func TestLifetimes(t *testing.T) {
	if got := lifetimes(nil); got != config.DefaultLifetimes() {
		t.Errorf("nil: %+v", got)
	}
	got := lifetimes(&v1alpha1.Lifetimes{RecentSignIn: &metav1.Duration{Duration: 5 * time.Minute}})
	want := config.DefaultLifetimes()
	want.RecentSignIn = 5 * time.Minute
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestConnectorKeyAndAudience(t *testing.T) {
	if k := connectorKey("github", "team"); k.String() != "team/github" {
		t.Errorf("connectorKey = %s", k)
	}
	if k := connectorKey("shared/github", "team"); k.String() != "shared/github" {
		t.Errorf("connectorKey = %s", k)
	}
	c := &v1alpha1.Connector{ObjectMeta: metav1.ObjectMeta{Name: "gh"}, Spec: v1alpha1.ConnectorSpec{Preset: v1alpha1.PresetGitHub}}
	if a := connectorAudience(c); a != "github" {
		t.Errorf("preset audience = %s", a)
	}
	c.Spec.Preset = ""
	if a := connectorAudience(c); a != "gh" {
		t.Errorf("generic audience = %s", a)
	}
	c.Spec.Audience = "https://api.example"
	if a := connectorAudience(c); a != "https://api.example" {
		t.Errorf("explicit audience = %s", a)
	}
}

// TestCacheTransform: what the cache keeps of an object. Managed fields and kubectl's copy of
// the applied object go from every kind; the data of Secret types Latchkey never reads goes too,
// while an Opaque Secret's data and other annotations stay.
func TestCacheTransform(t *testing.T) {
	opts := CacheOptions()
	var secretTransform toolscache.TransformFunc
	for obj, bo := range opts.ByObject {
		if _, ok := obj.(*corev1.Secret); ok {
			secretTransform = bo.Transform
		}
	}
	if secretTransform == nil || opts.DefaultTransform == nil {
		t.Fatal("no transforms")
	}
	annotations := func() map[string]string {
		return map[string]string{lastAppliedAnnotation: `{"data":{"client_secret":"c2VjcmV0"}}`, "note": "kept"}
	}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Annotations: annotations(),
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate}}}
	}

	opaque := &corev1.Secret{ObjectMeta: meta("creds"), Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"client_secret": []byte("secret")}}
	original := opaque.Annotations
	out, err := secretTransform(opaque)
	if err != nil {
		t.Fatal(err)
	}
	s := out.(*corev1.Secret)
	if _, ok := s.Annotations[lastAppliedAnnotation]; ok || s.Annotations["note"] != "kept" || s.ManagedFields != nil || string(s.Data["client_secret"]) != "secret" {
		t.Errorf("Opaque Secret kept as %+v", s)
	}
	if _, ok := original[lastAppliedAnnotation]; !ok {
		t.Error("the transform changed the annotation map it was given in place")
	}

	helm := &corev1.Secret{ObjectMeta: meta("sh.helm.release.v1.app.v1"), Type: "helm.sh/release.v1", Data: map[string][]byte{"release": []byte("large")}}
	out, _ = secretTransform(helm)
	if s := out.(*corev1.Secret); s.Data != nil || s.Annotations[lastAppliedAnnotation] != "" {
		t.Errorf("Helm release Secret kept as %+v", s)
	}

	oc := &v1alpha1.OAuthClient{ObjectMeta: meta("agent")}
	out, _ = opts.DefaultTransform(oc)
	if o := out.(*v1alpha1.OAuthClient); o.Annotations[lastAppliedAnnotation] != "" || o.Annotations["note"] != "kept" || o.ManagedFields != nil {
		t.Errorf("OAuthClient kept as %+v", o.ObjectMeta)
	}
}

// TestMergeRedirectRulesForeign: a policy from another namespace only narrows (decision 0020).
func TestMergeRedirectRulesForeign(t *testing.T) {
	policy := func(ns string, b *v1alpha1.Builtins, only bool, named ...v1alpha1.RecognisedRedirect) *v1alpha1.RedirectPolicy {
		p := &v1alpha1.RedirectPolicy{Spec: v1alpha1.RedirectPolicySpec{Builtins: b, OnlyRecognisedApps: only, Recognised: named}}
		p.Namespace = ns
		return p
	}
	evil := v1alpha1.RecognisedRedirect{Name: "Evil", URI: "https://evil.example/cb"}
	loopbackOff := &v1alpha1.Builtins{Loopback: ptr.To(false)}
	tests := []struct {
		name     string
		policies []*v1alpha1.RedirectPolicy
		want     config.RedirectRules
	}{
		{"foreign alone: its entries ignored, the defaults stay", []*v1alpha1.RedirectPolicy{policy("team", nil, false, evil)}, config.DefaultRedirectRules()},
		{"foreign cannot turn a built-in back on", []*v1alpha1.RedirectPolicy{policy("home", loopbackOff, false), policy("team", nil, false)},
			config.RedirectRules{Claude: true, ChatGPT: true, AppSchemes: true}},
		{"foreign turns a built-in off and onlyRecognisedApps on", []*v1alpha1.RedirectPolicy{policy("home", nil, false), policy("team", loopbackOff, true)},
			config.RedirectRules{Claude: true, ChatGPT: true, AppSchemes: true, OnlyRecognisedApps: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mergeRedirectRules("home", tt.policies)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			for _, p := range tt.policies {
				if p.Namespace != "home" && len(p.Spec.Recognised) > 0 && !slices.Contains(foreignIgnored(p, got), "spec.recognised") {
					t.Errorf("foreignIgnored(%s) = %v", p.Namespace, foreignIgnored(p, got))
				}
			}
		})
	}
}

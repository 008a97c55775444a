package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestReadManifestsOrder(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"a_client.yaml": "apiVersion: latchkey.dev/v1alpha1\nkind: OAuthClient\nmetadata: {name: c, namespace: demo}\n",
		"b_multi.yaml": "---\napiVersion: latchkey.dev/v1alpha1\nkind: Project\nmetadata: {name: p, namespace: demo}\n" +
			"---\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: demo}\n",
		"kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [a_client.yaml]\n",
		"notes.txt":          "not a manifest",
		"sub/ns.yml":         "apiVersion: v1\nkind: Namespace\nmetadata: {name: demo}\n",
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	objs, err := readManifests(dir)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind())
	}
	if want := []string{"Namespace", "Secret", "Project", "OAuthClient"}; !slices.Equal(kinds, want) {
		t.Fatalf("apply order = %v, want %v", kinds, want)
	}
	if got := issuersOf(objs, "http://127.0.0.1:8080"); !slices.Equal(got, []string{"http://127.0.0.1:8080/demo/p"}) {
		t.Fatalf("issuers = %v", got)
	}
}

func TestReadManifestsRejectsDocumentWithoutKind(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x.yaml"), []byte("metadata: {name: x}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readManifests(dir); err == nil {
		t.Fatal("a document without kind was accepted")
	}
}

func TestHostPort(t *testing.T) {
	tests := map[string]string{
		"http://127.0.0.1:8080":      "127.0.0.1:8080",
		"http://127.0.0.1:8080/base": "127.0.0.1:8080",
		"http://localhost":           "localhost:80",
	}
	for in, want := range tests {
		got, err := hostPort(in)
		if err != nil || got != want {
			t.Errorf("hostPort(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := hostPort("https://auth.example.com"); err == nil {
		t.Error("hostPort accepted https, which make run does not serve")
	}
}

package nocluster_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/testenv"
)

// localTags is the build tag `make build-local` sets (the Makefile's LOCAL_TAGS).
const localTags = "latchkey_local"

var (
	localOnce sync.Once
	localDir  string
	localOut  []byte
	localErr  error
)

// buildLocal builds latchkey and the launcher as `make build-local` does (one go build, the same
// flags and tag, so its cache serves `make run-local` too) and returns latchkey's path. Both
// are built so the tagged launcher cannot stop compiling unnoticed.
func buildLocal(t *testing.T) string {
	t.Helper()
	localOnce.Do(func() {
		localDir, localErr = os.MkdirTemp("", "latchkey-local-")
		if localErr != nil {
			return
		}
		build := exec.Command("go", "build", "-trimpath", "-tags", localTags, "-o", localDir+"/", "../../cmd/latchkey", "../../hack/dev")
		build.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
		localOut, localErr = build.CombinedOutput()
	})
	if localErr != nil {
		t.Fatalf("go build -tags %s: %v\n%s", localTags, localErr, localOut)
	}
	return filepath.Join(localDir, "latchkey")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if localDir != "" {
		os.RemoveAll(localDir)
	}
	os.Exit(code)
}

// deps lists the packages `go build` links for pkgs, with tags, and what each imports.
func deps(t *testing.T, tags string, pkgs ...string) map[string][]string {
	t.Helper()
	args := []string{"list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}"}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command("go", append(args, pkgs...)...)
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	set := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) > 0 {
			set[f[0]] = f[1:]
		}
	}
	return set
}

// importers names the packages of set that import p, Latchkey's own first: the import to
// remove, or to move behind the tag.
func importers(set map[string][]string, p string) string {
	var own, others []string
	for q, imports := range set {
		if slices.Contains(imports, p) {
			if strings.HasPrefix(q, "latchkey.dev/") {
				own = append(own, q)
			} else {
				others = append(others, q)
			}
		}
	}
	slices.Sort(own)
	slices.Sort(others)
	return strings.Join(append(own, others...), ", ")
}

func linked(set map[string][]string, prefix string) string {
	for p := range set {
		if p == prefix || strings.HasPrefix(p, prefix+"/") {
			return p
		}
	}
	return ""
}

// TestLocalBuildLinksWhatItServes keeps what the local build left out from coming back with a
// new import: no gRPC, no Envoy API, no OTLP exporter, no envtest (decision 0084), and no
// Kubernetes client (decision 0085): no client-go, of controller-runtime only the packages that
// link none of it, of k8s.io/api only the groups the no-cluster mode reads. And the release's
// build (no tag) still links each of them, so the tag cannot take a mode away from `make
// build`, the image or a release.
func TestLocalBuildLinksWhatItServes(t *testing.T) {
	local := deps(t, localTags, "../../cmd/latchkey", "../../hack/dev")
	for _, gone := range []string{
		"google.golang.org/grpc",
		"github.com/envoyproxy/go-control-plane",
		"go.opentelemetry.io/otel/exporters/otlp",
		"sigs.k8s.io/controller-runtime/pkg/envtest",
		"latchkey.dev/latchkey/webhook/extauthz",
		"k8s.io/client-go",
		"latchkey.dev/latchkey/internal/keys/keysecret",
		"latchkey.dev/latchkey/internal/keptsecret",
		"latchkey.dev/latchkey/internal/admincert",
		"latchkey.dev/latchkey/internal/workload/tokenreview",
	} {
		if p := linked(local, gone); p != "" {
			t.Errorf("the local build links %s, imported by %s", p, importers(local, p))
		}
	}
	// controller-runtime's client, cache and manager link client-go; these three do not.
	light := map[string]bool{
		"sigs.k8s.io/controller-runtime/pkg/scheme":          true, // api/v1alpha1's SchemeBuilder
		"sigs.k8s.io/controller-runtime/pkg/log":             true,
		"sigs.k8s.io/controller-runtime/pkg/manager/signals": true,
		// Secrets, ConfigMaps and Namespaces; the API server's admission code reads
		// authentication/v1's user info.
		"k8s.io/api/core/v1":           true,
		"k8s.io/api/authentication/v1": true,
	}
	for p := range local {
		if (strings.HasPrefix(p, "sigs.k8s.io/controller-runtime") || strings.HasPrefix(p, "k8s.io/api/")) && !light[p] {
			t.Errorf("the local build links %s, imported by %s", p, importers(local, p))
		}
	}
	full := deps(t, "", "../../cmd/latchkey")
	for _, kept := range []string{
		"latchkey.dev/latchkey/webhook/extauthz",
		"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp",
		"sigs.k8s.io/controller-runtime/pkg/manager",
		"sigs.k8s.io/controller-runtime/pkg/builder",
		"k8s.io/client-go/kubernetes/typed/authentication/v1",
		"latchkey.dev/latchkey/internal/keys/keysecret",
		"latchkey.dev/latchkey/internal/admincert",
		"latchkey.dev/latchkey/internal/workload/tokenreview",
	} {
		if _, ok := full[kept]; !ok {
			t.Errorf("the release build of cmd/latchkey no longer links %s", kept)
		}
	}
	if len(local) >= len(deps(t, "", "../../cmd/latchkey", "../../hack/dev")) {
		t.Error("the local build links as many packages as the full one")
	}
}

// TestReleaseBuildsHaveNoLocalTag: the tag is set by build-local alone; the Dockerfile, the image
// builder and every other Makefile recipe build every mode.
func TestReleaseBuildsHaveNoLocalTag(t *testing.T) {
	var tools []string
	for _, dir := range []string{"image", "release"} {
		files, err := filepath.Glob(filepath.Join("..", "..", "hack", "tools", dir, "*.go"))
		must(t, err)
		tools = append(tools, files...)
	}
	if len(tools) == 0 {
		t.Fatal("no image builder or release tool found under hack/tools")
	}
	for _, f := range append(tools, "../../Dockerfile") {
		b, err := os.ReadFile(f)
		must(t, err)
		if bytes.Contains(b, []byte(localTags)) {
			t.Errorf("%s builds with %s", f, localTags)
		}
	}
	b, err := os.ReadFile("../../Makefile")
	must(t, err)
	uses := 0
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, "\t") && strings.Contains(line, "$(LOCAL_TAGS)") {
			uses++
			if !strings.Contains(line, "-o bin/.build-local/") {
				t.Errorf("a Makefile recipe other than build-local sets the local tag: %s", line)
			}
		}
	}
	if uses != 1 {
		t.Errorf("build-local sets $(LOCAL_TAGS) in %d recipe lines, want 1", uses)
	}
}

// TestLocalBuildRefusesWhatItLeftOut: asked for a listener, an exporter or a mode it does not
// have, the local binary stops at start-up and names the build that has it, rather than
// serving without: the Envoy external authorization server, the OTLP exporter, and the
// cluster mode (latchkey without --config-dir), whose manager and Kubernetes client the tag
// leaves out.
func TestLocalBuildRefusesWhatItLeftOut(t *testing.T) {
	testenv.SkipShort(t, "to build the latchkey binary")
	bin := buildLocal(t)
	for name, c := range map[string]struct {
		serve bool // with `serve --config-dir`
		flags []string
		want  []string
	}{
		"ext-authz": {serve: true, flags: []string{"--ext-authz-listen", "127.0.0.1:0"},
			want: []string{"built for `make run-local`", "make build"}},
		"otlp": {serve: true, flags: []string{"--otlp-traces-endpoint", "http://127.0.0.1:1/v1/traces"},
			want: []string{"built for `make run-local`", "make build"}},
		"cluster": {want: []string{"serves only `latchkey serve --config-dir`", "built for `make run-local`", "`make build`"}},
		// The flag the full build's cluster mode reads still parses, and is refused as a
		// cluster's.
		"kubeconfig": {serve: true, flags: []string{"--kubeconfig", "/nonexistent"}, want: []string{"--kubeconfig needs a cluster"}},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			must(t, os.MkdirAll(filepath.Join(dir, "config"), 0o700))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			args := []string{"--listen", "127.0.0.1:0", "--metrics-listen", "0", "--public-url", "http://127.0.0.1:8080",
				"--database", "sqlite:" + filepath.Join(dir, "latchkey.db")}
			if c.serve {
				args = append([]string{"serve", "--config-dir", filepath.Join(dir, "config"), "--data-dir", filepath.Join(dir, "data")}, args...)
			}
			out, err := exec.CommandContext(ctx, bin, append(args, c.flags...)...).CombinedOutput()
			if err == nil {
				t.Fatalf("latchkey started with %v:\n%s", c.flags, out)
			}
			for _, w := range c.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("the refusal does not say %q:\n%s", w, out)
				}
			}
		})
	}
}

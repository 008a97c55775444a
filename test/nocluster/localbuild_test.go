package nocluster_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
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

// deps lists the packages `go build` links for pkgs, with tags.
func deps(t *testing.T, tags string, pkgs ...string) map[string]bool {
	t.Helper()
	args := []string{"list", "-deps"}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command("go", append(args, pkgs...)...)
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	set := map[string]bool{}
	for p := range strings.FieldsSeq(string(out)) {
		set[p] = true
	}
	return set
}

func linked(set map[string]bool, prefix string) string {
	for p := range set {
		if p == prefix || strings.HasPrefix(p, prefix+"/") {
			return p
		}
	}
	return ""
}

// TestLocalBuildLinksWhatItServes keeps what the local build left out from coming back with a
// new import (decision 0084): no gRPC, no Envoy API, no OTLP exporter, no envtest. And the
// release's build (no tag) still links each of them, so the tag cannot take a mode away from
// `make build`, the image or a release.
func TestLocalBuildLinksWhatItServes(t *testing.T) {
	local := deps(t, localTags, "../../cmd/latchkey", "../../hack/dev")
	for _, gone := range []string{
		"google.golang.org/grpc",
		"github.com/envoyproxy/go-control-plane",
		"go.opentelemetry.io/otel/exporters/otlp",
		"sigs.k8s.io/controller-runtime/pkg/envtest",
		"latchkey.dev/latchkey/webhook/extauthz",
	} {
		if p := linked(local, gone); p != "" {
			t.Errorf("the local build links %s (go list -deps -tags %s ./cmd/latchkey ./hack/dev says which import brings it)", p, localTags)
		}
	}
	full := deps(t, "", "../../cmd/latchkey")
	for _, kept := range []string{
		"latchkey.dev/latchkey/webhook/extauthz",
		"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp",
		"sigs.k8s.io/controller-runtime/pkg/manager",
	} {
		if !full[kept] {
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

// TestLocalBuildRefusesWhatItLeftOut: asked for a listener or exporter it does not have, the
// local binary stops at start-up and names the build that has it, rather than serving without.
func TestLocalBuildRefusesWhatItLeftOut(t *testing.T) {
	testenv.SkipShort(t, "to build the latchkey binary")
	bin := buildLocal(t)
	for name, flags := range map[string][]string{
		"ext-authz": {"--ext-authz-listen", "127.0.0.1:0"},
		"otlp":      {"--otlp-traces-endpoint", "http://127.0.0.1:1/v1/traces"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			must(t, os.MkdirAll(filepath.Join(dir, "config"), 0o700))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			args := append([]string{"serve", "--config-dir", filepath.Join(dir, "config"), "--data-dir", filepath.Join(dir, "data"),
				"--listen", "127.0.0.1:0", "--metrics-listen", "0"}, flags...)
			out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
			if err == nil {
				t.Fatalf("latchkey started with %v:\n%s", flags, out)
			}
			if !strings.Contains(string(out), "built for `make run-local`") || !strings.Contains(string(out), "make build") {
				t.Errorf("the refusal does not say which build has it:\n%s", out)
			}
		})
	}
}

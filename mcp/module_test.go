package mcp_test

import (
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The module is for authors of MCP servers, who should get the MCP Go SDK and nothing heavier
// with it: no package of the module or its tests may come from a Kubernetes module, and no
// module but the SDK and what the SDK itself needs. The list is built outside the repository's
// workspace, as `go get` builds it.
func TestModuleDependencies(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-test", "-f", "{{with .Module}}{{.Path}}{{end}}", "./...")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("go list: %v\n%s", err, stderr)
	}
	allowed := []string{
		"latchkey.dev/latchkey/mcp",
		"github.com/modelcontextprotocol/go-sdk",
		// The SDK's own dependencies.
		"github.com/google/jsonschema-go",
		"github.com/segmentio/asm",
		"github.com/segmentio/encoding",
		"github.com/yosida95/uritemplate/v3",
		"golang.org/x/oauth2",
		"golang.org/x/sync",
		"golang.org/x/sys",
		"golang.org/x/time",
	}
	seen := map[string]bool{}
	for _, m := range strings.Fields(string(out)) {
		if seen[m] {
			continue
		}
		seen[m] = true
		switch {
		case strings.HasPrefix(m, "k8s.io/") || strings.HasPrefix(m, "sigs.k8s.io/"):
			t.Errorf("the module's packages come from %s: a Kubernetes module must never reach an MCP server's build", m)
		case !slices.Contains(allowed, m):
			t.Errorf("the module's packages come from %s, which is not the MCP Go SDK or one of its dependencies; add it here only if the SDK needs it", m)
		}
	}
	if !seen["github.com/modelcontextprotocol/go-sdk"] {
		t.Errorf("go list found no package of the MCP Go SDK:\n%s", out)
	}
}

package repo

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// serverPackages are the packages the latchkey binary is made of, and the ones it could come to
// import: none of them may import the mcp module (latchkey.dev/latchkey/mcp). That module is for
// MCP server authors and keeps its own DPoP verifier on the standard library; the server checks
// proofs with internal/dpop on go-jose (docs/decisions/0071-one-jose-stack.md), so a change to
// the MCP authors' module never changes a security check of the server. Tests, hack/bench and
// examples/ play the client or the MCP server and may import it.
var serverPackages = []string{"./cmd/...", "./api/...", "./controllers/...", "./internal/...", "./webhook/..."}

// TestServerDoesNotImportTheMCPModule lists, with go list, every package the server packages
// import outside their tests (directly or through others) and refuses any of the mcp module.
func TestServerDoesNotImportTheMCPModule(t *testing.T) {
	if testing.Short() {
		t.Skip("go list loads every package of the module")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH")
	}
	// -deps walks the non-test imports only; each line is a package and what imports it.
	args := append([]string{"list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`}, serverPackages...)
	cmd := exec.Command(gobin, args...)
	cmd.Dir = "../.."
	// The root module alone, as the Dockerfile builds it (go.mod replaces the mcp module).
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if e := (*exec.ExitError)(nil); errors.As(err, &e) {
			stderr = string(e.Stderr)
		}
		t.Fatalf("go list: %v\n%s", err, stderr)
	}
	const mcp = "latchkey.dev/latchkey/mcp"
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pkg := fields[0]
		if pkg == mcp || strings.HasPrefix(pkg, mcp+"/") {
			continue // reported by its importer below
		}
		for _, imp := range fields[1:] {
			if imp == mcp || strings.HasPrefix(imp, mcp+"/") {
				t.Errorf("%s imports %s: the server must not depend on the MCP authors' module", pkg, imp)
			}
		}
	}
}

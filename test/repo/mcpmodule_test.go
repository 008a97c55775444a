package repo

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMCPModulePath: the module path mcp/README.md tells people to `go get`, and to name in a
// replace directive, is the one mcp/go.mod declares. A path that differs resolves to nothing, or
// to someone else's module.
func TestMCPModulePath(t *testing.T) {
	root := "../.."
	gomod, err := os.ReadFile(filepath.Join(root, "mcp", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^module\s+(\S+)\s*$`).FindSubmatch(gomod)
	if m == nil {
		t.Fatal("mcp/go.mod has no module line")
	}
	module := string(m[1])
	readme, err := os.ReadFile(filepath.Join(root, "mcp", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	if !strings.HasPrefix(text, "# "+module+"\n") {
		t.Errorf("mcp/README.md's title is not the module path %s", module)
	}
	for _, want := range []string{"go get " + module + "\n", "-replace=" + module + "="} {
		if !strings.Contains(text, want) {
			t.Errorf("mcp/README.md does not say %q (the module is %s)", strings.TrimSpace(want), module)
		}
	}
	// Every path that looks like this module's, or a package of it, is this module's.
	for _, p := range regexp.MustCompile(`latchkey\.dev/[A-Za-z0-9./_-]*mcp\b`).FindAllString(text, -1) {
		if p != module && !strings.HasPrefix(p, module+"/") {
			t.Errorf("mcp/README.md names %s, not the module %s", p, module)
		}
	}
}

// Package repo checks the repository's own guards: the scripts CI runs on a fresh clone before
// anything else.
package repo

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrackedFilesGuard commits, into a scratch repository, what hack/check-tracked-files.sh
// must refuse (this test's own compiled binary under an innocent name, a file over 1 MiB) and
// what it must let through (source, a text file that happens to start with "MZ"), and runs the
// guard on each.
func TestTrackedFilesGuard(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	guard, err := filepath.Abs("../../hack/check-tracked-files.sh")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	binary, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if len(binary) > 1<<20 {
		binary = binary[:1<<19] // the header is what marks it; stay under the size limit
	}
	tests := []struct {
		name    string
		files   map[string][]byte
		refused string // "" when the guard passes; else a word its message must hold
	}{
		{"source only", map[string][]byte{"main.go": []byte("package main\n"), "README.md": []byte("# hi\n")}, ""},
		{"text starting with MZ", map[string][]byte{"notes.txt": []byte("MZ is a postal code prefix\n")}, ""},
		{"compiled binary", map[string][]byte{"main.go": []byte("package main\n"), "bench": binary}, "bench is an executable binary"},
		{"file over 1 MiB", map[string][]byte{"data.json": bytes.Repeat([]byte("a"), 1<<20+1)}, "data.json is 1048577 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			git := func(args ...string) {
				t.Helper()
				cmd := exec.Command("git", append([]string{"-c", "user.email=t@example.com", "-c", "user.name=t"}, args...)...)
				cmd.Dir = dir
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("git %v: %v\n%s", args, err, out)
				}
			}
			git("init", "-q")
			for name, b := range tt.files {
				if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			git("add", ".")
			git("commit", "-qm", "x")
			cmd := exec.Command("bash", guard, dir)
			out, err := cmd.CombinedOutput()
			if tt.refused == "" {
				if err != nil {
					t.Fatalf("the guard refused a clean tree: %v\n%s", err, out)
				}
				return
			}
			if err == nil {
				t.Fatalf("the guard passed a tree with %s", tt.name)
			}
			if !strings.Contains(string(out), tt.refused) {
				t.Errorf("the guard's message %q does not say %q", out, tt.refused)
			}
		})
	}
}

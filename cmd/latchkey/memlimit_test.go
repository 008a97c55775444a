package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestContainerMemoryLimit(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v2 := write("memory.max", "536870912\n")
	v2max := write("memory.max.unlimited", "max\n")
	v1 := write("memory.limit_in_bytes", "268435456\n")
	v1unlimited := write("memory.limit_in_bytes.unlimited", "9223372036854771712\n")
	missing := filepath.Join(dir, "absent")

	for _, tc := range []struct {
		name  string
		files []string
		want  int64
	}{
		{"v2 limit", []string{v2, v1}, 512 << 20},
		{"v2 unlimited wins over v1", []string{v2max, v1}, 0},
		{"v1 when v2 is absent", []string{missing, v1}, 256 << 20},
		{"v1 unlimited", []string{missing, v1unlimited}, 0},
		{"no cgroup files", []string{missing}, 0},
	} {
		got, _ := containerMemoryLimit(tc.files)
		if got != tc.want {
			t.Errorf("%s: limit = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestSoftLimit(t *testing.T) {
	for _, tc := range []struct{ limit, want int64 }{
		{512 << 20, 512<<20 - (512<<20)/10}, // a tenth
		{128 << 20, 96 << 20},               // at least 32 MiB of headroom
		{32 << 20, 16 << 20},                // never below half
	} {
		if got := softLimit(tc.limit); got != tc.want {
			t.Errorf("softLimit(%d) = %d, want %d", tc.limit, got, tc.want)
		}
	}
}

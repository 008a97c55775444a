package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sqlstore "latchkey.dev/latchkey/internal/store/sql"
)

// `latchkey backup` copies a SQLite database, to a file or to standard output, and refuses what
// it cannot back up with a message that says what to do instead.
func TestBackupCommand(t *testing.T) {
	t.Setenv("LATCHKEY_DATABASE", "")
	dir := t.TempDir()
	db := filepath.Join(dir, "latchkey.db")
	s, err := sqlstore.Open(context.Background(), "sqlite:"+db)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()

	for _, c := range []struct {
		name       string
		args       []string
		code       int
		out, error string
	}{
		{"to a file", []string{"--database", "sqlite:" + db, "--to", filepath.Join(dir, "copy.db")}, 0, "copied to", ""},
		{"to standard output", []string{"--database", "sqlite:" + db, "--to", "-"}, 0, "SQLite format 3", "written to standard output"},
		{"postgres", []string{"--database", "postgres://u:secret@db/latchkey", "--to", "x"}, 2, "", "back it up with pg_dump"},
		{"not a database URL", []string{"--database", "/var/lib/latchkey.db", "--to", "x"}, 2, "", "must be sqlite:"},
		{"no destination", []string{"--database", "sqlite:" + db}, 2, "", "usage: latchkey backup"},
		{"existing destination", []string{"--database", "sqlite:" + db, "--to", db}, 1, "", "never overwrites"},
		{"missing database", []string{"--database", "sqlite:" + filepath.Join(dir, "none.db"), "--to", filepath.Join(dir, "n.db")}, 1, "", "no such file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := backupCommand(c.args, &stdout, &stderr); code != c.code {
				t.Fatalf("exit code %d, want %d; stderr: %s", code, c.code, stderr.String())
			}
			if !strings.Contains(stdout.String(), c.out) || !strings.Contains(stderr.String(), c.error) {
				t.Errorf("stdout %.80q, stderr %q; want %q and %q", stdout.String(), stderr.String(), c.out, c.error)
			}
			if strings.Contains(stderr.String(), "secret") {
				t.Error("the message repeats the DSN's password")
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "none.db")); err == nil {
		t.Error("backing up a missing database created it")
	}
}

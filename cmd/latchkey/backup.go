package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	sqlstore "latchkey.dev/latchkey/internal/store/sql"
)

// exitIfBackup runs `latchkey backup` and exits when args (os.Args[1:]) ask for it.
func exitIfBackup(args []string) {
	if len(args) > 0 && args[0] == "backup" {
		os.Exit(backupCommand(args[1:], os.Stdout, os.Stderr))
	}
}

// backupCommand is `latchkey backup`: an online, consistent copy of the SQLite database, taken
// from the same image as the server (which has no shell and no sqlite3), e.g. through `kubectl
// exec` (docs/backup-restore.md). It returns the exit code: 0 when the copy was written, 1 when
// it failed, 2 for a usage error. PostgreSQL is refused: pg_dump and the provider's
// point-in-time recovery back it up.
func backupCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("latchkey backup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: latchkey backup [--database sqlite:FILE] --to FILE|-")
		fmt.Fprintln(stderr, "Copies the SQLite database while servers use it (SQLite's online backup API) into a new file, or to standard output with --to -.")
		fs.PrintDefaults()
	}
	database := fs.String("database", defaultDatabase, "the database the server uses (sqlite:/path/file.db); env LATCHKEY_DATABASE")
	to := fs.String("to", "", "the file to write the copy to, which must not exist; - writes the copy to standard output")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if env := os.Getenv("LATCHKEY_DATABASE"); env != "" && !flagSet(fs, "database") {
		*database = env
	}
	if *to == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	path, ok := strings.CutPrefix(*database, "sqlite:")
	if !ok {
		if strings.HasPrefix(*database, "postgres://") || strings.HasPrefix(*database, "postgresql://") {
			fmt.Fprintln(stderr, "latchkey backup: --database is PostgreSQL: back it up with pg_dump, "+
				"or your provider's backups and point-in-time recovery (docs/backup-restore.md)")
		} else {
			fmt.Fprintln(stderr, "latchkey backup: --database must be sqlite:/path/file.db")
		}
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	dst := *to
	if dst == "-" {
		// The backup API writes a file: write it beside the others in the temporary directory
		// (the chart's /tmp), then stream it.
		dir, err := os.MkdirTemp("", "latchkey-backup-")
		if err != nil {
			fmt.Fprintln(stderr, "latchkey backup:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		dst = filepath.Join(dir, "latchkey.db")
	}
	migration, err := sqlstore.BackupSQLite(ctx, path, dst)
	if err != nil {
		fmt.Fprintln(stderr, "latchkey backup:", err)
		return 1
	}
	if *to == "-" {
		f, err := os.Open(dst)
		if err != nil {
			fmt.Fprintln(stderr, "latchkey backup:", err)
			return 1
		}
		defer f.Close()
		if _, err := io.Copy(stdout, f); err != nil {
			fmt.Fprintln(stderr, "latchkey backup: writing to standard output:", err)
			return 1
		}
		fmt.Fprintf(stderr, "latchkey backup: %s written to standard output (schema at migration %04d)\n", path, migration)
		return 0
	}
	fmt.Fprintf(stdout, "latchkey backup: %s copied to %s (schema at migration %04d)\n", path, dst, migration)
	return 0
}

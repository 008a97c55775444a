package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"modernc.org/sqlite"
)

// BackupSQLite writes a consistent copy of the SQLite database at src to dst, which must not
// exist, while servers keep using src, and returns the newest migration the copy holds.
//
// It uses SQLite's online backup API (sqlite3_backup_*, docs/decisions/0066): the whole copy is
// made in one step under one read transaction, so it is the database as of one commit, and in
// WAL mode the servers' writes go on meanwhile (a copy made in several steps would start over
// after every write of another process). It never migrates or writes src: a backup taken by a
// newer binary than the server's leaves the schema alone. The copy is checked (quick_check),
// switched to a rollback journal so that it is one self-contained file, and only then appears
// at dst.
func BackupSQLite(ctx context.Context, src, dst string) (migration int64, err error) {
	if _, err := os.Stat(src); err != nil {
		// Opening a missing file would create an empty database and back that up.
		return 0, fmt.Errorf("sqlstore: backup: %w", err)
	}
	if _, err := os.Lstat(dst); err == nil {
		return 0, fmt.Errorf("sqlstore: backup: %s exists; a backup never overwrites a file", dst)
	}
	abs, err := filepath.Abs(src)
	if err != nil {
		return 0, err
	}
	// mode=rw: never create. The busy timeout covers a checkpoint holding the file for a moment.
	srcURI := (&url.URL{Scheme: "file", Path: abs, RawQuery: "mode=rw&_busy_timeout=10000"}).String()
	db, err := sql.Open("sqlite", srcURI)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	if err := isLatchkey(ctx, db); err != nil {
		return 0, fmt.Errorf("sqlstore: backup: %s: %w", src, err)
	}

	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	tmp := dst + ".partial-" + hex.EncodeToString(suffix[:])
	defer os.Remove(tmp)
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	err = conn.Raw(func(dc any) error {
		b, ok := dc.(interface {
			NewBackup(string) (*sqlite.Backup, error)
		})
		if !ok {
			return fmt.Errorf("the SQLite driver (%T) has no backup API", dc)
		}
		bk, err := b.NewBackup(tmp)
		if err != nil {
			return err
		}
		_, stepErr := bk.Step(-1)
		return errors.Join(stepErr, bk.Finish())
	})
	conn.Close()
	if err != nil {
		return 0, fmt.Errorf("sqlstore: backup: %w", err)
	}

	migration, err = checkCopy(ctx, tmp)
	if err != nil {
		return 0, fmt.Errorf("sqlstore: backup: the copy: %w", err)
	}
	// A hard link appears only if dst does not exist: no check-then-rename race.
	if err := os.Link(tmp, dst); err != nil {
		return 0, fmt.Errorf("sqlstore: backup: %w", err)
	}
	return migration, nil
}

// isLatchkey refuses a file that is not a Latchkey database, so a wrong path is noticed when the
// backup is made rather than when it is needed.
func isLatchkey(ctx context.Context, db *sql.DB) error {
	var n int
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'`).Scan(&n)
	if err != nil {
		return err
	}
	if n == 0 {
		return errors.New("not a Latchkey database (no schema_migrations table)")
	}
	return nil
}

// checkCopy checks the copy's pages, makes it one file (journal_mode=DELETE: no -wal beside it
// to forget; a server opening it switches it back to WAL), syncs it, and returns its newest
// migration.
func checkCopy(ctx context.Context, path string) (int64, error) {
	db, err := sql.Open("sqlite", path)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	var mode, check string
	if err := db.QueryRowContext(ctx, `PRAGMA journal_mode=DELETE`).Scan(&mode); err != nil {
		return 0, err
	}
	if err := db.QueryRowContext(ctx, `PRAGMA quick_check`).Scan(&check); err != nil {
		return 0, err
	}
	if check != "ok" {
		return 0, fmt.Errorf("quick_check: %s", check)
	}
	var v sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT max(version) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, err
	}
	if err := db.Close(); err != nil {
		return 0, err
	}
	f, err := os.Open(path) //nolint:gosec // the copy this backup just wrote, beside the --to path
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return v.Int64, f.Sync()
}

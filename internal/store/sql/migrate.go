package sqlstore

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Migrations are numbered files, NNNN_name.sql, one directory per dialect. A released file
// never changes; a schema change is a new file.
//
//go:embed migrations
var migrationFiles embed.FS

type migration struct {
	version int64
	name    string
	sql     string
}

func migrations(dialect string) ([]migration, error) {
	dir := path.Join("migrations", dialect)
	entries, err := fs.ReadDir(migrationFiles, dir)
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".sql")
		if !ok {
			continue
		}
		num, _, _ := strings.Cut(name, "_")
		v, err := strconv.ParseInt(num, 10, 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("sqlstore: migration %s: name must start with a positive number", e.Name())
		}
		b, err := fs.ReadFile(migrationFiles, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: name, sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("sqlstore: two migrations numbered %d", ms[i].version)
		}
	}
	return ms, nil
}

var (
	qMigrateLock = `SELECT pg_advisory_xact_lock(hashtext(coalesce(current_schema(), '') || ':latchkey:migrate'))`
	qMigrateInit = `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    BIGINT NOT NULL PRIMARY KEY,
	name       TEXT   NOT NULL,
	applied_at BIGINT NOT NULL
)`
	qMigrateApplied = `SELECT version FROM schema_migrations`
	qMigrateRecord  = `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`
)

// migrate applies pending migrations in order, all in one transaction, so a failed migration
// leaves the schema as it was. On PostgreSQL a transaction-scoped advisory lock makes replicas
// that start together take turns: the first applies, the others then find nothing to do. On
// SQLite the write transaction (BEGIN IMMEDIATE) is the lock.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrations(s.d.name)
	if err != nil {
		return err
	}
	err = s.tx1(ctx, func(x q) error {
		if s.postgres() {
			if _, err := x.exec(ctx, qMigrateLock); err != nil {
				return err
			}
		}
		if _, err := x.exec(ctx, qMigrateInit); err != nil {
			return err
		}
		applied := map[int64]bool{}
		// each has closed the rows when it returns: the migrations below run on the same
		// connection.
		err := x.each(ctx, func(r scanner) error {
			var v int64
			if err := r.Scan(&v); err != nil {
				return err
			}
			applied[v] = true
			return nil
		}, qMigrateApplied)
		if err != nil {
			return err
		}
		for _, m := range ms {
			if applied[m.version] {
				continue
			}
			if _, err := x.exec(ctx, m.sql); err != nil {
				return fmt.Errorf("migration %s: %w", m.name, err)
			}
			// Bookkeeping only; store semantics never read the clock.
			if _, err := x.exec(ctx, qMigrateRecord, m.version, m.name, time.Now().UnixNano()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlstore: migrate: %w", err)
	}
	return nil
}

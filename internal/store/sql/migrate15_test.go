package sqlstore

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/store/sql/pgtest"
)

// Migration 0015 on a database written before it: every person's oldest account at a
// connector becomes their default, and each agent keeps the one account it was allowed.
func TestMigration15KeepsWhatWasThere(t *testing.T) {
	dir := t.TempDir()
	type target struct{ driver, raw, dsn string }
	for name, open := range map[string]func(t *testing.T) target{
		"sqlite": func(*testing.T) target {
			return target{"sqlite", filepath.Join(dir, "l.db") + "?_foreign_keys=1", "sqlite:" + filepath.Join(dir, "l.db")}
		},
		"postgres": func(t *testing.T) target {
			dsn := pgtest.DSN(t) // skips without PostgreSQL
			return target{"pgx", dsn, dsn}
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := open(t)
			dialect := "sqlite"
			if c.driver == "pgx" {
				dialect = "postgres"
			}
			db, err := sql.Open(c.driver, c.raw)
			if err != nil {
				t.Fatal(err)
			}
			ms, err := migrations(dialect)
			if err != nil {
				t.Fatal(err)
			}
			exec := func(q string) {
				t.Helper()
				if _, err := db.Exec(q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			exec(qMigrateInit)
			for _, m := range ms {
				if m.version >= 15 {
					continue
				}
				exec(m.sql)
				exec(fmt.Sprintf("INSERT INTO schema_migrations (version, name, applied_at) VALUES (%d, '%s', 0)", m.version, m.name))
			}
			conn := func(id, subject, connector string, created int) {
				exec(fmt.Sprintf(`INSERT INTO connections (id, project, subject, connector, account_id, account_name, key_id,
token_type, scopes, status, version, created_at, updated_at) VALUES ('%s', 'p', '%s', '%s', '%s', '%s', 'k', 'bearer', '', 'active', 1, %d, %d)`,
					id, subject, connector, id, id, created, created))
			}
			conn("alice-new", "alice", "github", 20)
			conn("alice-old", "alice", "github", 10)
			conn("alice-gl", "alice", "gitlab", 30)
			conn("bob-gh", "bob", "github", 5)
			exec(`INSERT INTO agent_permissions (project, subject, connector, client_id, connection_id, created_at)
VALUES ('p', 'alice', 'github', 'agent', 'alice-new', 1)`)
			db.Close()

			s := openTest(t, c.dsn)
			var defaults []string
			for _, subject := range []string{"alice", "bob"} {
				list, err := s.ListConnections(t.Context(), "p", subject)
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range list {
					if c.Default {
						defaults = append(defaults, c.ID)
					}
				}
			}
			slices.Sort(defaults)
			if got := strings.Join(defaults, ","); got != "alice-gl,alice-old,bob-gh" {
				t.Fatalf("defaults after the migration: %s", got)
			}
			a, err := s.AgentAccess(t.Context(), "p", "alice", "github", "agent")
			if err != nil {
				t.Fatal(err)
			}
			if a.Allowed != "alice-new" || !slices.Equal(a.Permits, []string{"alice-new"}) {
				t.Fatalf("the agent's permission after the migration: %+v", a)
			}
			// And now an agent may hold a second one.
			if err := s.AllowAgent(t.Context(), store.AgentPermission{Project: "p", Subject: "alice", Connector: "github",
				ClientID: "agent", ConnectionID: "alice-old", CreatedAt: a.Connections[0].CreatedAt}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

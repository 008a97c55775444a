package sqlstore

import (
	"database/sql"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// On SQLite UpdateConnection reads the row, runs fn (an upstream refresh) without holding the
// database, and writes only if the row's version has not moved. A use recorded meanwhile must
// not move it: the refresh would fail and its rotated refresh token would be lost.
func TestTouchDuringRefreshSQLite(t *testing.T) {
	s := openTest(t, sqliteDSN(t))
	ctx := t.Context()
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	c, err := s.SaveConnection(ctx, store.Connection{ID: "c1", Project: "ns/p", Subject: "alice", Connector: "ns/gh",
		AccountID: "1", KeyID: "k", AccessToken: []byte("old"), RefreshToken: []byte("rt"), TokenType: "bearer",
		CreatedAt: now, UpdatedAt: now})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.UpdateConnection(ctx, c.Project, c.ID, func(cur store.Connection) (store.Connection, error) {
		if err := s.TouchConnections(ctx, []store.ConnectionUse{{Project: c.Project, ID: c.ID, At: now}}); err != nil {
			t.Fatal(err)
		}
		cur.AccessToken = []byte("new")
		return cur, nil
	})
	if err != nil {
		t.Fatalf("refresh after a use was recorded: %v", err)
	}
	var used sql.NullInt64
	var access []byte
	if err := s.r.QueryRowContext(ctx, `SELECT last_used_at, access_token FROM connections WHERE id = 'c1'`).Scan(&used, &access); err != nil {
		t.Fatal(err)
	}
	if !used.Valid || used.Int64 != now.UnixNano() || string(access) != "new" {
		t.Fatalf("last_used_at %v, access token %q", used, access)
	}
}

// Rows marked "broken" before connection states existed get the state that says why: no
// refresh token means the token expired with nothing to renew it, a refresh token means the
// service refused it.
func TestMigrationSplitsBroken(t *testing.T) {
	for name, dsnOf := range map[string]func(testing.TB) string{"sqlite": sqliteDSN, "postgres": postgresDSN} {
		t.Run(name, func(t *testing.T) {
			dsn := dsnOf(t)
			ctx := t.Context()
			s, err := Open(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
			for _, c := range []store.Connection{
				{ID: "no-refresh", AccountID: "1"},
				{ID: "refresh", AccountID: "2", RefreshToken: []byte("rt")},
				{ID: "working", AccountID: "3", RefreshToken: []byte("rt")},
			} {
				c.Project, c.Subject, c.Connector, c.KeyID, c.AccessToken, c.TokenType = "ns/p", "alice", "ns/gh", "k", []byte("at"), "bearer"
				c.CreatedAt, c.UpdatedAt = now, now
				if _, err := s.SaveConnection(ctx, c); err != nil {
					t.Fatal(err)
				}
			}
			// The schema as it was before 0017, with two broken rows.
			for _, stmt := range []string{
				`UPDATE connections SET status = 'broken' WHERE id IN ('no-refresh', 'refresh')`,
				`DROP INDEX connections_expiry`,
				`ALTER TABLE connections DROP COLUMN last_used_at`,
				`DELETE FROM schema_migrations WHERE version = 17`,
			} {
				if _, err := s.w.ExecContext(ctx, stmt); err != nil {
					t.Fatalf("%s: %v", stmt, err)
				}
			}
			s.Close()
			s, err = Open(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			want := map[string]store.ConnectionStatus{
				"no-refresh": store.ConnectionNeedsReconnect, "refresh": store.ConnectionRevokedUpstream, "working": store.ConnectionActive,
			}
			for id, st := range want {
				c, err := s.GetConnection(ctx, "ns/p", id)
				if err != nil {
					t.Fatal(err)
				}
				if c.Status != st {
					t.Errorf("%s: %q, want %q", id, c.Status, st)
				}
			}
		})
	}
}

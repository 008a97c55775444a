// Package pgtest gives tests their own PostgreSQL schema in the database named by
// LATCHKEY_TEST_POSTGRES_DSN: much faster than a database per test, and just as separate.
// PgBouncerDSN does the same through PgBouncer in transaction mode
// (LATCHKEY_TEST_PGBOUNCER_DSN), the way most PostgreSQL installations are reached in
// production (docs/operations.md, "PostgreSQL in production").
package pgtest

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"sync"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"latchkey.dev/latchkey/internal/testenv"
)

// EnvDSN names the variable holding the base DSN; .ci/run always sets it.
const EnvDSN = "LATCHKEY_TEST_POSTGRES_DSN"

// EnvPgBouncerDSN names the variable holding the DSN of a PgBouncer in transaction mode
// (pool_mode=transaction) in front of the database of EnvDSN, which lets any user that exists
// in PostgreSQL log in (auth_query); .ci/run always sets it.
const EnvPgBouncerDSN = "LATCHKEY_TEST_PGBOUNCER_DSN"

// DSN creates an empty schema for one test (dropped when it ends) in the database of
// LATCHKEY_TEST_POSTGRES_DSN and returns a DSN whose search_path selects it. Without the
// variable the test is skipped, or fails under CI=true, where PostgreSQL must be tested.
// Under -short it skips whatever the variable says.
func DSN(t testing.TB) string {
	t.Helper()
	SkipShort(t)
	return Schema(t, env(t, EnvDSN))
}

// env returns the DSN in the variable name. Without it the test is skipped, or fails under
// CI=true.
func env(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(name + " is not set; CI must run the PostgreSQL tests")
		}
		t.Skip(name + " is not set; set it to a postgres:// URL to run the PostgreSQL tests")
	}
	return v
}

// SkipShort skips t under -short, for a test that needs PostgreSQL before it asks for a DSN.
func SkipShort(t testing.TB) {
	t.Helper()
	testenv.SkipShort(t, "PostgreSQL")
}

var admins sync.Map // base DSN → *sql.DB, one pool per database for creating schemas

func admin(t testing.TB, base string) *sql.DB {
	t.Helper()
	v, ok := admins.Load(base)
	if !ok {
		db, err := sql.Open("pgx", base)
		if err != nil {
			t.Fatal(err)
		}
		if v, ok = admins.LoadOrStore(base, db); ok {
			db.Close()
		}
	}
	return v.(*sql.DB)
}

func randomName() string {
	var b [6]byte
	rand.Read(b[:])
	return "lk_test_" + hex.EncodeToString(b[:])
}

// Schema creates an empty schema in the database at base, dropped when the test ends, and
// returns a DSN that uses it.
func Schema(t testing.TB, base string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("%s: %v", EnvDSN, err)
	}
	db := admin(t, base)
	schema := randomName()
	if _, err := db.Exec(`CREATE SCHEMA ` + schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		if _, err := db.Exec(`DROP SCHEMA ` + schema + ` CASCADE`); err != nil {
			t.Logf("drop schema %s: %v", schema, err)
		}
	})
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// PgBouncerDSN gives one test its own schema, as pgtest.DSN does, reached through the PgBouncer
// of LATCHKEY_TEST_PGBOUNCER_DSN. Without the variable (or LATCHKEY_TEST_POSTGRES_DSN, which
// creates the schema) the test is skipped, or fails under CI=true. Under -short it skips.
//
// The DSN is configured the way docs/operations.md asks of an installation behind a
// transaction-mode pooler: PgBouncer 1.18 refuses the search_path startup parameter, so the
// schema is chosen by a role of its own whose default search_path names it (ALTER ROLE … SET
// search_path), and default_query_exec_mode=cache_describe keeps pgx from preparing named
// statements, which a server connection handed to another client would not know.
func PgBouncerDSN(t testing.TB) string {
	t.Helper()
	SkipShort(t)
	base, bouncer := env(t, EnvDSN), env(t, EnvPgBouncerDSN)
	u, err := url.Parse(bouncer)
	if err != nil {
		t.Fatalf("%s: %v", EnvPgBouncerDSN, err)
	}
	db := admin(t, base)
	name := randomName()
	for _, stmt := range []string{
		`CREATE ROLE ` + name + ` LOGIN`,
		`CREATE SCHEMA ` + name + ` AUTHORIZATION ` + name,
		`ALTER ROLE ` + name + ` SET search_path = ` + name,
	} {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		for _, stmt := range []string{`DROP SCHEMA ` + name + ` CASCADE`, `DROP ROLE ` + name} {
			if _, err := db.Exec(stmt); err != nil {
				t.Logf("%s: %v", stmt, err)
			}
		}
	})
	u.User = url.User(name)
	q := u.Query()
	q.Set("default_query_exec_mode", "cache_describe")
	u.RawQuery = q.Encode()
	return u.String()
}

// Package pgtest gives tests their own PostgreSQL schema in the database named by
// LATCHKEY_TEST_POSTGRES_DSN: much faster than a database per test, and just as separate.
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

// DSN creates an empty schema for one test (dropped when it ends) in the database of
// LATCHKEY_TEST_POSTGRES_DSN and returns a DSN whose search_path selects it. Without the
// variable the test is skipped, or fails under CI=true, where PostgreSQL must be tested.
// Under -short it skips whatever the variable says.
func DSN(t testing.TB) string {
	t.Helper()
	SkipShort(t)
	base := os.Getenv(EnvDSN)
	if base == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(EnvDSN + " is not set; CI must run the PostgreSQL tests")
		}
		t.Skip(EnvDSN + " is not set; set it to a postgres:// URL to run the PostgreSQL tests")
	}
	return Schema(t, base)
}

// SkipShort skips t under -short, for a test that needs PostgreSQL before it asks for a DSN.
func SkipShort(t testing.TB) {
	t.Helper()
	testenv.SkipShort(t, "PostgreSQL")
}

var admins sync.Map // base DSN → *sql.DB, one pool per database for creating schemas

// Schema creates an empty schema in the database at base, dropped when the test ends, and
// returns a DSN that uses it.
func Schema(t testing.TB, base string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("%s: %v", EnvDSN, err)
	}
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
	db := v.(*sql.DB)
	var b [6]byte
	rand.Read(b[:])
	schema := "lk_test_" + hex.EncodeToString(b[:])
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

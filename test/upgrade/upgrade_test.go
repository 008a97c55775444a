// Package upgrade tells a rolling upgrade with the real binaries: the previous release, built
// from this repository's history, serves a PostgreSQL database; the release of this checkout
// starts on the same database and applies its migrations while the previous one keeps serving;
// tokens, refreshes, sessions, connect links and token exchanges work on both, in both
// directions, until the previous one stops, and the previous one starts again on the migrated
// schema, as a rollback starts it. A migration the previous release cannot run against fails the
// test: migrations are written expand/contract (docs/decisions/0065-expand-contract-migrations.md).
//
// Needs PostgreSQL (LATCHKEY_TEST_POSTGRES_DSN; skipped without it, failing under CI=true) and
// the repository's git history (skipped outside a git checkout); skipped under -short.
package upgrade_test

import (
	"database/sql"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"latchkey.dev/latchkey/test/lkproc"
	"latchkey.dev/latchkey/test/stack"
)

// previousRelease is the release the upgrade starts from: main before the migrations numbered
// 0018 and later. It must be a commit whose schema every later migration keeps working
// (decision 0065 says why it is not older: migration 0015 changed a key the release before it
// wrote through). Move it forward when a release is cut, never past a migration not yet
// released.
const previousRelease = "7455b137a9341e5006f9822bd530e91d0f9eb99a"

func TestMain(m *testing.M) {
	code := m.Run()
	lkproc.RemoveBuild()
	os.Exit(code)
}

func TestRollingUpgrade(t *testing.T) {
	dsn := stack.PostgresDSN(t)
	prevBin, prevTree := lkproc.BuildCommit(t, previousRelease)
	nextBin := lkproc.Build(t)
	// The installation's objects are those the previous release serves; the new release reads
	// them unchanged.
	d := lkproc.NewDemo(t, prevTree)

	prev := d.Start("previous", prevBin, dsn)
	d.Use(prev)
	before := applied(t, dsn)

	// What people and agents hold when the upgrade begins, all made by the previous release: a
	// person's access and refresh tokens, a service's token, a connected GitHub account, and a
	// connect link nobody has opened yet.
	aliceB := d.Browser(lkproc.Alice, lkproc.AlicePass)
	alice := d.CodeFlow(aliceB)
	service := d.Service("/token", url.Values{"grant_type": {"client_credentials"}})
	if service.Status != http.StatusOK || service.Str("access_token") == "" {
		t.Fatalf("client credentials: %d %s", service.Status, service.Raw)
	}
	d.ConnectGitHub(aliceB, d.Exchange(alice.Str("access_token")), "alice-gh", nil)
	ghAlice := d.Exchange(alice.Str("access_token"))
	if ghAlice.Status != http.StatusOK || ghAlice.Str("access_token") == "" {
		t.Fatalf("exchange after connecting: %d %s", ghAlice.Status, ghAlice.Raw)
	}
	malloryB := d.Browser(lkproc.Mallory, lkproc.MalloryPass)
	mallory := d.CodeFlow(malloryB)
	malloryLink := d.Exchange(mallory.Str("access_token"))
	if malloryLink.Str("reason") != "connect_required" {
		t.Fatalf("Mallory's first exchange: %d %s", malloryLink.Status, malloryLink.Raw)
	}

	// The new release starts on the same database and migrates it while the previous one serves.
	next := d.Start("next", nextBin, dsn)
	after := applied(t, dsn)
	if want := migrationFiles(t); len(after) != want {
		t.Fatalf("after the new release started the schema has %d migrations, its tree %d", len(after), want)
	}
	for _, m := range after[len(before):] {
		t.Logf("applied by the new release while the previous one served: %s", m)
	}

	both := []*lkproc.Process{prev, next}
	rt := alice.Str("refresh_token")
	for round := range 2 {
		for _, p := range both {
			d.Use(p)
			for what, tok := range map[string]string{"Alice's token": alice.Str("access_token"), "the service's token": service.Str("access_token")} {
				if !d.Active(tok) {
					t.Errorf("%s, round %d: %s, issued before the upgrade, is not active", p.Name, round, what)
				}
			}
			if a := d.Exchange(alice.Str("access_token")); a.Status != http.StatusOK || a.Str("access_token") != ghAlice.Str("access_token") {
				t.Errorf("%s, round %d: exchange for Alice: %d %s; want her GitHub token", p.Name, round, a.Status, a.Raw)
			}
			// The refresh token each process rotates is the one the other rotated last.
			r := d.Refresh(rt)
			if r.Status != http.StatusOK || r.Str("refresh_token") == "" {
				t.Fatalf("%s, round %d: refresh: %d %s", p.Name, round, r.Status, r.Raw)
			}
			rt = r.Str("refresh_token")
			for _, q := range both {
				d.Use(q)
				if !d.Active(r.Str("access_token")) {
					t.Errorf("the access token %s refreshed to is not active on %s", p.Name, q.Name)
				}
			}
			d.Use(p)
			// A session the previous release signed in, used on each.
			if a := d.Exchange(d.CodeFlow(aliceB).Str("access_token")); a.Status != http.StatusOK {
				t.Errorf("%s: exchange of a token from a new code flow: %d %s", p.Name, a.Status, a.Raw)
			}
		}
	}

	// Mallory's link, made by the previous release, is opened on the new one, and GitHub's
	// redirect back lands on the previous one.
	d.Use(next)
	d.ConnectGitHub(malloryB, malloryLink, "mallory-gh", func() { d.Use(prev) })
	var ghMallory string
	for _, p := range both {
		d.Use(p)
		a := d.Exchange(mallory.Str("access_token"))
		if a.Status != http.StatusOK || a.Str("access_token") == "" || a.Str("access_token") == ghAlice.Str("access_token") ||
			(ghMallory != "" && a.Str("access_token") != ghMallory) {
			t.Errorf("%s: exchange for Mallory after connecting across the two: %d %s", p.Name, a.Status, a.Raw)
		}
		ghMallory = a.Str("access_token")
	}

	// A revocation on one is a revocation on the other.
	d.Use(next)
	if a := d.Agent("/revoke", url.Values{"token": {mallory.Str("access_token")}}); a.Status != http.StatusOK {
		t.Fatalf("revoke on the new release: %d %s", a.Status, a.Raw)
	}
	d.Use(prev)
	if d.Active(mallory.Str("access_token")) {
		t.Error("a token the new release revoked is active on the previous one")
	}

	// The previous release stops: the new one serves alone.
	prev.Stop()
	d.Use(next)
	r := d.Refresh(rt)
	if r.Status != http.StatusOK {
		t.Fatalf("refresh on the new release alone: %d %s", r.Status, r.Raw)
	}
	rt = r.Str("refresh_token")

	// A rollback: the previous release starts again on the migrated schema and serves what the
	// new one wrote.
	again := d.Start("previous-again", prevBin, dsn)
	d.Use(again)
	if !d.Active(r.Str("access_token")) {
		t.Error("rollback: the access token the new release issued is not active")
	}
	if a := d.Refresh(rt); a.Status != http.StatusOK {
		t.Errorf("rollback: refresh of the new release's refresh token: %d %s", a.Status, a.Raw)
	}
	if a := d.Exchange(alice.Str("access_token")); a.Status != http.StatusOK || a.Str("access_token") != ghAlice.Str("access_token") {
		t.Errorf("rollback: exchange for Alice: %d %s", a.Status, a.Raw)
	}
}

// applied lists the migrations recorded in the database, in order.
func applied(t *testing.T, dsn string) []string {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT name FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

func migrationFiles(t *testing.T) int {
	t.Helper()
	files, err := filepath.Glob("../../internal/store/sql/migrations/postgres/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("migrations of this tree: %v", err)
	}
	return len(files)
}

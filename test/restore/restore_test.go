// Package restore backs up a running installation the ways docs/backup-restore.md says, restores
// the backup into a fresh install (a new process on a new database with the same keys file,
// the keys Secret), and checks that what people and agents held still works there: access and
// refresh tokens, a service's token, and a connected account whose token exchange hands out the
// same upstream token. Restored without the keys, the connection asks to be connected again
// (reconnect_required), never a server error, and the tokens, stored hashed, still work.
//
// SQLite is backed up with `latchkey backup --to -` while the server writes (as `kubectl exec`
// runs it), PostgreSQL with pg_dump while the server runs and pg_restore into a new database
// (the binaries under /usr/lib/postgresql/*/bin, and LATCHKEY_TEST_POSTGRES_DSN; skipped without
// them, failing under CI=true). Everything is skipped under -short.
package restore_test

import (
	"bytes"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"latchkey.dev/latchkey/internal/testenv"
	"latchkey.dev/latchkey/test/lkproc"
)

func TestMain(m *testing.M) {
	code := m.Run()
	lkproc.RemoveBuild()
	os.Exit(code)
}

func TestRestoreSQLite(t *testing.T) {
	bin := lkproc.Build(t)
	d := lkproc.NewDemo(t, "")
	db := filepath.Join(t.TempDir(), "latchkey.db")
	original := d.Start("original", bin, "sqlite:"+db)
	d.Use(original)
	h := hold(t, d)

	// The backup is taken while the server serves, and writes: a refresh rotates during it.
	backup := filepath.Join(t.TempDir(), "backup.db")
	out, err := os.Create(backup)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "backup", "--database", "sqlite:"+db, "--to", "-")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.Refresh(d.CodeFlow(d.Browser(lkproc.Mallory, lkproc.MalloryPass)).Str("refresh_token"))
	if err := cmd.Wait(); err != nil {
		t.Fatalf("latchkey backup: %v\n%s", err, stderr.String())
	}
	out.Close()
	t.Log(strings.TrimSpace(stderr.String()))
	original.Stop()

	restore := func() string {
		b, err := os.ReadFile(backup)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "latchkey.db")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return "sqlite:" + path
	}
	d.Use(d.Start("restored", bin, restore()))
	h.check(t, d)
	h.withoutKeys(t, d, bin, restore())
}

func TestRestorePostgres(t *testing.T) {
	testenv.SkipShort(t, "PostgreSQL and the latchkey binary")
	base := os.Getenv("LATCHKEY_TEST_POSTGRES_DSN")
	if base == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("LATCHKEY_TEST_POSTGRES_DSN is not set; CI must run the PostgreSQL tests")
		}
		t.Skip("LATCHKEY_TEST_POSTGRES_DSN is not set")
	}
	pgBin := postgresBin(t)
	bin := lkproc.Build(t)
	d := lkproc.NewDemo(t, "")
	dsn := newDatabase(t, base)
	original := d.Start("original", bin, dsn)
	d.Use(original)
	h := hold(t, d)

	// pg_dump while the server serves: one snapshot of the whole database.
	dump := filepath.Join(t.TempDir(), "latchkey.dump")
	run(t, filepath.Join(pgBin, "pg_dump"), "--format=custom", "--file="+dump, "--dbname="+dsn)
	original.Stop()

	restore := func() string {
		target := newDatabase(t, base)
		run(t, filepath.Join(pgBin, "pg_restore"), "--no-owner", "--exit-on-error", "--dbname="+target, dump)
		return target
	}
	d.Use(d.Start("restored", bin, restore()))
	h.check(t, d)
	h.withoutKeys(t, d, bin, restore())
}

// held is what people and agents hold when the backup is taken.
type held struct {
	access, refresh, service, github string
}

func hold(t *testing.T, d *lkproc.Demo) held {
	t.Helper()
	b := d.Browser(lkproc.Alice, lkproc.AlicePass)
	alice := d.CodeFlow(b)
	service := d.Service("/token", url.Values{"grant_type": {"client_credentials"}})
	if service.Status != http.StatusOK {
		t.Fatalf("client credentials: %d %s", service.Status, service.Raw)
	}
	d.ConnectGitHub(b, d.Exchange(alice.Str("access_token")), "alice-gh", nil)
	gh := d.Exchange(alice.Str("access_token"))
	if gh.Status != http.StatusOK || gh.Str("access_token") == "" {
		t.Fatalf("exchange after connecting: %d %s", gh.Status, gh.Raw)
	}
	return held{alice.Str("access_token"), alice.Str("refresh_token"), service.Str("access_token"), gh.Str("access_token")}
}

// check runs on the restored install.
func (h held) check(t *testing.T, d *lkproc.Demo) {
	t.Helper()
	for what, tok := range map[string]string{"Alice's access token": h.access, "the service's token": h.service} {
		if !d.Active(tok) {
			t.Errorf("restored: %s is not active", what)
		}
	}
	if a := d.Exchange(h.access); a.Status != http.StatusOK || a.Str("access_token") != h.github {
		t.Errorf("restored: exchange for Alice: %d %s; want the GitHub token she connected before the backup", a.Status, a.Raw)
	}
	r := d.Refresh(h.refresh)
	if r.Status != http.StatusOK || r.Str("access_token") == "" {
		t.Fatalf("restored: refresh: %d %s", r.Status, r.Raw)
	}
	if a := d.Exchange(r.Str("access_token")); a.Status != http.StatusOK || a.Str("access_token") != h.github {
		t.Errorf("restored: exchange with the refreshed token: %d %s", a.Status, a.Raw)
	}
}

// withoutKeys starts a fresh install on database with a new sealing key instead of the lost
// one: connections sealed with the lost key cannot be opened, and the exchange says so in the
// protocol's words; what is stored hashed is unaffected.
func (h held) withoutKeys(t *testing.T, d *lkproc.Demo, bin, database string) {
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	d.WriteKeys(map[string][]byte{"2027-01": key})
	d.Use(d.Start("restored-without-keys", bin, database))
	if !d.Active(h.access) {
		t.Error("without the keys: Alice's access token is not active; it is stored hashed, not sealed")
	}
	a := d.Exchange(h.access)
	if a.Status != http.StatusBadRequest || a.Str("reason") != "reconnect_required" {
		t.Errorf("without the keys: exchange for Alice: %d %s; want 400 with reason reconnect_required", a.Status, a.Raw)
	}
	if strings.Contains(string(a.Raw), h.github) {
		t.Error("without the keys: the exchange answer holds the GitHub token")
	}
}

// newDatabase creates a database of the test's own on the server of base, dropped when the test
// ends, and returns its DSN.
func newDatabase(t *testing.T, base string) string {
	t.Helper()
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "lk_restore_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(`CREATE DATABASE ` + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec(`DROP DATABASE ` + name + ` WITH (FORCE)`); err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	q := u.Query()
	q.Del("search_path")
	u.RawQuery = q.Encode()
	return u.String()
}

// postgresBin finds pg_dump and pg_restore as test/stack finds initdb: the newest under
// /usr/lib/postgresql/*/bin.
func postgresBin(t *testing.T) string {
	t.Helper()
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_restore")
	if len(found) == 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("pg_dump and pg_restore not found under /usr/lib/postgresql/*/bin (apt-get install postgresql)")
		}
		t.Skip("pg_dump and pg_restore not found under /usr/lib/postgresql/*/bin")
	}
	version := func(p string) int {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(p))))
		return v
	}
	slices.SortFunc(found, func(a, b string) int { return version(a) - version(b) })
	return filepath.Dir(found[len(found)-1])
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "PGCONNECT_TIMEOUT=30")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", filepath.Base(name), err, out)
	}
}

package main

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestCheckRealDatabase(t *testing.T) {
	for _, db := range []string{"", "postgres://u@h/db", "postgresql://u@h/db?sslmode=disable"} {
		if err := checkRealDatabase(db); err != nil {
			t.Errorf("checkRealDatabase(%q) = %v, want nil", db, err)
		}
	}
	// The SQLite path keeps latchkey's own file in its data directory, as make run-local does:
	// a file named elsewhere is refused rather than silently not used.
	for _, db := range []string{"sqlite:/tmp/x.db", "mysql://h/db"} {
		if err := checkRealDatabase(db); err == nil {
			t.Errorf("checkRealDatabase(%q) = nil, want an error", db)
		}
	}
}

func TestFloorStores(t *testing.T) {
	read, alone, err := floorStores("/tmp/d/latchkey.db")
	if err != nil || read != "sqlite:/tmp/d/latchkey.db" || alone != "sqlite:/tmp/d/latchkey.db.floor-alone" {
		t.Errorf("SQLite: %q, %q, %v; want latchkey's file to read and a file of its own to insert into", read, alone, err)
	}
	dsn := "postgres://postgres@127.0.0.1:5432/db?search_path=bench_1&sslmode=disable"
	read, alone, err = floorStores(dsn)
	if err != nil || read != alone {
		t.Fatalf("PostgreSQL: %q, %q, %v; want one DSN for both", read, alone, err)
	}
	u, err := url.Parse(read)
	if err != nil {
		t.Fatal(err)
	}
	// The floor reads latchkey's schema, and its backends are told apart from latchkey's.
	q := u.Query()
	if q.Get("search_path") != "bench_1" || q.Get("sslmode") != "disable" || q.Get("application_name") != floorAppName {
		t.Errorf("PostgreSQL DSN %q: want latchkey's search_path and sslmode kept, application_name %q", read, floorAppName)
	}
}

func TestBackendCPUSince(t *testing.T) {
	before := backendCPU{1: 10 * time.Millisecond, 2: 50 * time.Millisecond, 3: time.Second}
	// 1 used 20 ms, 2 nothing, 4 connected during the run (counts from zero), 3 went away.
	after := backendCPU{1: 30 * time.Millisecond, 2: 50 * time.Millisecond, 4: 5 * time.Millisecond}
	if got, want := after.since(before), 25*time.Millisecond; got != want {
		t.Errorf("since = %v, want %v", got, want)
	}
	var none *backends
	if c := none.cpu(context.Background(), latchkeyAppName); c.since(nil) != 0 {
		t.Errorf("no database: %v, want nothing", c)
	}
}

func TestProcCPU(t *testing.T) {
	before := procCPU(os.Getpid())
	sum := sha256.Sum256(nil)
	for deadline := time.Now().Add(3 * time.Second); procCPU(os.Getpid()) < before+20*time.Millisecond; {
		if time.Now().After(deadline) {
			t.Fatalf("procCPU did not move after 3 s of work: %v", procCPU(os.Getpid()))
		}
		for range 10_000 {
			sum = sha256.Sum256(sum[:])
		}
	}
	if procCPU(-1) != 0 {
		t.Error("procCPU of no process: want 0")
	}
}

// TestBackendsByApplicationName reads the CPU time of a backend connected under an application
// name, and none of another's. It needs LATCHKEY_TEST_POSTGRES_DSN and the server on this
// machine.
func TestBackendsByApplicationName(t *testing.T) {
	base := os.Getenv("LATCHKEY_TEST_POSTGRES_DSN")
	if base == "" {
		t.Skip("LATCHKEY_TEST_POSTGRES_DSN is not set")
	}
	ctx := context.Background()
	app := "bench-test-" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
	dsn, err := withAppName(base, app)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var pid int
	if err := conn.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	reader, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	b := &backends{db: reader}
	defer b.close()
	c0 := b.cpu(ctx, app)
	if _, ok := c0[pid]; !ok || len(c0) != 1 {
		t.Fatalf("backends of %q: %v, want exactly pid %d", app, c0, pid)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
		t.Skip("the database server is not on this machine")
	}
	// Make the backend work for a measurable time.
	if _, err := conn.ExecContext(ctx, `SELECT count(*) FROM generate_series(1, 3000000)`); err != nil {
		t.Fatal(err)
	}
	if d := b.cpu(ctx, app).since(c0); d < 10*time.Millisecond {
		t.Errorf("backend CPU over a 3,000,000-row count: %v, want at least 10 ms", d)
	}
	if other := b.cpu(ctx, app+"-other"); len(other) != 0 {
		t.Errorf("another application name: %v, want no backends", other)
	}
}

// TestReportRealDatabaseColumn: on PostgreSQL the report has the database's CPU per request
// and the ratio of both CPUs to the floor's; on SQLite it is the table it always was.
func TestReportRealDatabaseColumn(t *testing.T) {
	results := []result{
		{scenario: "floor", run: 1, ok: 1000, elapsed: time.Second, cpu: 100 * time.Millisecond, dbCPU: 100 * time.Millisecond},
		{scenario: "exchange_ok", run: 1, ok: 500, elapsed: time.Second, cpu: 150 * time.Millisecond, dbCPU: 250 * time.Millisecond},
	}
	o := options{binary: "bin/latchkey", people: 10, concurrency: 16, runs: 1}
	pg := captureStdout(t, func() { reportReal(o, "PostgreSQL (127.0.0.1:5432, schema bench_1)", results) })
	for _, want := range []string{
		"- database: PostgreSQL (127.0.0.1:5432, schema bench_1)",
		"| server CPU µs/req | database CPU µs/req | × its floor |",
		// 300 µs and 500 µs a request in the process and the database, against 100 and 100.
		"| exchange_ok | 1 | 500 | 0.00 | 0.00 | 0 | 300 | 500 | 0.50× |",
		"server CPU per request 3.00× the floor's; server and database CPU per request 4.00× the floor's",
	} {
		if !strings.Contains(pg, want) {
			t.Errorf("PostgreSQL report lacks %q:\n%s", want, pg)
		}
	}
	lite := captureStdout(t, func() { reportReal(o, "", results) })
	if strings.Contains(lite, "database") {
		t.Errorf("SQLite report mentions the database's CPU:\n%s", lite)
	}
	if !strings.Contains(lite, "| exchange_ok | 1 | 500 | 0.00 | 0.00 | 0 | 300 | 0.50× |") {
		t.Errorf("SQLite report's row changed:\n%s", lite)
	}
}

func captureStdout(t *testing.T, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	fn()
	os.Stdout = old
	w.Close()
	return <-done
}

func TestAdminDSN(t *testing.T) {
	got := adminDSN("postgres://postgres@127.0.0.1:5432/db?sslmode=disable&pool_max_conns=4")
	if got != "postgres://postgres@127.0.0.1:5432/db?sslmode=disable" {
		t.Errorf("adminDSN = %q: want pool_max_conns gone and the rest kept", got)
	}
}

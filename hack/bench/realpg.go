package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// The real binary on PostgreSQL (-binary bin/latchkey -database postgres://…).
//
// latchkey serve is given --database with a fresh schema (made and dropped as the in-process
// harness does, fixture.go's database), the harness seeds that schema through the store, and
// the floor process opens the same schema: /floor reads one token from latchkey's tables and
// /floor_insert_alone stores one token in them, each insert its own transaction (PostgreSQL
// has no group commit to leave out). Each process connects with an application_name of its
// own, so the CPU time of the database backends serving it can be read from /proc beside its
// own: on PostgreSQL much of a request's cost is the server's, not the process's.

const (
	latchkeyAppName = "latchkey-bench"
	floorAppName    = "latchkey-bench-floor"
)

func isPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// checkRealDatabase accepts -database for -binary: empty (SQLite in latchkey's data directory,
// as make run-local has it) or a PostgreSQL DSN.
func checkRealDatabase(db string) error {
	if db == "" || isPostgres(db) {
		return nil
	}
	return errors.New("-binary runs on SQLite in the data directory, as make run-local does, or on PostgreSQL " +
		"(-database postgres://…, in a fresh schema); not on " + strings.SplitN(db, ":", 2)[0])
}

// withAppName is dsn connecting as application name.
func withAppName(dsn, name string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("-database: %w", err)
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// adminDSN is dsn for the harness's own connection: without pool_max_conns, which the store
// reads (the size of latchkey's and the floor's pools) and pgx alone would send to the server
// as a setting it does not know.
func adminDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn // sql.Open reports it
	}
	q := u.Query()
	q.Del("pool_max_conns")
	u.RawQuery = q.Encode()
	return u.String()
}

// floorStores is what the floor process opens, given -floor-serve's argument: on SQLite,
// latchkey's file to read and a file of its own for the inserts, each committed alone; on
// PostgreSQL, latchkey's schema for both.
func floorStores(arg string) (read, alone string, err error) {
	if !isPostgres(arg) {
		return "sqlite:" + arg, "sqlite:" + arg + ".floor-alone", nil
	}
	dsn, err := withAppName(arg, floorAppName)
	return dsn, dsn, err
}

// backends reads the CPU time of the PostgreSQL backends connected with an application name,
// through a connection of the harness's own. It needs the database server on this machine
// (its processes' /proc entries); elsewhere it reads nothing and the column stays empty.
type backends struct{ db *sql.DB }

// backendCPU is each backend's CPU time by process id.
type backendCPU map[int]time.Duration

func (b *backends) cpu(ctx context.Context, app string) backendCPU {
	if b == nil {
		return nil
	}
	rows, err := b.db.QueryContext(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, app)
	if err != nil {
		return nil
	}
	defer rows.Close()
	c := backendCPU{}
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) == nil {
			c[pid] = procCPU(pid)
		}
	}
	return c
}

// since is the CPU time used between before and c; a backend that connected in between
// counts from zero. A backend that disconnected in between is missed: the pools keep their
// connections for minutes, far longer than a run.
func (c backendCPU) since(before backendCPU) time.Duration {
	var d time.Duration
	for pid, t := range c {
		d += t - before[pid]
	}
	return d
}

func (b *backends) close() {
	if b != nil {
		b.db.Close()
	}
}

// procCPU is the user and system CPU time of process pid, from /proc/<pid>/stat; zero when
// it cannot be read.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces) start after the last ')'; utime
	// and stime are fields 14 and 15 of the line, in clock ticks (100 a second on Linux).
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 > len(b) {
		return 0
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}

// openDatabase chooses latchkey's database: its SQLite file in the data directory (dbPath), as
// make run-local has it, or with -database postgres://… a fresh schema, and a reader of the
// backends' CPU. It returns the DSN to seed through, -floor-serve's argument and the flags
// latchkey is started with.
func (f *realFixture) openDatabase(ctx context.Context, dbPath string) (seed, floor string, args []string, err error) {
	if !isPostgres(f.o.database) {
		return "sqlite:" + dbPath, dbPath, nil, nil
	}
	dsn, label, drop, err := database(ctx, f.o)
	if err != nil {
		return "", "", nil, err
	}
	f.dbLabel, f.dropDB = label, drop
	latchkeyDSN, err := withAppName(dsn, latchkeyAppName)
	if err != nil {
		return "", "", nil, err
	}
	db, err := sql.Open("pgx", adminDSN(f.o.database))
	if err != nil {
		return "", "", nil, err
	}
	db.SetMaxOpenConns(1)
	f.backends = &backends{db: db}
	return dsn, dsn, []string{"--database", latchkeyDSN}, nil
}

package sqlstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/ratelimit"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/store/conformance"
	"latchkey.dev/latchkey/internal/store/sql/pgtest"
)

func TestSQLite(t *testing.T) {
	conformance.Run(t, func(t *testing.T) store.Store { return openTest(t, sqliteDSN(t)) })
}

func TestPostgres(t *testing.T) {
	pgtest.SkipShort(t)
	if os.Getenv("LATCHKEY_TEST_POSTGRES_DSN") == "" {
		t.Skip("LATCHKEY_TEST_POSTGRES_DSN is not set; set it to a postgres:// URL to run the PostgreSQL tests")
	}
	conformance.Run(t, func(t *testing.T) store.Store {
		// Each test waits on the server more than on the CPU; let them overlap (-parallel),
		// with pools small enough that -parallel 8 stays under max_connections (100).
		t.Parallel()
		return openTest(t, postgresDSN(t)+"&pool_max_conns=8")
	})
}

// TestPgBouncer runs the conformance suite through PgBouncer in transaction mode, configured
// as docs/operations.md asks ("PostgreSQL in production"): every transaction may run on a
// different server connection, so nothing the store does may depend on session state.
func TestPgBouncer(t *testing.T) {
	pgtest.SkipShort(t)
	if os.Getenv(pgtest.EnvPgBouncerDSN) == "" && os.Getenv("CI") != "true" {
		t.Skip(pgtest.EnvPgBouncerDSN + " is not set; set it to the postgres:// URL of a PgBouncer in transaction mode to run these tests")
	}
	conformance.Run(t, func(t *testing.T) store.Store {
		t.Parallel()
		return openTest(t, pgtest.PgBouncerDSN(t)+"&pool_max_conns=8")
	})
}

// A pooler that drops the search_path the DSN sets (PgBouncer's ignore_startup_parameters,
// as .ci/run configures it and managed poolers offer) would have the migrations create the
// tables in the role's default schema: Open refuses instead and says what to do. The role's
// default schema stays empty.
func TestPgBouncerDroppedSearchPath(t *testing.T) {
	for name, param := range map[string]func(schema string) (string, string){
		"search_path": func(schema string) (string, string) { return "search_path", schema },
		"options":     func(schema string) (string, string) { return "options", "-c search_path=" + schema },
	} {
		t.Run(name, func(t *testing.T) {
			bouncer := pgtest.PgBouncerDSN(t) // as a role whose default search_path is its own schema
			u, err := url.Parse(bouncer)
			if err != nil {
				t.Fatal(err)
			}
			role := u.User.Username()
			wanted := schemaOf(t, postgresDSN(t))
			// pgx reads a + in the query as itself, not as a space.
			key, value := param(wanted)
			u.RawQuery += "&" + key + "=" + strings.ReplaceAll(url.QueryEscape(value), "+", "%20")
			s, err := Open(t.Context(), u.String())
			if err == nil {
				s.Close()
				t.Errorf("Open through a pooler that dropped search_path=%s succeeded", wanted)
			} else if !strings.Contains(err.Error(), "ALTER ROLE") || !strings.Contains(err.Error(), wanted) {
				t.Errorf("Open: %v; want an error that names the schema and ALTER ROLE … SET search_path", err)
			}
			admin, err := sql.Open("pgx", os.Getenv(pgtest.EnvDSN))
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			var tables int
			if err := admin.QueryRow(`SELECT count(*) FROM pg_tables WHERE schemaname = $1`, role).Scan(&tables); err != nil {
				t.Fatal(err)
			}
			if tables != 0 {
				t.Errorf("the role's default schema %s has %d tables, want none", role, tables)
			}
		})
	}
}

// Through a transaction-mode pooler without default_query_exec_mode=cache_describe, pgx's
// named prepared statements meet server connections that do not know them, or already do:
// each such error says what to add to the DSN.
func TestPgBouncerNamedStatementsHint(t *testing.T) {
	dsn := strings.Replace(pgtest.PgBouncerDSN(t), "default_query_exec_mode=cache_describe", "default_query_exec_mode=cache_statement", 1)
	const hint = "add default_query_exec_mode=cache_describe to the DSN"
	s, err := Open(t.Context(), dsn+"&pool_max_conns=8")
	if err != nil {
		if !strings.Contains(err.Error(), hint) {
			t.Fatalf("Open: %v; want the pooler advice", err)
		}
		return
	}
	defer s.Close()
	var (
		mu     sync.Mutex
		failed []error
		wg     sync.WaitGroup
	)
	for w := range 8 {
		wg.Go(func() {
			for i := range 50 {
				a, r := benchPair("hint"+strconv.Itoa(w), int64(i))
				err := s.CreateTokens(t.Context(), a, r)
				if err == nil {
					_, err = s.GetToken(t.Context(), a.Hash)
				}
				if err != nil {
					mu.Lock()
					failed = append(failed, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(failed) == 0 {
		t.Fatal("no operation failed through the pooler with named prepared statements; the test no longer shows the symptom")
	}
	for _, err := range failed {
		if !strings.Contains(err.Error(), hint) {
			t.Errorf("%v; want the pooler advice", err)
		}
	}
	t.Logf("%d of 800 operations failed, each with the advice", len(failed))
}

func TestSearchPathParam(t *testing.T) {
	for _, c := range []struct {
		params map[string]string
		want   string
	}{
		{nil, ""},
		{map[string]string{"search_path": "latchkey"}, "latchkey"},
		{map[string]string{"search_path": "a", "options": "-c search_path=b"}, "a"},
		{map[string]string{"options": "-c search_path=latchkey"}, "latchkey"},
		{map[string]string{"options": "-csearch_path=latchkey,public"}, "latchkey,public"},
		{map[string]string{"options": "--search-path=x -c statement_timeout=5s"}, "x"},
		{map[string]string{"options": `-c statement_timeout=5s  -c SEARCH_PATH=my\ schema`}, "my schema"},
		{map[string]string{"options": "-c search_path=a -c search_path=b"}, "b"},
		{map[string]string{"options": "-c statement_timeout=5s"}, ""},
	} {
		if got := searchPathParam(c.params); got != c.want {
			t.Errorf("searchPathParam(%q) = %q, want %q", c.params, got, c.want)
		}
	}
}

func openTest(t testing.TB, dsn string) *Store {
	t.Helper()
	s, err := Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func sqliteDSN(t testing.TB) string {
	return "sqlite:" + filepath.Join(t.TempDir(), "latchkey.db")
}

// postgresDSN gives one test its own empty schema (internal/store/sql/pgtest).
func postgresDSN(t testing.TB) string { return pgtest.DSN(t) }

func schemaOf(t testing.TB, dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query().Get("search_path")
}

func TestOpenRejects(t *testing.T) {
	for _, dsn := range []string{"", "mysql://x", "sqlite:", "sqlite::memory:", "sqlite:/tmp/x.db?mode=ro"} {
		if s, err := Open(t.Context(), dsn); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", dsn)
		}
	}
}

// Replicas (or a restart) opening one database at the same time: the migrations are applied
// once and everyone starts.
func TestConcurrentOpen(t *testing.T) {
	for name, dsn := range map[string]func(testing.TB) string{"sqlite": sqliteDSN, "postgres": postgresDSN, "pgbouncer": pgtest.PgBouncerDSN} {
		t.Run(name, func(t *testing.T) {
			dsn := dsn(t)
			const n = 4
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					s, err := Open(t.Context(), dsn)
					if err == nil {
						err = s.Ping(t.Context())
						s.Close()
					}
					errs[i] = err
				})
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			s := openTest(t, dsn)
			var versions int
			if err := s.w.QueryRow(`SELECT COUNT(*) FROM schema_migrations`).Scan(&versions); err != nil {
				t.Fatal(err)
			}
			ms, err := migrations(s.d.name)
			if err != nil {
				t.Fatal(err)
			}
			if versions != len(ms) {
				t.Fatalf("schema_migrations has %d rows, want %d", versions, len(ms))
			}
		})
	}
}

// On SQLite the upstream refresh inside UpdateConnection must not hold the database write lock:
// token requests go on meanwhile. (Were the lock held, the write inside fn would never finish.)
func TestSQLiteUpdateConnectionLeavesWritesFree(t *testing.T) {
	s := openTest(t, sqliteDSN(t))
	ctx := t.Context()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	c, err := s.SaveConnection(ctx, store.Connection{ID: "c1", Project: "p", Subject: "alice", Connector: "github",
		AccountID: "1", CreatedAt: now, UpdatedAt: now})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.UpdateConnection(ctx, "p", c.ID, func(c store.Connection) (store.Connection, error) {
		a, r := benchPair("during-refresh", 0)
		return c, s.CreateTokens(ctx, a, r)
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetToken(ctx, hashOf("during-refresh0/at")); err != nil {
		t.Fatal(err)
	}
}

// While one replica collects, another returns at once with nothing done.
func TestPostgresGCOneReplica(t *testing.T) {
	dsn := postgresDSN(t)
	s := openTest(t, dsn)
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	tx, err := admin.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`SELECT pg_advisory_xact_lock(hashtext($1 || ':latchkey:gc'))`, schemaOf(t, dsn)); err != nil {
		t.Fatal(err)
	}
	res, err := s.GarbageCollect(t.Context(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 0 {
		t.Fatalf("GarbageCollect while another replica holds the lock = %v, want empty", res)
	}
	tx.Rollback()
	res, err = s.GarbageCollect(t.Context(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := res["tokens"]; !ok {
		t.Fatalf("GarbageCollect after the lock was released = %v, want a full result", res)
	}
}

// Every hot lookup must use an index: a full scan would grow with the number of people.
// TestSQLitePageSize: a new database is created with 8 KiB pages (see openSQLite); one created
// with another page size keeps it.
func TestSQLitePageSize(t *testing.T) {
	pageSize := func(s *Store) (n int) {
		t.Helper()
		if err := s.w.QueryRow(`PRAGMA page_size`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := pageSize(openTest(t, sqliteDSN(t))); n != 8192 {
		t.Errorf("new database: page_size %d, want 8192", n)
	}
	path := filepath.Join(t.TempDir(), "old.db")
	old, err := sql.Open("sqlite", path+"?_pragma=page_size(4096)&_journal_mode=WAL")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Exec(`CREATE TABLE before_latchkey (x)`); err != nil {
		t.Fatal(err)
	}
	old.Close()
	if n := pageSize(openTest(t, "sqlite:"+path)); n != 4096 {
		t.Errorf("existing database: page_size %d, want the 4096 it was created with", n)
	}
}

func TestSQLiteQueryPlans(t *testing.T) {
	s := openTest(t, sqliteDSN(t))
	queries := []string{
		qGetToken, qLockToken, qSuccessors, qRevokeHolder, qRevokeClient, qRevokeFamily, qRevokeByCode, qCountLive,
		qGetSession, qGetCallback, qConsumeCallback, qLinkByCode, qOpenLinkFor, qOpenLinkRead, qRedeemCode, qGetConnection,
		qListConnections, qFindPermission, qListPermissions, qGetGrant, qListGrants, qDeleteClientGrant,
		qDeleteClientPerm, qClaim, qDepth, qListAudit, qGetClient, qListClients, qAuditAfter, qLinkByID,
		qAgentAccess, qEndCallbacks, qEndSessions, qRevokePerson, qEndPersonCheck, qPersonBySource, qPeopleBySID,
		qLockPersonCheck, qUpdatePersonCheck, qSubjectAccess, qTokenHolder, qRateLock, qRevokeAppPerms,
	}
	for _, g := range sqliteGC {
		queries = append(queries, g.query)
	}
	for _, query := range queries {
		rows, err := s.w.Query(`EXPLAIN QUERY PLAN `+query, slices.Repeat([]any{nil}, countArgs(query))...)
		if err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		t.Logf("%.60q… %v", query, plan)
		for _, step := range plan {
			// The outbox depth walks the partial index of undelivered events, which is the
			// answer's own size.
			if query == qDepth && strings.HasPrefix(step, "SCAN events USING COVERING INDEX events_due") ||
				query == qDepth && strings.HasPrefix(step, "SCAN events USING INDEX events_due") {
				continue
			}
			if strings.HasPrefix(step, "SCAN") {
				t.Errorf("full scan in %q:\n%v", query, plan)
			}
		}
	}
}

func countArgs(q string) int {
	n := 0
	for i := range len(q) {
		if q[i] == '?' {
			n++
		}
	}
	return n
}

// ---------------------------------------------------------------------------------------------
// Benchmarks. Each runs on SQLite and, when LATCHKEY_TEST_POSTGRES_DSN is set, on PostgreSQL,
// with 16 concurrent callers (the load target), and reports latency percentiles.

var backends = []struct {
	name string
	dsn  func(testing.TB) string
}{{"sqlite", sqliteDSN}, {"postgres", postgresDSN}, {"pgbouncer", pgtest.PgBouncerDSN}}

var bench = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// concurrent runs op b.N times across 16 goroutines and reports p50 and p99 latency.
func concurrent(b *testing.B, op func(worker int, i int64) error) {
	const callers = 16
	var next atomic.Int64
	lat := make([][]time.Duration, callers)
	errs := make([]error, callers)
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := range callers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				start := time.Now()
				if err := op(w, i); err != nil {
					errs[w] = err
					return
				}
				lat[w] = append(lat[w], time.Since(start))
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	}
}

func benchPair(prefix string, i int64) (store.Token, store.Token) {
	fam := prefix + strconv.FormatInt(i, 10)
	a := store.Token{Hash: hashOf(fam + "/at"), Kind: store.AccessToken, Project: "bench/p", ClientID: "c" + strconv.FormatInt(i%50, 10),
		Subject: "u" + strconv.FormatInt(i%1000, 10), Scopes: []string{"read", "write"}, Audience: []string{"https://mcp.example/"},
		FamilyID: fam, AuthTime: bench, IssuedAt: bench, ExpiresAt: bench.Add(time.Hour)}
	r := a
	r.Hash, r.Kind, r.ExpiresAt = hashOf(fam+"/rt"), store.RefreshToken, bench.Add(30*24*time.Hour)
	return a, r
}

func hashOf(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

func BenchmarkCreateTokens(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			s := openTest(b, be.dsn(b))
			concurrent(b, func(_ int, i int64) error {
				a, r := benchPair("f", i)
				return s.CreateTokens(b.Context(), a, r)
			})
			if s.group != nil {
				b.ReportMetric(float64(s.group.calls.Load())/float64(max(1, s.group.groups.Load())), "calls/group")
			}
		})
	}
}

func BenchmarkGetToken(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			s := openTest(b, be.dsn(b))
			const n = 10000
			for i := range int64(n) {
				a, r := benchPair("f", i)
				if err := s.CreateTokens(b.Context(), a, r); err != nil {
					b.Fatal(err)
				}
			}
			concurrent(b, func(_ int, i int64) error {
				_, err := s.GetToken(b.Context(), hashOf("f"+strconv.FormatInt(i*7919%n, 10)+"/at"))
				return err
			})
		})
	}
}

// BenchmarkRotate: each caller walks its own refresh chain, one rotation per operation.
func BenchmarkRotate(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			s := openTest(b, be.dsn(b))
			const callers = 16
			head := make([][]byte, callers)
			for w := range callers {
				a, r := benchPair("chain", int64(w))
				if err := s.CreateTokens(b.Context(), a, r); err != nil {
					b.Fatal(err)
				}
				head[w] = r.Hash
			}
			concurrent(b, func(w int, i int64) error {
				a, r := benchPair("next", i)
				a.FamilyID, r.FamilyID, a.ClientID, r.ClientID, a.Subject, r.Subject = "", "", "", "", "", ""
				rot, err := s.RotateRefreshToken(b.Context(), store.RotateRequest{OldHash: head[w],
					New: []store.Token{a, r}, Sealed: make([]byte, 600), Now: bench, Grace: 10 * time.Second})
				if err != nil {
					return err
				}
				if rot.Outcome != store.OutcomeRotated {
					return fmt.Errorf("outcome %v", rot.Outcome)
				}
				head[w] = r.Hash
				return nil
			})
		})
	}
}

// BenchmarkSQLiteWriters compares the chosen design (one write connection behind a FIFO gate,
// checkpoints in the background) with one write connection that checkpoints itself and with
// pools of write connections contending through SQLite's busy handler (see openSQLite).
func BenchmarkSQLiteWriters(b *testing.B) {
	for _, c := range []struct {
		name string
		o    sqliteOptions
	}{
		{"one-writer", sqliteOptions{}},
		{"one-writer-ungrouped", sqliteOptions{noGroup: true}},
		{"one-writer-autocheckpoint", sqliteOptions{autoCheckpoint: true}},
		{"pool-4", sqliteOptions{writers: 4}},
		{"pool-16", sqliteOptions{writers: 16}},
	} {
		b.Run(c.name, func(b *testing.B) {
			s, err := openSQLite(filepath.Join(b.TempDir(), "w.db"), c.o)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if err := s.start(b.Context()); err != nil {
				b.Fatal(err)
			}
			concurrent(b, func(_ int, i int64) error {
				a, r := benchPair("f", i)
				return s.CreateTokens(b.Context(), a, r)
			})
			if s.group != nil {
				b.ReportMetric(float64(s.group.calls.Load())/float64(max(1, s.group.groups.Load())), "calls/group")
			}
		})
	}
}

// BenchmarkPostgresTokenSizes fills the tokens table with b.N tokens (access and refresh in
// pairs, shaped as the code flow stores them: random 32-byte hashes and family ids, 50 clients,
// 10,000 people, issued over an hour) and reports the table's and each index's size in MB,
// for docs/operations.md ("PostgreSQL in production"):
//
//	go test ./internal/store/sql -run '^$' -bench PostgresTokenSizes -benchtime 1000000x
func BenchmarkPostgresTokenSizes(b *testing.B) {
	s := openTest(b, postgresDSN(b))
	ctx := b.Context()
	now := time.Now().UnixNano()
	const batch = 100000 // pairs per statement
	b.ResetTimer()
	for first := int64(0); first < int64(b.N)/2; first += batch {
		last := min(first+batch, int64(b.N)/2) - 1
		_, err := s.w.ExecContext(ctx, `INSERT INTO tokens (hash, kind, project, client_id, subject, scopes,
	audience, family_id, generation, code_hash, auth_time, issued_at, expires_at)
SELECT decode(md5('h' || g || k) || md5('i' || g || k), 'hex'), k, 'team-a/default',
	md5('client' || g % 50), md5('person' || g % 10000), '["read","write"]',
	'["https://mcp.example.com/"]', md5('family' || g), 0,
	decode(md5('c' || g) || md5('d' || g), 'hex'), t, t,
	t + CASE k WHEN 'access' THEN 3600000000000 ELSE 2592000000000000 END
FROM generate_series($1::bigint, $2::bigint) g,
	(VALUES ('access'), ('refresh')) v(k),
	LATERAL (SELECT $3::bigint - g * 7919 % 3600000000000 AS t) x`, first, last, now)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportSizes(b, s, "tokens")
}

// reportSizes reports the size of table and of each of its indexes, after VACUUM ANALYZE.
func reportSizes(b *testing.B, s *Store, table string) {
	ctx := b.Context()
	if _, err := s.w.ExecContext(ctx, `VACUUM ANALYZE `+table); err != nil {
		b.Fatal(err)
	}
	rows, err := s.w.QueryContext(ctx, `SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace
	AND (c.relname = $1 OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = $1::regclass))`, table)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var size int64
		if err := rows.Scan(&name, &size); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(size)/(1<<20), name+"-MB")
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPostgresAuditSizes measures the audit log on PostgreSQL: b.N records shaped as the
// token endpoint writes them (token.issued of the code flow, one a second apart, relayed), for
// docs/operations.md. Run with -benchtime 1000000x.
func BenchmarkPostgresAuditSizes(b *testing.B) {
	s := openTest(b, postgresDSN(b))
	ctx := b.Context()
	start := time.Now().Add(-time.Duration(b.N) * time.Second).UnixNano()
	const batch = 200000
	b.ResetTimer()
	for first := int64(0); first < int64(b.N); first += batch {
		last := min(first+batch, int64(b.N)) - 1
		_, err := s.w.ExecContext(ctx, `INSERT INTO audit (project, time, actor, action, target, details,
	client_id, connector, outcome, reason, pending)
SELECT 'team-a/default', $3::bigint + g * 1000000000, 'client:' || md5('client' || g % 50), 'token.issued',
	md5('person' || g % 10000),
	'{"family_id":"' || left(md5('family' || g), 22) || '","grant_type":"authorization_code","refresh_token":"issued","scope":"read write"}',
	md5('client' || g % 50), '', 'success', '', 0
FROM generate_series($1::bigint, $2::bigint) g`, first, last, start)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportSizes(b, s, "audit")
}

// Close stores what was queued: a replica shut down cleanly loses no audit record.
func TestQueuedAuditStoredOnClose(t *testing.T) {
	dsns := map[string]string{"sqlite": sqliteDSN(t)}
	if os.Getenv("LATCHKEY_TEST_POSTGRES_DSN") != "" {
		dsns["postgres"] = postgresDSN(t)
	}
	for name, dsn := range dsns {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			s, err := Open(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			const n = 1234
			for i := range n {
				if err := s.QueueAudit(ctx, store.AuditRecord{Project: "team-a/main", Time: time.Unix(int64(i), 0), Actor: "client:c",
					Action: "token.issued", Target: fmt.Sprint(i)}); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openTest(t, dsn)
			got, err := s.ListAudit(ctx, "team-a/main", n+1)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != n || got[0].Target != fmt.Sprint(n-1) || got[n-1].Target != "0" {
				t.Fatalf("after Close and Open: %d records (want %d), newest %q", len(got), n, got[0].Target)
			}
		})
	}
}

// A record AppendAuditBatched returned for is committed: another store on the same database (a
// process started after this one was killed) reads it, with nothing flushed or closed. Many
// callers at once share the writes.
func TestBatchedAuditIsCommittedOnReturn(t *testing.T) {
	dsns := map[string]string{"sqlite": sqliteDSN(t)}
	if os.Getenv("LATCHKEY_TEST_POSTGRES_DSN") != "" {
		dsns["postgres"] = postgresDSN(t)
	}
	for name, dsn := range dsns {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			writer, reader := openTest(t, dsn), openTest(t, dsn)
			const callers, each = 16, 20
			var wg sync.WaitGroup
			for w := range callers {
				wg.Go(func() {
					for i := range each {
						target := fmt.Sprintf("%d-%d", w, i)
						// Queued records beside them, written behind.
						if err := writer.QueueAudit(ctx, store.AuditRecord{Project: "team-a/main", Time: time.Unix(int64(i), 0),
							Actor: "client:c", Action: "token.issued", Target: "queued-" + target}); err != nil {
							t.Error(err)
							return
						}
						if err := writer.AppendAuditBatched(ctx, store.AuditRecord{Project: "team-a/main", Time: time.Unix(int64(i), 0),
							Actor: "client:c", Action: "token.exchanged", Target: target}); err != nil {
							t.Error(err)
							return
						}
						got, err := reader.ListAudit(ctx, "team-a/main", 4*callers*each)
						if err != nil {
							t.Error(err)
							return
						}
						if !slices.ContainsFunc(got, func(r store.AuditRecord) bool { return r.Target == target }) {
							t.Errorf("record %s: returned, but another store does not read it", target)
							return
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

// Audit retention deletes old records the relay has handed on, never one still pending, and
// nothing at all when no retention is set.
func TestAuditRetention(t *testing.T) {
	dsns := map[string]func(testing.TB) string{"sqlite": sqliteDSN}
	if os.Getenv("LATCHKEY_TEST_POSTGRES_DSN") != "" {
		dsns["postgres"] = postgresDSN
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for name, dsn := range dsns {
		for _, keep := range []time.Duration{0, 30 * 24 * time.Hour} {
			t.Run(fmt.Sprintf("%s/retention=%s", name, keep), func(t *testing.T) {
				ctx := t.Context()
				s, err := Open(ctx, dsn(t), AuditRetention(keep))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				rec := func(target string, age time.Duration) {
					if err := s.AppendAudit(ctx, store.AuditRecord{Project: "team-a/main", Time: now.Add(-age), Actor: "alice",
						Action: "signin.succeeded", Target: target}); err != nil {
						t.Fatal(err)
					}
				}
				rec("old-relayed", 40*24*time.Hour)
				rec("recent-relayed", 20*24*time.Hour)
				if _, err := s.RelayAudit(ctx, 100, func([]store.AuditRecord) ([]store.Event, error) { return nil, nil }); err != nil {
					t.Fatal(err)
				}
				rec("old-pending", 50*24*time.Hour) // the relay has not seen it: its sinks have not
				res, err := s.GarbageCollect(ctx, now)
				if err != nil {
					t.Fatal(err)
				}
				got, err := s.ListAudit(ctx, "team-a/main", 10)
				if err != nil {
					t.Fatal(err)
				}
				var left []string
				for _, r := range got {
					left = append(left, r.Target)
				}
				slices.Sort(left)
				want := []string{"old-pending", "old-relayed", "recent-relayed"}
				if keep > 0 {
					want = []string{"old-pending", "recent-relayed"}
					if res["audit"] != 1 {
						t.Errorf("GarbageCollect reports %d audit records removed, want 1 (%v)", res["audit"], res)
					}
				} else if _, ok := res["audit"]; ok {
					t.Errorf("GarbageCollect without a retention looked at the audit log: %v", res)
				}
				if !slices.Equal(left, want) {
					t.Errorf("records left %v, want %v", left, want)
				}
			})
		}
	}
}

// Two replicas (two stores on one database) limiting through the store spend from one bucket:
// an attacker who spreads attempts over the replicas gets the limit once, not once per replica.
func TestSharedRateLimit(t *testing.T) {
	dsns := map[string]func(testing.TB) string{"sqlite": sqliteDSN}
	if os.Getenv("LATCHKEY_TEST_POSTGRES_DSN") != "" {
		dsns["postgres"] = postgresDSN
	}
	for name, dsn := range dsns {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			d := dsn(t)
			a, b := openTest(t, d), openTest(t, d)
			const burst = 5
			replicas := []*ratelimit.Limiter{
				ratelimit.New(burst, time.Minute).Share(a, "signin.account"),
				ratelimit.New(burst, time.Minute).Share(b, "signin.account"),
			}
			now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

			// Forty guesses at once, half on each replica: exactly the burst gets through.
			var granted atomic.Int64
			var wg sync.WaitGroup
			for i := range 40 {
				wg.Go(func() {
					if ok, _ := replicas[i%2].Take(ctx, "10.0.0.1|alice", now); ok {
						granted.Add(1)
					}
				})
			}
			wg.Wait()
			if n := granted.Load(); n != burst {
				t.Fatalf("%d of 40 attempts across two replicas granted, want %d", n, burst)
			}
			ok, wait := replicas[1].Take(ctx, "10.0.0.1|alice", now.Add(30*time.Second))
			if ok || wait != 30*time.Second {
				t.Fatalf("after the burst, half a refill later: %v, wait %v; want refused, 30s", ok, wait)
			}
			// A replica whose clock is behind neither refills the bucket nor rewinds it.
			if ok, _ := replicas[0].Take(ctx, "10.0.0.1|alice", now.Add(-time.Hour)); ok {
				t.Fatal("a replica with a slow clock was granted an attempt")
			}
			// A refund on one replica is seen by the other; other keys are untouched.
			replicas[0].Refund(ctx, "10.0.0.1|alice", now.Add(30*time.Second))
			if ok, _ := replicas[1].Take(ctx, "10.0.0.1|alice", now.Add(30*time.Second)); !ok {
				t.Fatal("the refund on the other replica was not seen")
			}
			if ok, _ := replicas[1].Take(ctx, "10.0.0.2|alice", now); !ok {
				t.Fatal("another key shares the bucket")
			}
			// Another limiter's name is another bucket, though the key is the same.
			other := ratelimit.New(1, time.Minute).Share(a, "register.address")
			if ok, _ := other.Take(ctx, "10.0.0.1|alice", now); !ok {
				t.Fatal("another limiter shares the bucket")
			}
			// Buckets full again are forgotten by the garbage collector, the others kept.
			res, err := a.GarbageCollect(ctx, now.Add(2*time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if res["rate_buckets"] != 2 {
				t.Errorf("collected %d buckets two minutes on, want 2 (the one-attempt ones; alice's is full at 5 min): %v", res["rate_buckets"], res)
			}
			if ok, _ := replicas[0].Take(ctx, "10.0.0.1|alice", now.Add(2*time.Minute)); !ok {
				t.Fatal("alice's bucket did not refill after two minutes")
			}
		})
	}
}

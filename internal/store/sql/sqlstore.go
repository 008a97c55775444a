// Package sqlstore implements store.Store on SQLite (embedded, one replica) and PostgreSQL
// (production, any number of replicas) with one body of SQL and a small dialect layer.
//
// Conventions that hold for both backends:
//   - times are BIGINT Unix nanoseconds in UTC (sub-second precision, no time-zone or driver
//     conversion differences); NULL means "not set";
//   - string lists and maps are JSON text;
//   - queries are written with ? placeholders and rewritten to $n for PostgreSQL once;
//   - every multi-row change runs in one transaction; PostgreSQL runs at READ COMMITTED, so
//     races are settled by row locks (FOR UPDATE), conditional updates and unique indexes.
package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/tracing"
)

// Store is a store.Store backed by SQLite or PostgreSQL. Open it with Open.
type Store struct {
	d dialect
	// w runs every write and every transaction. On SQLite it holds exactly one connection,
	// see openSQLite for why.
	w *sql.DB
	// r runs single-statement reads. On PostgreSQL it is w.
	r *sql.DB
	// gate admits one writer at a time to w when w has a single connection (see enter).
	gate chan struct{}
	// ck checkpoints the SQLite WAL in the background (see openSQLite); nil otherwise.
	ck             *sql.DB
	ckStop, ckDone chan struct{}
	// ckEvery and walRestartFrames are checkpointEvery and walRestartFrames, smaller in tests.
	ckEvery          time.Duration
	walRestartFrames int64
	// restartAfter is when the checkpointer may try a restart again, and restartPause the
	// pause it takes after the next restart a reader holds back (its goroutine only);
	// restartsTried counts its tries, for tests.
	restartAfter  time.Time
	restartPause  time.Duration
	restartsTried atomic.Int64

	rebound sync.Map // query with ? placeholders -> dialect text
	stmts   sync.Map // stmtKey -> *sql.Stmt (SQLite only)

	// group commits concurrent writers together on SQLite (see group.go); nil otherwise.
	group *group

	// audit holds the records QueueAudit has not written yet (auditqueue.go).
	audit auditQueue
	// auditRetention is how long GarbageCollect keeps audit records; 0 keeps them all.
	auditRetention time.Duration

	// background is Open's context without its cancellation: the store's own work that
	// outlives any one caller (writing queued audit records, also at Close) runs in it.
	background context.Context

	// rows serialises changes to one connected account on SQLite, where the only lock is the
	// database-wide write lock (see UpdateConnection).
	rows keyedLock

	// observer is told of every store operation (see Observe); nil when nobody listens.
	observer func(op string, took time.Duration, err error)

	// searchPath is the search_path the PostgreSQL DSN sets, checked at Open (pooler.go).
	searchPath string

	// revision is the store's revision on SQLite (revision.go); counted on PostgreSQL too, unread.
	revision atomic.Int64

	// tracer, when an Option sets it, is handed every statement and batch the PostgreSQL
	// connections send; the round-trip test counts them with it (roundtrips_test.go).
	tracer pgx.QueryTracer
}

// Option configures Open.
type Option func(*Store)

// AuditRetention has GarbageCollect delete audit records older than d that the event relay has
// handed on (docs/audit.md, "Retention"); d <= 0, the default, keeps every record.
func AuditRetention(d time.Duration) Option {
	return func(s *Store) { s.auditRetention = d }
}

// WithoutGroupCommit makes a SQLite store commit every writer on its own, as a handler that
// opened SQLite itself would (see group.go). Only for measuring against such a handler
// (hack/bench's floor_insert_alone); it changes nothing on PostgreSQL.
func WithoutGroupCommit() Option {
	return func(s *Store) { s.group = nil }
}

// Observe has every store.Store operation reported to fn when it returns: op is the method's
// name, took its duration, err what it returned. An operation counts once, however many
// statements and transaction attempts it ran. Operations that run a caller's function inside
// their transaction (UpdateConnection, UpdateClient, ConsumeCallbackState) include that
// function's time: for UpdateConnection that is the upstream refresh. RedeemAuthCode reports
// a code its check refused as a nil error: the store answered correctly.
//
// fn runs on the caller's goroutine, so it must be quick; internal/metrics times operations
// in latchkey_store_operation_duration_seconds this way.
func Observe(fn func(op string, took time.Duration, err error)) Option {
	return func(s *Store) { s.observer = fn }
}

// observe reports one operation to the observer. Every exported method of store.Store defers
// it as its first statement, with its own name (TestEveryOperationIsObserved checks).
//
// It also adds the pooler advice to the errors of named prepared statements (preparedHint):
// every operation's error passes here.
//
// When tracing is on it records the operation as a span, a child of ctx's span, named after the
// operation ("store GetConnection") and dated from start: this is the one place every
// operation passes, so the span exists for each. It is recorded as the operation returns, so
// what an operation runs inside its transaction (UpdateConnection's upstream refresh) shows
// beside it, not under it. Nothing of the query's arguments or the error's text goes into it:
// only the backend, the operation and its result class.
func (s *Store) observe(ctx context.Context, op string, start time.Time, err *error) {
	s.observeWithoutContext(op, start, err)
	if tracing.Enabled() {
		s.span(ctx, op, start, *err)
	}
}

// observeWithoutContext is observe for an operation that takes no context (Close, which runs
// outside any request): reported, but no span.
func (s *Store) observeWithoutContext(op string, start time.Time, err *error) {
	if *err != nil && s.postgres() {
		*err = preparedHint(*err)
	}
	if s.observer != nil {
		s.observer(op, time.Since(start), *err)
	}
}

func (s *Store) span(ctx context.Context, op string, start time.Time, err error) {
	system := "sqlite"
	if s.postgres() {
		system = "postgresql"
	}
	_, span := tracing.Start(ctx, "store "+op, trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system.name", system), attribute.String("db.operation.name", op)))
	switch {
	case err == nil:
	case errors.Is(err, store.ErrNotFound):
		// An answer, not a failure: most lookups of an unknown value end here.
		span.SetAttributes(attribute.String("latchkey.store.result", "not_found"))
	case errors.Is(err, store.ErrConflict):
		span.SetAttributes(attribute.String("latchkey.store.result", "conflict"))
		tracing.Fail(span, "conflict")
	default:
		tracing.Fail(span, "error")
	}
	span.End()
}

var _ store.Store = (*Store)(nil)

type stmtKey struct {
	db    *sql.DB
	query string
}

// Open connects to dsn and applies pending migrations.
//
//	sqlite:/var/lib/latchkey/latchkey.db
//	postgres://user:pass@host:5432/db?sslmode=verify-full
//
// On PostgreSQL the connection's search_path (e.g. ?search_path=latchkey, or the role's own
// default behind a pooler, see pooler.go) chooses the schema; the migration and
// garbage-collection locks are per schema, so two installations can share a database.
func Open(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	var (
		s   *Store
		err error
	)
	// Options are applied to the opened store below; the few that shape the connections
	// themselves are read from this copy first.
	var pre Store
	for _, o := range opts {
		o(&pre)
	}
	switch {
	case strings.HasPrefix(dsn, "sqlite:"):
		s, err = openSQLite(strings.TrimPrefix(dsn, "sqlite:"), sqliteOptions{})
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		s, err = openPostgres(dsn, pre.tracer)
	default:
		return nil, errors.New("sqlstore: dsn must start with sqlite: or postgres://")
	}
	if err != nil {
		return nil, err
	}
	s.background = context.WithoutCancel(ctx)
	// Two processes creating the same SQLite file at once can meet SQLITE_BUSY while the
	// first switches it to WAL (SQLite does not call the busy handler there); the file is
	// settled a moment later.
	for attempt := 0; ; attempt++ {
		err = s.start(ctx)
		if err == nil {
			for _, o := range opts {
				o(s)
			}
			return s, nil
		}
		if attempt >= 50 || sqliteCode(err)&0xff != sqlite3.SQLITE_BUSY {
			s.Close()
			return nil, preparedHint(err)
		}
		select {
		case <-ctx.Done():
			s.Close()
			return nil, err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// start checks the connection, migrates, and prepares statements.
func (s *Store) start(ctx context.Context) error {
	if err := s.w.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlstore: connect: %w", connectHint(err))
	}
	if err := s.checkSearchPath(ctx); err != nil {
		return err
	}
	if err := s.migrate(ctx); err != nil {
		return err
	}
	if s.d.prepare {
		// Statements used inside transactions must be prepared before any transaction
		// starts: preparing on the pool needs a free connection, and on SQLite a
		// transaction holds the only write connection.
		for _, query := range statements {
			if _, err := s.stmt(ctx, s.w, query); err != nil {
				return fmt.Errorf("sqlstore: prepare %q: %w", query, err)
			}
		}
	}
	if s.ck != nil {
		s.ckStop, s.ckDone = make(chan struct{}), make(chan struct{})
		go s.checkpoints() //nolint:contextcheck // the checkpointer outlives the caller that starts it, until Close
	}
	return nil
}

// openSQLite opens one write connection and a pool of read-only connections on the same file.
//
// SQLite admits one writer at a time. With a pool of read-write connections, writers that
// collide wait inside SQLite's busy handler, which sleeps and polls (1, 2, 5, 10… ms steps), and
// fail with SQLITE_BUSY once busy_timeout runs out. A single write connection makes writers
// queue at a gate in front of it instead (see enter), in arrival order and without polling,
// and WAL lets readers proceed alongside it. Write transactions still BEGIN IMMEDIATE so that
// another process opening the same file (a migration job, sqlite3 on the command line) can
// never turn a read into a failed lock upgrade halfway through.
//
// The write connection does not checkpoint: an automatic checkpoint runs on the connection
// that committed, inside the commit call, and fsyncs the database file while every other
// writer waits at the gate. A background connection copies the WAL back into the database
// instead (PASSIVE: it never blocks the writer), and restarts the WAL through the gate when
// that alone lets it grow (see checkpoint; decision 0087).
//
// Measured with BenchmarkSQLiteWriters (16 concurrent callers each storing an access+refresh
// pair, 2 shared vCPUs, medians of 4 interleaved runs): this design 8.4k pairs/s, p99 8.4 ms;
// the same writer checkpointing itself 7.5k/s, p99 11.7 ms; a pool of 4 write connections
// 10k/s, p99 10 ms; a pool of 16 9.5k/s, p99 13 ms. The pools' extra throughput comes with
// busy-handler sleeps, unfair waits and SQLITE_BUSY under overload; the tail and the
// guarantee matter more for a token endpoint, so one writer it is.
//
// Writers queued at the gate then commit together (group.go): in the same benchmark (medians
// of 3, load average 1.5) 19.6k pairs/s grouped, 5.5 callers per commit, p50 0.75 ms, p99
// 3.9 ms, against 11.9k/s, p50 1.2 ms, p99 2.9 ms with one commit per writer; every caller's
// work stays atomic on its own.
//
// The options other than the default exist only so that BenchmarkSQLiteWriters can compare.
type sqliteOptions struct {
	// writers > 1 opens a pool of write connections, with no gate, that checkpoint for
	// themselves.
	writers int
	// autoCheckpoint leaves checkpoints to the single write connection.
	autoCheckpoint bool
	// noGroup commits every writer on its own instead of grouping them (see group.go).
	noGroup bool
	// checkpointEvery and walRestartFrames, when set, replace the constants of the same names
	// (tests reach the WAL's bound sooner with them).
	checkpointEvery  time.Duration
	walRestartFrames int64
}

func openSQLite(path string, o sqliteOptions) (*Store, error) {
	if path == "" || strings.ContainsAny(path, "?#") || strings.Contains(path, ":memory:") {
		return nil, errors.New("sqlstore: sqlite: needs a file path (no query string, not :memory:)")
	}
	// page_size takes effect only when the file is created (an existing database keeps its own).
	// 8 KiB rather than SQLite's 4 KiB: the token indexes are keyed by random values, and with
	// 4 KiB pages each page split in them made the next commit walk the writer's page cache
	// (docs/performance.md, "Inserts into a large table"); writes at 1,000,000 tokens cost 30-60%
	// more than at 1,000. With 8 KiB pages splits are half as frequent and the walk half as
	// long, and writes cost the same at both sizes, at 8-20% more per write at 1,000.
	common := path + "?_foreign_keys=1&_journal_mode=WAL&_synchronous=NORMAL" +
		"&_pragma=page_size(8192)&_pragma=cache_size(-16000)&_pragma=temp_store(MEMORY)"
	// Readers and writers wait up to 10 s for a lock another process holds. The checkpointer
	// waits at most walRestartWait: while it restarts the WAL it holds the write lock, so its
	// wait is every writer's.
	wait := "&_busy_timeout=10000"
	s := &Store{d: sqliteDialect}
	open := func(dsn string, conns int) *sql.DB {
		db, _ := sql.Open("sqlite", dsn) // sql.Open only fails for an unknown driver
		db.SetMaxOpenConns(conns)
		db.SetMaxIdleConns(conns)
		db.SetConnMaxIdleTime(0)
		db.SetConnMaxLifetime(0)
		return db
	}
	switch {
	case o.writers > 1:
		s.w = open(common+wait+"&_txlock=immediate", o.writers)
	case o.autoCheckpoint:
		s.w = open(common+wait+"&_txlock=immediate", 1)
		s.gate = make(chan struct{}, 1)
	default:
		s.w = open(common+wait+"&_txlock=immediate&_pragma=wal_autocheckpoint(0)"+
			fmt.Sprintf("&_pragma=journal_size_limit(%d)", walKeepBytes), 1)
		s.ck = open(common+fmt.Sprintf("&_busy_timeout=%d", walRestartWait.Milliseconds()), 1)
		s.gate = make(chan struct{}, 1)
		s.ckEvery, s.walRestartFrames = checkpointEvery, walRestartFrames
		if o.checkpointEvery > 0 {
			s.ckEvery, s.walRestartFrames = o.checkpointEvery, o.walRestartFrames
		}
	}
	if s.gate != nil && !o.noGroup {
		s.group = &group{s: s}
	}
	s.r = open(common+wait+"&_query_only=1", max(4, 2*runtime.GOMAXPROCS(0)))
	return s, nil
}

// The WAL's bounds.
//
// A checkpoint copies the WAL's pages into the database file; the WAL starts again from its
// beginning only when a write transaction begins after a checkpoint has copied all of it and
// while no reader still reads from it. Under sustained writes the background checkpoint never
// gets there: the writer appends while it copies, so every write begins with frames left to
// copy, and the WAL file grows for as long as the load lasts (by about 40 KB a token request:
// hundreds of megabytes a minute, measured in docs/performance.md). So once the WAL holds
// walRestartFrames frames, the checkpointer asks for a restart (wal_checkpoint(RESTART)): it
// takes the write lock, copies what is left and waits for the readers of older frames to
// finish, at most walRestartWait each; the next write then starts the WAL over. journal_size_limit
// truncates a WAL that grew beyond walKeepBytes back to it when it starts over.
const (
	// checkpointEvery is how often the WAL is copied into the database file.
	checkpointEvery = 250 * time.Millisecond
	// walRestartFrames (256 MiB of 8 KiB pages) is the WAL length that makes the checkpointer
	// restart the WAL. A restart stops writers for a copy and the database file's fsync (tens
	// of milliseconds on a small virtual machine); at 64 MiB it came every 0.6 s at full
	// client_credentials load and cost a tenth of the throughput, at 256 MiB every 2–3 s.
	walRestartFrames = 32768
	// walRestartWait bounds how long a restart waits for the write lock and for readers.
	walRestartWait = 100 * time.Millisecond
	// walRestartBackoff is the longest the checkpointer leaves the WAL alone after restarts
	// that readers held back. The first pause is one checkpoint interval, and each restart
	// held back again doubles it up to this: short readers that happened to be on old frames
	// (busy under load) cost one tick, while the WAL grows by thousands of frames a second, and
	// a reader that stays (a backup) is not waited for at every tick.
	walRestartBackoff = 5 * time.Second
	// walKeepBytes is what a restarted WAL is truncated to.
	walKeepBytes = 64 << 20
)

func (s *Store) checkpoints() {
	defer close(s.ckDone)
	t := time.NewTicker(s.ckEvery)
	defer t.Stop()
	for {
		select {
		case <-s.ckStop:
			return
		case <-t.C:
			s.checkpoint()
		}
	}
}

// checkpoint copies the WAL without waiting for anyone (PASSIVE), then restarts it when it has
// grown to walRestartFrames (see above). Errors are transient (a busy file, a reader still on
// old frames); the next tick tries again.
func (s *Store) checkpoint() {
	var busy, frames, copied int64
	err := s.ck.QueryRow(`PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &copied)
	if err != nil || frames < s.walRestartFrames {
		return
	}
	if time.Now().Before(s.restartAfter) {
		return
	}
	// Through the gate, as a writer: the write connection is between transactions then, so the
	// restart gets the write lock at once. Waiting for it in SQLite's busy handler, which
	// polls, loses to a writer that takes the lock again straight after each commit.
	ctx, cancel := context.WithTimeout(context.Background(), walRestartWait)
	defer cancel()
	if s.enter(ctx) != nil {
		return
	}
	defer s.leave()
	s.restartsTried.Add(1)
	err = s.ck.QueryRow(`PRAGMA wal_checkpoint(RESTART)`).Scan(&busy, &frames, &copied)
	if err == nil && busy == 0 {
		s.restartPause = 0
		return
	}
	// A reader still on old frames (a backup, a long listing) held it back, with every writer
	// waiting meanwhile: leave the WAL to grow a while rather than stall writers at every tick
	// for as long as that reader reads (walRestartBackoff).
	s.restartPause = min(max(2*s.restartPause, s.ckEvery), walRestartBackoff)
	s.restartAfter = time.Now().Add(s.restartPause)
}

func openPostgres(dsn string, tracer pgx.QueryTracer) (*Store, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: postgres dsn: %w", err)
	}
	if tracer != nil {
		cfg.Tracer = tracer
	}
	// Enough for the request load of one replica; UpdateConnection holds a connection while
	// the upstream refresh runs, so leave headroom beyond the CPU count. pool_max_conns (as
	// pgxpool spells it) overrides.
	n := max(16, 4*runtime.GOMAXPROCS(0))
	if v, ok := cfg.RuntimeParams["pool_max_conns"]; ok {
		delete(cfg.RuntimeParams, "pool_max_conns")
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			return nil, fmt.Errorf("sqlstore: postgres dsn: pool_max_conns=%q is not a positive number", v)
		}
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxIdleTime(5 * time.Minute)
	db.SetConnMaxLifetime(time.Hour)
	return &Store{d: postgresDialect, w: db, r: db, searchPath: searchPathParam(cfg.RuntimeParams)}, nil
}

// Close closes every connection.
func (s *Store) Close() (err error) {
	defer s.observeWithoutContext("Close", time.Now(), &err)
	err = s.closeAudit()
	s.stmts.Range(func(_, v any) bool {
		v.(*sql.Stmt).Close()
		return true
	})
	if s.ckStop != nil {
		close(s.ckStop)
		<-s.ckDone
		s.ckStop = nil
	}
	err = errors.Join(err, s.w.Close())
	if s.r != s.w {
		err = errors.Join(err, s.r.Close())
	}
	if s.ck != nil {
		err = errors.Join(err, s.ck.Close())
	}
	return err
}

// Ping checks both pools answer.
func (s *Store) Ping(ctx context.Context) (err error) {
	defer s.observe(ctx, "Ping", time.Now(), &err)
	if err := s.w.PingContext(ctx); err != nil {
		return err
	}
	if s.r != s.w {
		return s.r.PingContext(ctx)
	}
	return nil
}

// ---------------------------------------------------------------------------------------------
// Dialect

type dialect struct {
	name string
	// dollar rewrites ? placeholders to $1, $2, …
	dollar bool
	// prepare caches prepared statements per connection. pgx already caches statements by
	// text on each connection, so only SQLite needs it.
	prepare bool
}

var (
	sqliteDialect   = dialect{name: "sqlite", prepare: true}
	postgresDialect = dialect{name: "postgres", dollar: true}
)

func (s *Store) postgres() bool { return s.d.name == "postgres" }

// Markers that constant queries carry where the dialects differ. SQLite keeps them as
// comments: its write transaction already holds the database lock, so rows need no locking.
const (
	// forUpdate locks the selected rows until the transaction ends.
	forUpdate = ` /*for update*/`
	// skipLocked locks the selected rows and passes over rows another transaction holds.
	skipLocked = ` /*skip locked*/`
)

// text returns query in the dialect's syntax: markers replaced and ? placeholders rewritten
// to $1, $2, … for PostgreSQL. Queries are constants, so each is rewritten once.
func (s *Store) text(query string) string {
	if !s.d.dollar {
		return query
	}
	if v, ok := s.rebound.Load(query); ok {
		return v.(string)
	}
	t := strings.NewReplacer(forUpdate, " FOR UPDATE", skipLocked, " FOR UPDATE SKIP LOCKED").Replace(query)
	var b strings.Builder
	b.Grow(len(t) + 8)
	n := 0
	for i := 0; i < len(t); i++ {
		if t[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(t[i])
	}
	t = b.String()
	s.rebound.Store(query, t)
	return t
}

// ---------------------------------------------------------------------------------------------
// Running statements

// statements lists every constant query, so SQLite can prepare them all at Open.
var statements []string

// sqlText registers a constant query (call it from package-level var declarations only).
func sqlText(query string) string {
	statements = append(statements, query)
	return query
}

// q runs statements on a pool or inside a transaction on the write pool.
type q struct {
	s  *Store
	db *sql.DB
	tx *sql.Tx
	// grouped: the transaction carries other callers' work too (see group.go), so no caller's
	// cancellation may interrupt a statement in it.
	grouped bool
}

func (s *Store) reader() q { return q{s: s, db: s.r} }

// write runs fn's statements on the write pool outside a transaction (each statement commits
// by itself), after its turn at the gate.
func (s *Store) write(ctx context.Context, fn func(q) error) error {
	return s.changed(ctx, s.writeQuiet(ctx, fn))
}

// writeQuiet is write for writes that cannot withdraw anything a cached decision read (see
// store.Revisions): the revision does not move.
func (s *Store) writeQuiet(ctx context.Context, fn func(q) error) error {
	if s.group != nil {
		return s.group.do(ctx, false, fn)
	}
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	return fn(q{s: s, db: s.w})
}

// wexec runs one write statement and reports how many rows it changed.
func (s *Store) wexec(ctx context.Context, query string, args ...any) (n int64, err error) {
	err = s.write(ctx, func(x q) error {
		n, err = x.execN(ctx, query, args...)
		return err
	})
	return n, err
}

// wexecQuiet is wexec for a statement that cannot withdraw anything (see writeQuiet).
func (s *Store) wexecQuiet(ctx context.Context, query string, args ...any) (n int64, err error) {
	err = s.writeQuiet(ctx, func(x q) error {
		n, err = x.execN(ctx, query, args...)
		return err
	})
	return n, err
}

// wexecOne runs one write statement that must change a row: changing none is ErrNotFound.
func (s *Store) wexecOne(ctx context.Context, query string, args ...any) error {
	n, err := s.wexec(ctx, query, args...)
	if err == nil && n == 0 {
		return store.ErrNotFound
	}
	return err
}

// wrow runs one write statement that returns at most one row (… RETURNING).
func (s *Store) wrow(ctx context.Context, scan func(scanner) error, query string, args ...any) error {
	return s.write(ctx, func(x q) error { return x.row(ctx, scan, query, args...) })
}

// wrowQuiet is wrow for a statement that cannot withdraw anything (see writeQuiet).
func (s *Store) wrowQuiet(ctx context.Context, scan func(scanner) error, query string, args ...any) error {
	return s.writeQuiet(ctx, func(x q) error { return x.row(ctx, scan, query, args...) })
}

// enter waits for the write gate (SQLite with one write connection). Go channels queue
// waiters first come, first served; database/sql hands a freed connection to a random waiter,
// which under 16 concurrent writers stretched the tail latency several times over.
func (s *Store) enter(ctx context.Context) error {
	if s.gate == nil {
		return nil
	}
	select {
	case s.gate <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Store) leave() {
	if s.gate != nil {
		<-s.gate
	}
}

func (s *Store) stmt(ctx context.Context, db *sql.DB, query string) (*sql.Stmt, error) {
	k := stmtKey{db, query}
	if v, ok := s.stmts.Load(k); ok {
		return v.(*sql.Stmt), nil
	}
	st, err := db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if v, loaded := s.stmts.LoadOrStore(k, st); loaded {
		st.Close()
		return v.(*sql.Stmt), nil
	}
	return st, nil
}

// prepared returns the cached statement for query, bound to the transaction if there is one.
// Inside a transaction only statements prepared at Open are used (see openSQLite); anything
// else runs unprepared.
func (x q) prepared(ctx context.Context, query string) (*sql.Stmt, error) {
	if !x.s.d.prepare {
		return nil, nil
	}
	if x.tx != nil {
		v, ok := x.s.stmts.Load(stmtKey{x.db, query})
		if !ok {
			return nil, nil
		}
		return x.tx.StmtContext(ctx, v.(*sql.Stmt)), nil
	}
	return x.s.stmt(ctx, x.db, query)
}

// conn runs a statement that has no prepared form: a *sql.Tx or a *sql.DB.
type conn interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// target says where query runs: its prepared statement when there is one, else the
// transaction if there is one, else the pool. In a grouped transaction the context it returns
// is not cancelled with ctx.
func (x q) target(ctx context.Context, query string) (context.Context, *sql.Stmt, conn, error) {
	if x.grouped {
		ctx = context.WithoutCancel(ctx)
	}
	st, err := x.prepared(ctx, query)
	if x.tx != nil {
		return ctx, st, x.tx, err
	}
	return ctx, st, x.db, err
}

func (x q) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	ctx, st, c, err := x.target(ctx, query)
	if err != nil {
		return nil, err
	}
	if st != nil {
		return st.ExecContext(ctx, args...)
	}
	return c.ExecContext(ctx, x.s.text(query), args...)
}

// execN runs a statement and reports how many rows it changed.
func (x q) execN(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := x.exec(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (x q) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	ctx, st, c, err := x.target(ctx, query)
	if err != nil {
		return nil, err
	}
	if st != nil {
		return st.QueryContext(ctx, args...)
	}
	return c.QueryContext(ctx, x.s.text(query), args...)
}

// row runs a query expected to return at most one row and scans it with scan.
func (x q) row(ctx context.Context, scan func(scanner) error, query string, args ...any) error {
	rows, err := x.query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return store.ErrNotFound
	}
	if err := scan(rows); err != nil {
		return err
	}
	return rows.Close()
}

// each runs a query and calls fn on every row it returns, stopping at fn's first error. The
// rows are closed on every path and an error that ended the iteration early is returned.
func (x q) each(ctx context.Context, fn func(scanner) error, query string, args ...any) error {
	rows, err := x.query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// all runs a query and returns one value a row, each read by the scan function that scan
// returns for it (the shape of scanClient and its siblings). No rows is a nil slice; on an
// error no partial list is returned.
func all[T any](ctx context.Context, x q, scan func(*T) func(scanner) error, query string, args ...any) ([]T, error) {
	var out []T
	err := x.each(ctx, func(r scanner) error {
		var v T
		if err := scan(&v)(r); err != nil {
			return err
		}
		out = append(out, v)
		return nil
	}, query, args...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// scanner is what sql.Rows and sql.Row have in common.
type scanner interface{ Scan(dest ...any) error }

// tx runs fn in a write transaction, and runs it again (a few times) when it lost a race it
// can win on a second try: fn returned errRace, or PostgreSQL aborted the transaction for a
// deadlock or a serialization failure (bulk revocations against rotations). Everything fn
// does is inside the transaction, so repeating it is safe; callbacks with effects outside
// (UpdateConnection's fn) use tx1. fn must not call back into the store: on SQLite the
// transaction holds the only write connection.
func (s *Store) tx(ctx context.Context, fn func(q) error) error {
	return s.changed(ctx, s.txQuiet(ctx, fn))
}

// txQuiet is tx for transactions that cannot withdraw anything a cached decision read.
func (s *Store) txQuiet(ctx context.Context, fn func(q) error) error {
	for attempt := 0; ; attempt++ {
		err := s.tx1(ctx, fn)
		if err == nil || attempt >= 7 || !(errors.Is(err, errRace) || s.retryable(err)) {
			return err
		}
	}
}

func (s *Store) tx1(ctx context.Context, fn func(q) error) error {
	if s.group != nil {
		return s.group.do(ctx, true, fn)
	}
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	return s.runTx(ctx, fn)
}

// runTx runs fn in a transaction on the write connection; the caller holds the gate.
func (s *Store) runTx(ctx context.Context, fn func(q) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	// Also on panic (or t.Fatal inside a callback): never leave the write connection in a
	// transaction. After Commit this is a no-op.
	defer tx.Rollback()
	if err := fn(q{s: s, db: s.w, tx: tx}); err != nil {
		return err
	}
	return tx.Commit()
}

// ---------------------------------------------------------------------------------------------
// Errors

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func sqliteCode(err error) int {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code()
	}
	return 0
}

func isUnique(err error) bool {
	if c := sqliteCode(err); c == sqlite3.SQLITE_CONSTRAINT_UNIQUE || c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY {
		return true
	}
	return pgCode(err) == "23505"
}

func isForeignKey(err error) bool {
	return sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY || pgCode(err) == "23503"
}

func (s *Store) retryable(err error) bool {
	switch pgCode(err) {
	case "40001", "40P01": // serialization_failure, deadlock_detected
		return true
	}
	return false
}

// errRace ends a transaction that lost a race it can win by running again; callers loop a
// few times and otherwise return it (it is ErrConflict to their callers).
var errRace = fmt.Errorf("%w: concurrent change, try again", store.ErrConflict)

// conflict maps a unique-key violation to store.ErrConflict, keeping other errors.
func conflict(err error) error {
	if err != nil && isUnique(err) {
		return fmt.Errorf("%w: %w", store.ErrConflict, err)
	}
	return err
}

// ---------------------------------------------------------------------------------------------
// Column encodings

// ns stores a time as Unix nanoseconds; the zero time is stored as 0 and read back as zero.
func ns(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNS(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// nullNS stores an optional time; nil becomes NULL.
func nullNS(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixNano()
}

func fromNullNS(n sql.NullInt64) *time.Time {
	if !n.Valid {
		return nil
	}
	t := time.Unix(0, n.Int64).UTC()
	return &t
}

// list stores a string list as JSON; nil and empty are both "[]" and read back as nil.
// List columns (scopes, audiences) hold a JSON array of strings. Nearly every value is plain
// (scope names, client ids, URLs), and these run on every token read and write, so plain values
// skip encoding/json: the text is the one encoding/json writes and reads (TestListColumns).

func list(v []string) string {
	if len(v) == 0 {
		return "[]"
	}
	n := 2
	for _, e := range v {
		if !plain(e) {
			b, _ := json.Marshal(v)
			return string(b)
		}
		n += len(e) + 3
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteByte('[')
	for i, e := range v {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.WriteString(e)
		b.WriteByte('"')
	}
	b.WriteByte(']')
	return b.String()
}

// plain reports whether encoding/json writes e unchanged between quotes: printable ASCII other
// than the characters it escapes (the quote, the backslash, and <, >, & for HTML safety).
func plain(e string) bool {
	for i := 0; i < len(e); i++ {
		c := e[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

func fromList(s string) ([]string, error) {
	if s == "" || s == "[]" {
		return nil, nil
	}
	// `["a","b"]` without a backslash: no element holds a quote, so the separators are exact.
	if inner, ok := strings.CutPrefix(s, `["`); ok && strings.HasSuffix(inner, `"]`) && !strings.ContainsAny(inner, "\\") {
		inner = inner[:len(inner)-2]
		v := strings.Split(inner, `","`)
		for _, e := range v {
			if strings.ContainsRune(e, '"') { // spaces after the commas, or not an array of strings
				return fromJSONList(s)
			}
		}
		return v, nil
	}
	return fromJSONList(s)
}

func fromJSONList(s string) ([]string, error) {
	var v []string
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return nil, fmt.Errorf("sqlstore: bad list column: %w", err)
	}
	return v, nil
}

// blob keeps nil as NULL but stores an empty non-nil slice as an empty value.
func blob(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

package sqlstore

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
)

// Group commit on SQLite.
//
// Committing is most of what a write costs on SQLite: every page a change touched is appended
// to the WAL, one system call per frame, and issuing a token touches the table and each of its
// indexes. Writers already queue at the gate for the one write connection (see openSQLite), so
// whoever gets the gate runs every writer queued behind it in one transaction, each under its
// own savepoint, and commits once; the pages they share (the growing ends of the table and of
// the time-ordered indexes) are written once per group instead of once per writer.
//
// What each caller sees does not change: its work is atomic (its savepoint is rolled back if
// it fails, and nobody else's is), it gets its own result, and it is answered only after the
// group committed, so a successful call's work is committed and visible to the next read. If the
// group's transaction itself fails, every caller whose work succeeded runs again on its own.
// Statements in a group ignore their caller's cancellation: on SQLite an interrupted write
// rolls back the whole transaction, which would be every other caller's work too.

// maxGroup bounds the work of one transaction, and so the wait of the callers behind it.
const maxGroup = 64

var (
	qSavepoint  = sqlText(`SAVEPOINT w`)
	qRelease    = sqlText(`RELEASE w`)
	qRollbackTo = sqlText(`ROLLBACK TO w`)
)

// errRerun marks a call whose group failed for a reason that was not its own.
var errRerun = errors.New("sqlstore: group transaction failed; run alone")

type group struct {
	s     *Store
	mu    sync.Mutex
	queue []*pending

	// groups and calls count what ran, for tests and benchmarks.
	groups, calls atomic.Int64
}

// pending is one caller's work.
type pending struct {
	ctx   context.Context
	tx    bool // run alone, fn wants a transaction (else each statement commits by itself)
	fn    func(q) error
	state atomic.Int32
	err   error
	done  chan struct{}
}

const (
	queued int32 = iota
	taken
	abandoned
)

// do runs fn as part of a group, or alone when nobody else is waiting.
func (g *group) do(ctx context.Context, tx bool, fn func(q) error) error {
	p := &pending{ctx: ctx, tx: tx, fn: fn, done: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, p)
	g.mu.Unlock()
	for {
		select {
		case <-p.done:
			return g.result(p)
		case <-ctx.Done():
			if p.state.CompareAndSwap(queued, abandoned) {
				return ctx.Err()
			}
			<-p.done // taken: the group decides
			return g.result(p)
		case g.s.gate <- struct{}{}:
			g.lead(p) //nolint:contextcheck // the batch commits for every caller in it; one caller giving up must not abort the others
		}
	}
}

// result is the caller's outcome; work whose group failed runs again, alone.
func (g *group) result(p *pending) error {
	if !errors.Is(p.err, errRerun) {
		return p.err
	}
	if err := g.s.enter(p.ctx); err != nil {
		return err
	}
	defer g.s.leave()
	return g.s.run1(p)
}

// lead runs one group while holding the gate. p is the leader's own work; an earlier group may
// already have run it, and then the gate is handed on at once.
func (g *group) lead(p *pending) {
	defer g.s.leave()
	select {
	case <-p.done:
		return
	default:
	}
	g.gather()
	g.mu.Lock()
	n := min(len(g.queue), maxGroup)
	batch := make([]*pending, 0, n)
	for _, c := range g.queue[:n] {
		if c.state.CompareAndSwap(queued, taken) {
			batch = append(batch, c)
		}
	}
	g.queue = slices.Delete(g.queue, 0, n)
	g.mu.Unlock()

	g.groups.Add(1)
	g.calls.Add(int64(len(batch)))
	answered := 0
	// Also on panic (or runtime.Goexit in a callback): nobody may wait for ever.
	defer func() {
		for _, c := range batch[answered:] {
			c.err = errRerun
			close(c.done)
		}
	}()
	if len(batch) == 1 {
		batch[0].err = g.s.run1(batch[0])
		close(batch[0].done)
		answered = 1
		return
	}
	errs := g.s.runGroup(batch)
	for i, c := range batch {
		c.err = errs[i]
		close(c.done)
		answered = i + 1
	}
}

// gather lets writers that are ready to queue join the group before it is taken. SQLite
// commits without fsync here (WAL, synchronous=NORMAL), so a commit is CPU work, not a wait:
// on a busy server the leader usually finds the queue empty but for itself, while the
// requests beside it are a few microseconds from queueing, waiting for a processor. Yielding
// once lets them queue, and one commit then writes the pages they share once (measured on the
// real binary under client_credentials load: 2 tokens a commit became 5–6, and the WAL frames
// written per token fell by a third, docs/performance.md). A writer alone pays one yield.
func (g *group) gather() {
	g.mu.Lock()
	alone := len(g.queue) < 2
	g.mu.Unlock()
	if alone {
		runtime.Gosched()
	}
}

// run1 runs one caller's work by itself, as without grouping.
func (s *Store) run1(p *pending) error {
	if p.tx {
		return s.runTx(p.ctx, p.fn)
	}
	return p.fn(q{s: s, db: s.w})
}

// runGroup runs the batch in one transaction and returns each caller's result.
func (s *Store) runGroup(batch []*pending) (errs []error) {
	errs = make([]error, len(batch))
	fail := func(error) []error {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = errRerun
			}
		}
		return errs
	}
	// A callback that panics panics again when its own caller runs it alone; the leader, whose
	// own work is not at fault, goes on.
	defer func() {
		if recover() != nil {
			for i := range errs {
				errs[i] = errRerun
			}
		}
	}()
	ctx := context.Background()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback()
	x := q{s: s, db: s.w, tx: tx, grouped: true}
	for i, c := range batch {
		if _, err := x.exec(ctx, qSavepoint); err != nil {
			return fail(err)
		}
		if errs[i] = c.fn(x); errs[i] != nil {
			if _, err := x.exec(ctx, qRollbackTo); err != nil {
				return fail(err)
			}
		}
		// Fails when SQLite has rolled the whole transaction back (some I/O errors do): then
		// nothing of the group is left, and the others run again.
		if _, err := x.exec(ctx, qRelease); err != nil {
			return fail(err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fail(err)
	}
	return errs
}

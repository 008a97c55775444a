package sqlstore

import (
	"context"
	"strings"
	"sync"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// Audit records written behind the request (docs/decisions/0047-audit-records-written-behind.md),
// and records written before it in the same batches (docs/decisions/0054).
//
// The token endpoint answers thousands of requests a second, and each writes an audit record.
// Written in the request, that record made a successful token exchange — otherwise two reads —
// a write that waits for a commit, and it made client_credentials two writes: a fifth of the
// CPU of each went to the record, and on SQLite every commit also made the readers' page
// caches stale. QueueAudit instead hands the record to one goroutine per store, which writes
// whatever has queued in one multi-row INSERT, one transaction: a few commits a second under
// load instead of one per request.
//
// What a caller may rely on:
//   - A queued record is stored within auditLinger plus one write, in the order it was queued.
//   - Every read of the audit log through this store (ListAudit, ListAuditAfter,
//     ListAuditPage, RelayAudit) first stores what this store has queued, so a process reads
//     its own records at once; another replica's appear after its next write.
//   - A failed write keeps the records and tries again (backing off to auditRetryMax); when
//     auditQueueMax records are waiting, QueueAudit writes its record itself, so a database
//     that is down slows callers rather than growing memory or dropping records.
//   - Close stores what is queued. A process that dies without closing its store (SIGKILL,
//     out of memory, the node lost) loses what was queued: at most the records of its last
//     auditLinger and one write. The tokens those records describe are in the tokens table
//     themselves; only their audit records are lost.
//   - AppendAuditBatched queues its record the same way but returns only once the write that
//     holds it has committed, with that write's error: a group commit. The writer then does
//     not linger (the caller is waiting); the records that queue while one write runs go
//     together in the next. A failed write is not retried for such a record: its caller is
//     told, and answers with an error rather than with what the record describes.

const (
	// auditLinger is how long the writer waits after the first queued record for others to
	// join it: the longest a record waits in memory before its write starts.
	auditLinger = 5 * time.Millisecond
	// auditBatchMax bounds one INSERT (10 parameters a row: well under both databases' limits).
	auditBatchMax = 500
	// auditQueueMax bounds the records waiting in memory; beyond it callers write their own.
	auditQueueMax = 20_000
	// auditRetryMax is the longest pause between attempts while the database refuses writes.
	auditRetryMax = 5 * time.Second
)

type auditQueue struct {
	// writing is held by whoever writes a batch, so a reader that flushes has every record
	// queued before it stored, not merely taken by the writer.
	writing sync.Mutex

	mu     sync.Mutex
	queued []auditRow
	wake   chan struct{} // cap 1: something was queued
	// urgent (cap 1): a caller waits for a queued record; the writer writes without lingering.
	urgent  chan struct{}
	stop    chan struct{}
	done    chan struct{}
	started bool
	closed  bool
	// closeErr is the writer's last write, at Close (read after done is closed).
	closeErr error
}

// auditRow is a record with its details already encoded, so encoding errors reach the caller.
type auditRow struct {
	r       store.AuditRecord
	details string
	// stored, when not nil (cap 1), is told the outcome of the write that held the row.
	stored chan error
}

func encodeAudit(r store.AuditRecord) (auditRow, error) {
	details, err := detailsText(r.Details)
	if err != nil {
		return auditRow{}, err
	}
	return auditRow{r: r, details: details}, nil
}

// QueueAudit stores r shortly after it returns, with the records queued beside it; see above
// for what is promised. An error means r was not queued and could not be written either.
func (s *Store) QueueAudit(ctx context.Context, r store.AuditRecord) (err error) {
	defer s.observe(ctx, "QueueAudit", time.Now(), &err)
	row, err := encodeAudit(r)
	if err != nil {
		return err
	}
	_, err = s.enqueueAudit(ctx, row)
	return err
}

// AppendAuditBatched stores r before it returns, in one write with the records queued beside
// it; see above. An error means r may not be stored.
func (s *Store) AppendAuditBatched(ctx context.Context, r store.AuditRecord) (err error) {
	defer s.observe(ctx, "AppendAuditBatched", time.Now(), &err)
	if err := ctx.Err(); err != nil {
		return err // the request has ended: nobody is waiting to hand anything out
	}
	row, err := encodeAudit(r)
	if err != nil {
		return err
	}
	row.stored = make(chan error, 1)
	queued, err := s.enqueueAudit(ctx, row)
	if err != nil || !queued {
		return err
	}
	a := &s.audit
	select {
	case a.urgent <- struct{}{}:
	default:
	}
	select {
	case err := <-row.stored:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// enqueueAudit queues row for the writer and reports true, or, when the store is closing or
// the queue is full, writes it itself and reports false with the write's error.
func (s *Store) enqueueAudit(ctx context.Context, row auditRow) (bool, error) {
	a := &s.audit
	a.mu.Lock()
	if a.closed || len(a.queued) >= auditQueueMax {
		a.mu.Unlock()
		return false, s.writeAudit(ctx, []auditRow{row})
	}
	if !a.started {
		a.started = true
		a.wake, a.urgent = make(chan struct{}, 1), make(chan struct{}, 1)
		a.stop, a.done = make(chan struct{}), make(chan struct{})
		go s.auditWriter() //nolint:contextcheck // the writer outlives the caller that starts it; it runs in the store's own context
	}
	a.queued = append(a.queued, row)
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
	return true, nil
}

// auditWriter writes queued records until Close, and at Close what is left.
func (s *Store) auditWriter() {
	a := &s.audit
	defer close(a.done)
	retry := 50 * time.Millisecond
	for {
		select {
		case <-a.stop:
			a.closeErr = s.drainAudit()
			return
		case <-a.wake:
		}
		select {
		case <-a.stop:
			a.closeErr = s.drainAudit()
			return
		case <-a.urgent:
		case <-time.After(auditLinger):
		}
		for {
			n, err := s.flushAudit(s.background, auditBatchMax)
			if err != nil {
				// The records stay queued; the next attempt, or a reader's flush, writes them.
				select {
				case <-a.stop:
					a.closeErr = s.drainAudit()
					return
				case <-time.After(retry):
				}
				retry = min(2*retry, auditRetryMax)
				continue
			}
			retry = 50 * time.Millisecond
			if n < auditBatchMax {
				break
			}
		}
	}
}

// drainAudit writes every queued record, giving the database 10 s.
func (s *Store) drainAudit() error {
	ctx, cancel := context.WithTimeout(s.background, 10*time.Second)
	defer cancel()
	_, err := s.flushAudit(ctx, 0)
	return err
}

// flushAudit writes up to limit queued records (every one when limit <= 0) and reports how
// many it wrote. On failure they are queued again, in front, in their order.
func (s *Store) flushAudit(ctx context.Context, limit int) (int, error) {
	a := &s.audit
	a.writing.Lock()
	defer a.writing.Unlock()
	for written := 0; ; {
		a.mu.Lock()
		n := len(a.queued)
		if limit > 0 {
			n = min(n, limit-written)
		}
		n = min(n, auditBatchMax)
		batch := a.queued[:n:n]
		a.queued = a.queued[n:]
		a.mu.Unlock()
		if n == 0 {
			return written, nil
		}
		if err := s.writeQueued(ctx, batch); err != nil {
			// A waiting caller is told now and fails its request; its record is not tried
			// again (the request it describes has failed). The others are queued again, in
			// front.
			again := make([]auditRow, 0, len(batch))
			for _, row := range batch {
				if row.stored != nil {
					row.stored <- err
					continue
				}
				again = append(again, row)
			}
			a.mu.Lock()
			a.queued = append(again, a.queued...)
			a.mu.Unlock()
			return written, err
		}
		for _, row := range batch {
			if row.stored != nil {
				row.stored <- nil
			}
		}
		written += n
	}
}

// flushQueuedAudit is what every audit read does first: the records this store has queued
// are written, so the read sees them. Only as many as were queued when it was called: under
// load more keep arriving, and a read must not wait for those.
func (s *Store) flushQueuedAudit(ctx context.Context) error {
	a := &s.audit
	a.mu.Lock()
	n := len(a.queued)
	a.mu.Unlock()
	if n == 0 {
		// The writer may have taken the last records and be writing them: wait for it.
		a.writing.Lock()
		a.writing.Unlock() //nolint:staticcheck,gocritic // an empty critical section: only the wait matters
		return nil
	}
	_, err := s.flushAudit(ctx, n)
	return err
}

// closeAudit stops the writer, which writes what is queued first (on Close).
func (s *Store) closeAudit() error {
	a := &s.audit
	a.mu.Lock()
	started := a.started && !a.closed
	a.closed = true
	a.mu.Unlock()
	if !started {
		return nil
	}
	close(a.stop)
	<-a.done
	return a.closeErr
}

// writeQueued writes a batch taken from the queue; the store's observer sees it as
// AppendAudits, beside the QueueAudit calls that queued it.
func (s *Store) writeQueued(ctx context.Context, rows []auditRow) (err error) {
	defer s.observe(ctx, "AppendAudits", time.Now(), &err)
	return s.writeAudit(ctx, rows)
}

// auditInsert caches the INSERT of n rows, one text per batch size.
var auditInsert sync.Map // int -> string

func auditInsertText(n int) string {
	if v, ok := auditInsert.Load(n); ok {
		return v.(string)
	}
	var b strings.Builder
	b.WriteString(`INSERT INTO audit (project, time, actor, action, target, details, client_id, connector, outcome, reason, pending) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)")
	}
	v, _ := auditInsert.LoadOrStore(n, b.String())
	return v.(string)
}

// writeAudit stores rows with one statement, in their order (ids ascend within a statement on
// both databases: SQLite assigns rowids in VALUES order, PostgreSQL's sequence in row order).
func (s *Store) writeAudit(ctx context.Context, rows []auditRow) (err error) {
	if len(rows) == 1 {
		r := rows[0].r
		_, err = s.wexecQuiet(ctx, qAppendAudit, r.Project, ns(r.Time), r.Actor, r.Action, r.Target, rows[0].details,
			r.ClientID, r.Connector, r.Outcome, r.Reason)
		return err
	}
	args := make([]any, 0, 10*len(rows))
	for _, row := range rows {
		r := row.r
		args = append(args, r.Project, ns(r.Time), r.Actor, r.Action, r.Target, row.details,
			r.ClientID, r.Connector, r.Outcome, r.Reason)
	}
	_, err = s.wexecQuiet(ctx, auditInsertText(len(rows)), args...)
	return err
}

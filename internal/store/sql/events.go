package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

const auditCols = `id, project, time, actor, action, target, details, client_id, connector, outcome, reason`

var (
	// Every record starts pending: RelayAudit copies it to the outbox for the Project's sinks.
	qAppendAudit = sqlText(`INSERT INTO audit (project, time, actor, action, target, details, client_id, connector, outcome, reason, pending)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)`)
	qListAudit = sqlText(`SELECT ` + auditCols + ` FROM audit
WHERE project = ? ORDER BY id DESC LIMIT ?`)
	// The partial index audit_pending serves this; on PostgreSQL another replica's batch is
	// skipped rather than waited for.
	qPendingAudit = sqlText(`SELECT ` + auditCols + ` FROM audit WHERE pending = 1 ORDER BY id LIMIT ?` + skipLocked)
	// The records a relay read are cleared in one statement, not one each: at thousands of
	// token requests a second the relay otherwise runs one UPDATE per request on the write
	// connection. On SQLite the relay's transaction holds the database's only write lock from
	// the read to the update, and the read took the oldest pending records in id order, so the
	// pending records from the first id to the last are exactly those read. On PostgreSQL
	// another transaction may commit a record with a smaller id after the read (ids are taken
	// before commit), so the ids read are named (the rows are locked: FOR UPDATE SKIP LOCKED).
	qRelayedAuditRange = sqlText(`UPDATE audit SET pending = 0 WHERE pending = 1 AND id BETWEEN ? AND ?`)
	qRelayedAuditIDs   = `UPDATE audit SET pending = 0 WHERE id = ANY(?)`
)

// AppendAudit stores a record; r.ID is ignored (the database numbers records in order).
func (s *Store) AppendAudit(ctx context.Context, r store.AuditRecord) (err error) {
	defer s.observe(ctx, "AppendAudit", time.Now(), &err)
	row, err := encodeAudit(r)
	if err != nil {
		return err
	}
	return s.writeAudit(ctx, []auditRow{row})
}

// RelayAudit hands pending records to fanOut and queues what it returns (store.Audit). One
// transaction reads the pending records, stores fanOut's events and clears pending, so a crash
// anywhere leaves the records pending and nothing queued.
func (s *Store) RelayAudit(ctx context.Context, limit int, fanOut func([]store.AuditRecord) ([]store.Event, error)) (n int, err error) {
	defer s.observe(ctx, "RelayAudit", time.Now(), &err)
	if limit <= 0 {
		return 0, nil
	}
	if err := s.flushQueuedAudit(ctx); err != nil {
		return 0, err
	}
	err = s.tx(ctx, func(x q) error {
		n = 0
		recs, err := all(ctx, x, scanAudit, qPendingAudit, int64(limit))
		if err != nil || len(recs) == 0 {
			return err
		}
		evs, err := fanOut(recs)
		if err != nil {
			return err
		}
		for _, e := range evs {
			next := e.NextAttempt
			if next.IsZero() {
				next = e.CreatedAt
			}
			if _, err := x.exec(ctx, qEnqueue, e.ID, e.Project, e.Sink, e.Type, blob(e.Data), ns(e.CreatedAt),
				int64(e.Attempts), ns(next)); err != nil {
				return conflict(err)
			}
		}
		if err := s.clearPending(ctx, x, recs); err != nil {
			return err
		}
		n = len(recs)
		return nil
	})
	return n, err
}

// clearPending marks the records a relay read (recs, in id order) as relayed; see
// qRelayedAuditRange.
func (s *Store) clearPending(ctx context.Context, x q, recs []store.AuditRecord) error {
	var (
		cleared int64
		err     error
	)
	if s.postgres() {
		ids := make([]int64, len(recs))
		for i, r := range recs {
			ids[i] = r.ID
		}
		cleared, err = x.execN(ctx, qRelayedAuditIDs, ids)
	} else {
		cleared, err = x.execN(ctx, qRelayedAuditRange, recs[0].ID, recs[len(recs)-1].ID)
	}
	if err != nil {
		return err
	}
	if cleared != int64(len(recs)) {
		// Rolled back: the records stay pending and the next round relays them again.
		return fmt.Errorf("sqlstore: relay read %d audit records but cleared %d", len(recs), cleared)
	}
	return nil
}

// ListAudit returns a project's newest records first; limit <= 0 means 100.
func (s *Store) ListAudit(ctx context.Context, project string, limit int) (_ []store.AuditRecord, err error) {
	defer s.observe(ctx, "ListAudit", time.Now(), &err)
	if limit <= 0 {
		limit = 100
	}
	return s.listAudit(ctx, qListAudit, project, int64(limit))
}

// listAudit runs a query over the audit table's columns and reads every record it returns,
// after writing this store's queued records (auditqueue.go), so they are among them.
func (s *Store) listAudit(ctx context.Context, query string, args ...any) ([]store.AuditRecord, error) {
	if err := s.flushQueuedAudit(ctx); err != nil {
		return nil, err
	}
	return all(ctx, s.reader(), scanAudit, query, args...)
}

func scanAudit(r *store.AuditRecord) func(scanner) error {
	return func(x scanner) error {
		var t int64
		var details string
		if err := x.Scan(&r.ID, &r.Project, &t, &r.Actor, &r.Action, &r.Target, &details,
			&r.ClientID, &r.Connector, &r.Outcome, &r.Reason); err != nil {
			return err
		}
		r.Time = fromNS(t)
		var err error
		if r.Details, err = fromDetails(details); err != nil {
			return fmt.Errorf("sqlstore: audit %d details: %w", r.ID, err)
		}
		return nil
	}
}

// ---------------------------------------------------------------------------------------------
// Outbox

const eventCols = `id, project, sink, type, data, created_at, attempts, next_attempt, delivered_at`

var (
	qEnqueue = sqlText(`INSERT INTO events (` + eventCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL)`)
	// One statement picks and leases, so two replicas never lease the same row: on PostgreSQL
	// the picker skips rows another replica is leasing right now, on SQLite the write lock
	// serialises the statement.
	qClaim = sqlText(`UPDATE events SET next_attempt = ? WHERE seq IN (
	SELECT seq FROM events WHERE delivered_at IS NULL AND next_attempt <= ?
	ORDER BY next_attempt, seq LIMIT ?` + skipLocked + `
) RETURNING seq, ` + eventCols)
	qDelivered = sqlText(`UPDATE events SET delivered_at = COALESCE(delivered_at, ?) WHERE id = ? AND sink = ?`)
	qFailed    = sqlText(`UPDATE events SET attempts = attempts + 1, next_attempt = ?
WHERE id = ? AND sink = ? AND delivered_at IS NULL`)
	qDepth = sqlText(`SELECT COUNT(*) FROM events WHERE delivered_at IS NULL`)
)

// EnqueueEvents stores events in one transaction. A zero NextAttempt means due at CreatedAt.
// An event id may repeat for different sinks; the same id and sink twice is ErrConflict.
func (s *Store) EnqueueEvents(ctx context.Context, events ...store.Event) (err error) {
	defer s.observe(ctx, "EnqueueEvents", time.Now(), &err)
	return s.tx(ctx, func(x q) error {
		for _, e := range events {
			next := e.NextAttempt
			if next.IsZero() {
				next = e.CreatedAt
			}
			if _, err := x.exec(ctx, qEnqueue, e.ID, e.Project, e.Sink, e.Type, blob(e.Data), ns(e.CreatedAt),
				int64(e.Attempts), ns(next)); err != nil {
				return conflict(err)
			}
		}
		return nil
	})
}

// ClaimEvents leases up to limit due events (those due longest first) until now+lease and
// returns them in the order they were enqueued. A leased event is due again when the lease
// ends unless it was marked delivered or failed meanwhile.
func (s *Store) ClaimEvents(ctx context.Context, now time.Time, lease time.Duration, limit int) (_ []store.Event, err error) {
	defer s.observe(ctx, "ClaimEvents", time.Now(), &err)
	if limit <= 0 {
		return nil, nil
	}
	type claimed struct {
		seq  int64
		data store.Event
	}
	var got []claimed
	err = s.write(ctx, func(x q) error {
		var err error
		got, err = all(ctx, x, func(c *claimed) func(scanner) error {
			return func(r scanner) error {
				var created, next, attempts int64
				var delivered sql.NullInt64
				e := &c.data
				if err := r.Scan(&c.seq, &e.ID, &e.Project, &e.Sink, &e.Type, &e.Data, &created, &attempts, &next, &delivered); err != nil {
					return err
				}
				e.CreatedAt, e.NextAttempt, e.Attempts = fromNS(created), fromNS(next), int(attempts)
				e.DeliveredAt = fromNullNS(delivered)
				return nil
			}
		}, qClaim, ns(now.Add(lease)), ns(now), int64(limit))
		return err
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(got, func(i, j int) bool { return got[i].seq < got[j].seq })
	out := make([]store.Event, len(got))
	for i, c := range got {
		out[i] = c.data
	}
	return out, nil
}

// MarkDelivered records delivery; marking a delivered event again changes nothing.
func (s *Store) MarkDelivered(ctx context.Context, id, sink string, now time.Time) (err error) {
	defer s.observe(ctx, "MarkDelivered", time.Now(), &err)
	return s.wexecOne(ctx, qDelivered, ns(now), id, sink)
}

// MarkFailed counts a failed attempt and makes the event due again at next. An event that was
// delivered meanwhile is ErrNotFound.
func (s *Store) MarkFailed(ctx context.Context, id, sink string, next time.Time) (err error) {
	defer s.observe(ctx, "MarkFailed", time.Now(), &err)
	return s.wexecOne(ctx, qFailed, ns(next), id, sink)
}

// OutboxDepth counts events not yet delivered.
func (s *Store) OutboxDepth(ctx context.Context) (_ int64, err error) {
	defer s.observe(ctx, "OutboxDepth", time.Now(), &err)
	var n int64
	err = s.reader().row(ctx, func(r scanner) error { return r.Scan(&n) }, qDepth)
	return n, err
}

package sqlstore

import (
	"context"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// gcBatch bounds each delete on SQLite, where a delete holds the database write lock: token
// requests wait at most one batch, not one whole collection.
const gcBatch = 500

type gcStep struct {
	name  string
	query string // arguments: now (and on SQLite the batch size)
	// retained: the step removes audit records, and its argument is now minus the store's
	// audit retention; it runs only when a retention is set (AuditRetention).
	retained bool
}

// The SQLite forms delete by rowid in batches; PostgreSQL deletes each table in one statement
// inside one transaction (readers are not blocked there).
var (
	qGCLock = `SELECT pg_try_advisory_xact_lock(hashtext(coalesce(current_schema(), '') || ':latchkey:gc'))`

	gcSteps = []struct {
		name     string
		table    string
		where    string
		set      string // non-empty: an UPDATE that clears columns instead of a DELETE
		retained bool
	}{
		{name: "sessions", table: "sessions", where: "expires_at < ?"},
		{name: "auth_codes", table: "auth_codes", where: "expires_at < ?"},
		{name: "tokens", table: "tokens", where: "expires_at < ?"},
		// A rotated token's stored response is only useful inside the grace window.
		{name: "token_replays", table: "tokens", where: "sealed IS NOT NULL AND replay_until <= ?",
			set: "sealed = NULL, replay_until = NULL"},
		{name: "callback_states", table: "callback_states", where: "expires_at < ?"},
		{name: "links", table: "links", where: "expires_at < ?"},
		{name: "logout_tokens", table: "logout_tokens", where: "expires_at < ?"},
		{name: "passkey_ceremonies", table: "passkey_ceremonies", where: "expires_at < ?"},
		{name: "events", table: "events", where: "delivered_at IS NOT NULL AND delivered_at < ?"},
		{name: "used_once", table: "used_once", where: "expires_at < ?"},
		{name: "pushed_requests", table: "pushed_requests", where: "expires_at < ?"},
		{name: "rate_buckets", table: "rate_buckets", where: "expires_at < ?"},
		{name: "shared_starts", table: "shared_starts", where: "expires_at < ?"},
		// Approval requests nobody redeemed: approved, denied or unanswered, past their expiry.
		{name: "approvals", table: "approval_requests", where: "expires_at < ?"},
		// Records still waiting for the relay to the event sinks stay, however old.
		{name: "audit", table: "audit", where: "time < ? AND pending = 0", retained: true},
	}
	sqliteGC, postgresGC []gcStep
)

func init() {
	for _, g := range gcSteps {
		pick := `rowid IN (SELECT rowid FROM ` + g.table + ` WHERE ` + g.where + ` LIMIT ?)`
		if g.set != "" {
			sqliteGC = append(sqliteGC, gcStep{g.name, sqlText(`UPDATE ` + g.table + ` SET ` + g.set + ` WHERE ` + pick), g.retained})
			postgresGC = append(postgresGC, gcStep{g.name, `UPDATE ` + g.table + ` SET ` + g.set + ` WHERE ` + g.where, g.retained})
			continue
		}
		sqliteGC = append(sqliteGC, gcStep{g.name, sqlText(`DELETE FROM ` + g.table + ` WHERE ` + pick), g.retained})
		postgresGC = append(postgresGC, gcStep{g.name, `DELETE FROM ` + g.table + ` WHERE ` + g.where, g.retained})
	}
}

// cutoff is the argument of step g at now: now itself, or for audit records now minus the
// retention; ok is false for a step that does not run (no retention set).
func (s *Store) cutoff(g gcStep, now time.Time) (int64, bool) {
	if !g.retained {
		return ns(now), true
	}
	if s.auditRetention <= 0 {
		return 0, false
	}
	return ns(now.Add(-s.auditRetention)), true
}

// GarbageCollect removes what expired before now, and audit records older than the retention
// (AuditRetention) that reached the event relay; the result names every table it looked at.
// On PostgreSQL one replica collects at a time: a replica that finds the lock taken returns an
// empty result at once.
func (s *Store) GarbageCollect(ctx context.Context, now time.Time) (_ store.GCResult, err error) {
	defer s.observe(ctx, "GarbageCollect", time.Now(), &err)
	res := store.GCResult{}
	if s.postgres() {
		// s.tx runs again after a deadlock with a bulk revocation; count afresh each time.
		err := s.tx(ctx, func(x q) error {
			clear(res)
			var got bool
			if err := x.row(ctx, func(r scanner) error { return r.Scan(&got) }, qGCLock); err != nil {
				return err
			}
			if !got {
				return nil
			}
			for _, g := range postgresGC {
				arg, ok := s.cutoff(g, now)
				if !ok {
					continue
				}
				n, err := x.execN(ctx, g.query, arg)
				if err != nil {
					return err
				}
				res[g.name] += n
			}
			return nil
		})
		if err != nil {
			return store.GCResult{}, err
		}
		return res, nil
	}
	for _, g := range sqliteGC {
		arg, ok := s.cutoff(g, now)
		if !ok {
			continue
		}
		res[g.name] += 0
		for {
			n, err := s.wexec(ctx, g.query, arg, int64(gcBatch))
			if err != nil {
				return res, err
			}
			res[g.name] += n
			if n < gcBatch {
				break
			}
		}
	}
	return res, nil
}

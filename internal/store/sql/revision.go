package sqlstore

import (
	"context"
	"errors"
	"time"
)

// The store's revision (store.Revisions, docs/decisions/0082) moves after every write that is
// not marked quiet (writeQuiet, txQuiet, wexecQuiet): a new write method moves it unless its
// author decided it cannot withdraw anything, so forgetting costs a cache miss, never a stale
// decision.
//
// It moves after the write committed, before the write method returns. A decision that read
// the revision before its own reads therefore either read it before the move, and is thrown
// away once the move is seen, or read it after, and then its reads saw the committed write.
// Moving it inside the transaction instead would let a reader see the new revision and the
// old rows, and keep the old decision under the new revision.
//
// SQLite runs as one replica: the revision is a counter in this process. PostgreSQL replicas
// share it through a sequence (migration 0024): nextval never waits for another transaction's
// lock, so busy writers do not queue on one row, and last_value is what every session sees.

var (
	qRevisionNext = `SELECT nextval('store_revision')`
	qRevisionRead = `SELECT last_value FROM store_revision`
)

// changed moves the revision after a write that ended with err (moved also when it failed:
// statements outside a transaction may have committed before the one that failed).
func (s *Store) changed(ctx context.Context, err error) error {
	s.revision.Add(1)
	if !s.postgres() {
		return err
	}
	// The write has happened; its caller going away must not leave the revision behind.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var n int64
	if rerr := s.w.QueryRowContext(ctx, qRevisionNext).Scan(&n); rerr != nil {
		return errors.Join(err, rerr)
	}
	return err
}

// Revision implements store.Revisions.
func (s *Store) Revision(ctx context.Context) (n int64, err error) {
	if !s.postgres() {
		return s.revision.Load(), nil
	}
	defer s.observe(ctx, "Revision", time.Now(), &err)
	err = s.r.QueryRowContext(ctx, qRevisionRead).Scan(&n)
	return n, err
}

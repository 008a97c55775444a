package sqlstore

import (
	"context"
	"errors"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

const callbackCols = `state_hash, project, subject, connector, purpose, link_id, verifier, key_id, binding_hash,
confirm_hash, expires_at, created_at`

var (
	qCreateCallback = sqlText(`INSERT INTO callback_states (` + callbackCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	qGetCallback    = sqlText(`SELECT ` + callbackCols + ` FROM callback_states WHERE state_hash = ? AND expires_at > ?`)
	qSetConfirm     = sqlText(`UPDATE callback_states SET confirm_hash = ? WHERE state_hash = ? AND expires_at > ?`)
	// Deleting first and deciding afterwards (rolling back if check refuses) makes the delete
	// itself the claim: of two concurrent consumers only one gets the row back.
	qConsumeCallback = sqlText(`DELETE FROM callback_states WHERE state_hash = ? AND expires_at > ? RETURNING ` + callbackCols)
	qEndCallbacks    = sqlText(`DELETE FROM callback_states WHERE project = ? AND subject = ?`)
)

func scanCallback(c *store.CallbackState) func(scanner) error {
	return func(r scanner) error {
		var expires, created int64
		if err := r.Scan(&c.StateHash, &c.Project, &c.Subject, &c.Connector, &c.Purpose, &c.LinkID, &c.Verifier,
			&c.KeyID, &c.BindingHash, &c.ConfirmHash, &expires, &created); err != nil {
			return err
		}
		c.ExpiresAt, c.CreatedAt = fromNS(expires), fromNS(created)
		return nil
	}
}

func (s *Store) CreateCallbackState(ctx context.Context, c store.CallbackState) (err error) {
	defer s.observe(ctx, "CreateCallbackState", time.Now(), &err)
	_, err = s.wexec(ctx, qCreateCallback, c.StateHash, c.Project, c.Subject, c.Connector, c.Purpose,
		c.LinkID, blob(c.Verifier), c.KeyID, blob(c.BindingHash), blob(c.ConfirmHash), ns(c.ExpiresAt), ns(c.CreatedAt))
	return conflict(err)
}

func (s *Store) GetCallbackState(ctx context.Context, stateHash []byte, now time.Time) (_ store.CallbackState, err error) {
	defer s.observe(ctx, "GetCallbackState", time.Now(), &err)
	var c store.CallbackState
	err = s.reader().row(ctx, scanCallback(&c), qGetCallback, stateHash, ns(now))
	return c, err
}

func (s *Store) SetConfirmHash(ctx context.Context, stateHash, confirmHash []byte, now time.Time) (err error) {
	defer s.observe(ctx, "SetConfirmHash", time.Now(), &err)
	return s.wexecOne(ctx, qSetConfirm, blob(confirmHash), stateHash, ns(now))
}

// ConsumeCallbackState deletes the row and returns it, exactly once. check runs inside the
// transaction and must not call the store; when it fails the row stays and is returned with
// check's error, so the caller can still show the confirmation page.
func (s *Store) ConsumeCallbackState(ctx context.Context, stateHash []byte, now time.Time, check func(store.CallbackState) error) (_ store.CallbackState, err error) {
	defer s.observe(ctx, "ConsumeCallbackState", time.Now(), &err)
	var c store.CallbackState
	err = s.tx1(ctx, func(x q) error {
		if err := x.row(ctx, scanCallback(&c), qConsumeCallback, stateHash, ns(now)); err != nil {
			return err
		}
		if check != nil {
			return check(c)
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return store.CallbackState{}, err
	}
	return c, err
}

func (s *Store) EndCallbackStates(ctx context.Context, project, subject string) (_ int64, err error) {
	defer s.observe(ctx, "EndCallbackStates", time.Now(), &err)
	return s.wexec(ctx, qEndCallbacks, project, subject)
}

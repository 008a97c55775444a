package sqlstore

import (
	"context"
	"errors"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

const pushedCols = `hash, project, client_id, params, expires_at, created_at`

var (
	qCreatePushed  = sqlText(`INSERT INTO pushed_requests (` + pushedCols + `) VALUES (?, ?, ?, ?, ?, ?)`)
	qConsumePushed = sqlText(`DELETE FROM pushed_requests WHERE hash = ? AND expires_at > ? RETURNING ` + pushedCols)
)

func scanPushed(p *store.PushedRequest) func(scanner) error {
	return func(r scanner) error {
		var expires, created int64
		if err := r.Scan(&p.Hash, &p.Project, &p.ClientID, &p.Params, &expires, &created); err != nil {
			return err
		}
		p.ExpiresAt, p.CreatedAt = fromNS(expires), fromNS(created)
		return nil
	}
}

func (s *Store) CreatePushedRequest(ctx context.Context, p store.PushedRequest) (err error) {
	defer s.observe(ctx, "CreatePushedRequest", time.Now(), &err)
	_, err = s.wexec(ctx, qCreatePushed, p.Hash, p.Project, p.ClientID, p.Params, ns(p.ExpiresAt), ns(p.CreatedAt))
	return conflict(err)
}

// ConsumePushedRequest deletes the row and returns it, once. check runs inside the transaction;
// when it refuses, the delete is rolled back and the row stays for its own client.
func (s *Store) ConsumePushedRequest(ctx context.Context, hash []byte, now time.Time, check func(store.PushedRequest) error) (store.PushedRequest, error) {
	var observed error
	defer s.observe(ctx, "ConsumePushedRequest", time.Now(), &observed)
	var p store.PushedRequest
	var refused error
	err := s.tx1(ctx, func(x q) error {
		if err := x.row(ctx, scanPushed(&p), qConsumePushed, hash, ns(now)); err != nil {
			return err
		}
		if check != nil {
			refused = check(p)
			return refused
		}
		return nil
	})
	switch {
	case err == nil:
		return p, nil
	case refused != nil && errors.Is(err, refused):
		// The caller's refusal is answered correctly: not a store error.
		return p, err
	case errors.Is(err, store.ErrNotFound):
		return store.PushedRequest{}, err
	}
	observed = err
	return store.PushedRequest{}, err
}

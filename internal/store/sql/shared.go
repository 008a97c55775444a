package sqlstore

import (
	"context"
	"errors"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// Organisation-shared connections (docs/shared-connections.md): start URLs, and the one shared
// connection per connector, which lives in connections under store.SharedSubject.

const sharedStartCols = `code_hash, id, project, connector, actor, created_at, expires_at`

var (
	qCreateSharedStart = sqlText(`INSERT INTO shared_starts (` + sharedStartCols + `) VALUES (?, ?, ?, ?, ?, ?, ?)`)
	// The delete is the claim: of two browsers opening the same URL, only one gets the row.
	qTakeSharedStart = sqlText(`DELETE FROM shared_starts WHERE code_hash = ? RETURNING ` + sharedStartCols)
	// The other accounts connected as the connector's shared account before this one.
	qReplacedShared = sqlText(`DELETE FROM connections WHERE project = ? AND subject = ? AND connector = ? AND account_id <> ?
RETURNING ` + connectionCols + `, version`)
	qListShared = sqlText(`SELECT ` + connectionCols + `, version FROM connections
WHERE project = ? AND subject LIKE 'shared:%' ORDER BY connector, created_at, id`)
)

func scanSharedStart(x *store.SharedStart) func(scanner) error {
	return func(r scanner) error {
		var created, expires int64
		if err := r.Scan(&x.CodeHash, &x.ID, &x.Project, &x.Connector, &x.Actor, &created, &expires); err != nil {
			return err
		}
		x.CreatedAt, x.ExpiresAt = fromNS(created), fromNS(expires)
		return nil
	}
}

func (s *Store) CreateSharedStart(ctx context.Context, x store.SharedStart) (err error) {
	defer s.observe(ctx, "CreateSharedStart", time.Now(), &err)
	_, err = s.wexec(ctx, qCreateSharedStart, x.CodeHash, x.ID, x.Project, x.Connector, x.Actor, ns(x.CreatedAt), ns(x.ExpiresAt))
	return conflict(err)
}

// TakeSharedStart deletes the row whatever its expiry (an expired start is as spent as a used
// one) and returns it only while it lives.
func (s *Store) TakeSharedStart(ctx context.Context, codeHash []byte, now time.Time) (_ store.SharedStart, err error) {
	defer s.observe(ctx, "TakeSharedStart", time.Now(), &err)
	var x store.SharedStart
	err = s.wrow(ctx, scanSharedStart(&x), qTakeSharedStart, codeHash)
	if err == nil && !now.Before(x.ExpiresAt) {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.SharedStart{}, err
	}
	return x, nil
}

var errNotShared = errors.New("sqlstore: a shared connection's subject must be store.SharedSubject of its connector")

func (s *Store) SaveSharedConnection(ctx context.Context, c store.Connection) (_ store.Connection, _ []store.Connection, err error) {
	defer s.observe(ctx, "SaveSharedConnection", time.Now(), &err)
	if c.Subject != store.SharedSubject(c.Connector) {
		return store.Connection{}, nil, errNotShared
	}
	unlock, err := s.holdAccount(ctx, &c)
	if err != nil {
		return store.Connection{}, nil, err
	}
	defer unlock()
	var out store.Connection
	var replaced []store.Connection
	err = s.tx(ctx, func(x q) error {
		out, replaced = store.Connection{}, nil
		err := x.each(ctx, func(r scanner) error {
			var old store.Connection
			var v int64
			if err := scanConnection(&old, &v)(r); err != nil {
				return err
			}
			replaced = append(replaced, old)
			return nil
		}, qReplacedShared, c.Project, c.Subject, c.Connector, c.AccountID)
		if err != nil {
			return err
		}
		var version int64
		return saveConnection(ctx, x, c, &out, &version)
	})
	if err != nil {
		return store.Connection{}, nil, err
	}
	return out, replaced, nil
}

func (s *Store) ListSharedConnections(ctx context.Context, project string) (_ []store.Connection, err error) {
	defer s.observe(ctx, "ListSharedConnections", time.Now(), &err)
	var out []store.Connection
	err = s.reader().each(ctx, func(r scanner) error {
		var c store.Connection
		var v int64
		if err := scanConnection(&c, &v)(r); err != nil {
			return err
		}
		out = append(out, c)
		return nil
	}, qListShared, project)
	return out, err
}

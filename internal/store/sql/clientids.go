package sqlstore

import (
	"context"
	"errors"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

var (
	qGetClientIDHolder = sqlText(`SELECT namespace FROM client_id_holders WHERE project = ? AND client_id = ?`)
	qHoldClientID      = sqlText(`INSERT INTO client_id_holders (project, client_id, namespace, held_since) VALUES (?, ?, ?, ?) ON CONFLICT (project, client_id) DO NOTHING`)
)

// HoldClientID implements store.ClientIDHolders. Every reconcile of an OAuthClient asks, so an
// id already held is answered by a read; the insert that records a new holder changes nothing
// when another replica or namespace was first (the primary key decides), and the read after it
// returns whoever that was.
func (s *Store) HoldClientID(ctx context.Context, project, clientID, namespace string, now time.Time) (holder string, err error) {
	defer s.observe(ctx, "HoldClientID", time.Now(), &err)
	scan := func(r scanner) error { return r.Scan(&holder) }
	err = s.reader().row(ctx, scan, qGetClientIDHolder, project, clientID)
	if !errors.Is(err, store.ErrNotFound) {
		return holder, err
	}
	if _, err = s.wexec(ctx, qHoldClientID, project, clientID, namespace, ns(now)); err != nil {
		return "", err
	}
	err = s.write(ctx, func(x q) error { return x.row(ctx, scan, qGetClientIDHolder, project, clientID) })
	return holder, err
}

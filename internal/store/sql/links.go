package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

const linkCols = `id, code_hash, sealed_code, key_id, project, subject, client_id, connector, kind, state,
expires_at, created_at, account`

var (
	qOpenLinkFor = sqlText(`SELECT ` + linkCols + ` FROM links
WHERE project = ? AND subject = ? AND client_id = ? AND connector = ? AND state = 'open'` + forUpdate)
	// qOpenLinkRead is qOpenLinkFor outside a transaction, for OpenLink's first look.
	qOpenLinkRead = sqlText(`SELECT ` + linkCols + ` FROM links
WHERE project = ? AND subject = ? AND client_id = ? AND connector = ? AND state = 'open'`)
	qLinkLock    = `SELECT pg_advisory_xact_lock(hashtextextended(?, 0))`
	qReplaceLink = sqlText(`UPDATE links SET state = 'replaced', closed_at = ? WHERE id = ? AND state = 'open'`)
	qInsertLink  = sqlText(`INSERT INTO links (` + linkCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'open', ?, ?, ?)`)
	qLinkByCode  = sqlText(`SELECT ` + linkCols + ` FROM links WHERE code_hash = ? AND state = 'open' AND expires_at > ?`)
	qCloseLink   = sqlText(`UPDATE links SET state = ?, closed_at = ? WHERE id = ? AND state = 'open'`)
)

func scanLink(l *store.Link) func(scanner) error {
	return func(r scanner) error {
		var kind, state string
		var expires, created int64
		if err := r.Scan(&l.ID, &l.CodeHash, &l.SealedCode, &l.KeyID, &l.Project, &l.Subject, &l.ClientID,
			&l.Connector, &kind, &state, &expires, &created, &l.Account); err != nil {
			return err
		}
		l.Kind, l.State = store.LinkKind(kind), store.LinkState(state)
		l.ExpiresAt, l.CreatedAt = fromNS(expires), fromNS(created)
		return nil
	}
}

// OpenLink keeps one open link per person×agent×connector: an agent asking again gets the same link.
//
// On PostgreSQL callers for the same person×agent×connector first queue on a
// transaction-scoped advisory lock: a row lock cannot serialise them while no open link exists
// yet, and without the queue callers asking for different kinds keep replacing each other's
// link and colliding on insert. The partial unique index on open links stays the guarantee; a
// caller whose insert still collides runs again and finds the winner's link.
func (s *Store) OpenLink(ctx context.Context, l store.Link, now time.Time) (_ store.Link, _ bool, err error) {
	defer s.observe(ctx, "OpenLink", time.Now(), &err)
	// Most calls are an agent asking again while its link is open: a read answers them, without
	// a turn at the writer. What the read finds is what the transaction would have found had it
	// run at that moment.
	var cur store.Link
	err = s.reader().row(ctx, scanLink(&cur), qOpenLinkRead, l.Project, l.Subject, l.ClientID, l.Connector)
	switch {
	case err == nil && cur.Kind == l.Kind && cur.Account == l.Account && now.Before(cur.ExpiresAt):
		return cur, false, nil
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return store.Link{}, false, err
	}
	var out store.Link
	var created bool
	err = s.tx(ctx, func(x q) error {
		out, created = store.Link{}, false
		if s.postgres() {
			key := "latchkey:link\x1f" + l.Project + "\x1f" + l.Subject + "\x1f" + l.ClientID + "\x1f" + l.Connector
			if _, err := x.exec(ctx, qLinkLock, key); err != nil {
				return err
			}
		}
		cur = store.Link{}
		err := x.row(ctx, scanLink(&cur), qOpenLinkFor, l.Project, l.Subject, l.ClientID, l.Connector)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return err
		case cur.Kind == l.Kind && cur.Account == l.Account && now.Before(cur.ExpiresAt):
			out = cur
			return nil
		default:
			// Another kind or account, or expired: the old code must stop working (uniform 404).
			if _, err := x.exec(ctx, qReplaceLink, ns(now), cur.ID); err != nil {
				return err
			}
		}
		if _, err := x.exec(ctx, qInsertLink, l.ID, l.CodeHash, blob(l.SealedCode), l.KeyID, l.Project,
			l.Subject, l.ClientID, l.Connector, string(l.Kind), ns(l.ExpiresAt), ns(l.CreatedAt), l.Account); err != nil {
			if isUnique(err) {
				return errRace
			}
			return err
		}
		out, created = l, true
		out.State = store.LinkOpen
		return nil
	})
	if err != nil {
		return store.Link{}, false, err
	}
	return out, created, nil
}

func (s *Store) GetLinkByCode(ctx context.Context, codeHash []byte, now time.Time) (_ store.Link, err error) {
	defer s.observe(ctx, "GetLinkByCode", time.Now(), &err)
	var l store.Link
	err = s.reader().row(ctx, scanLink(&l), qLinkByCode, codeHash, ns(now))
	return l, err
}

// CloseLink moves an open link to done or declined. A link that expired while the person was
// finishing can still be closed; one that was replaced or closed is ErrNotFound.
func (s *Store) CloseLink(ctx context.Context, id string, state store.LinkState, now time.Time) (err error) {
	defer s.observe(ctx, "CloseLink", time.Now(), &err)
	if state != store.LinkDone && state != store.LinkDeclined {
		return fmt.Errorf("sqlstore: CloseLink: state must be done or declined, not %q", state)
	}
	return s.wexecOne(ctx, qCloseLink, string(state), ns(now), id)
}

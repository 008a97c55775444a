package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"latchkey.dev/latchkey/internal/store"
)

const connectionCols = `id, project, subject, connector, account_id, account_name, key_id, access_token,
refresh_token, token_type, expiry, scopes, status, created_at, updated_at, is_default`

var (
	qGetConnection  = sqlText(`SELECT ` + connectionCols + `, version FROM connections WHERE project = ? AND id = ?`)
	qLockConnection = sqlText(`SELECT ` + connectionCols + `, version FROM connections WHERE project = ? AND id = ?` + forUpdate)
	qSaveConnection = sqlText(`INSERT INTO connections (` + connectionCols + `, version)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
CASE WHEN EXISTS (SELECT 1 FROM connections WHERE project = ? AND subject = ? AND connector = ?) THEN 0 ELSE 1 END, 1)
ON CONFLICT (project, subject, connector, account_id) DO UPDATE SET account_name = excluded.account_name,
key_id = excluded.key_id, access_token = excluded.access_token, refresh_token = excluded.refresh_token,
token_type = excluded.token_type, expiry = excluded.expiry, scopes = excluded.scopes, status = excluded.status,
updated_at = excluded.updated_at, version = connections.version + 1
RETURNING ` + connectionCols + `, version`)
	qUpdateConnection = sqlText(`UPDATE connections SET account_name = ?, key_id = ?, access_token = ?,
refresh_token = ?, token_type = ?, expiry = ?, scopes = ?, status = ?, updated_at = ?, version = version + 1
WHERE project = ? AND id = ? AND version = ?`)
	qListConnections  = sqlText(`SELECT ` + connectionCols + `, version FROM connections WHERE project = ? AND subject = ? ORDER BY created_at, id`)
	qDeleteConnection = sqlText(`DELETE FROM connections WHERE project = ? AND id = ?`)
	// The two halves of SetDefaultConnection, in this order in one transaction: the unique
	// index on the flag never sees two defaults.
	qUnsetDefault = sqlText(`UPDATE connections SET is_default = 0
WHERE project = ? AND subject = ? AND connector = ? AND is_default = 1 AND id <> ?`)
	qSetDefault      = sqlText(`UPDATE connections SET is_default = 1 WHERE project = ? AND subject = ? AND id = ?`)
	qConnectorOfConn = sqlText(`SELECT connector FROM connections WHERE project = ? AND subject = ? AND id = ?`)
	// On PostgreSQL callers moving the same person's mark queue on the rows of that connector,
	// locked in one order: a second mover sees the first one's default, not the old one, and
	// takes the mark off it instead of colliding on the unique index.
	qLockAccounts = sqlText(`SELECT id FROM connections WHERE project = ? AND subject = ? AND connector = ? ORDER BY id` + forUpdate)
	// Also removed by the foreign key's cascade; said explicitly so the delete does not depend
	// on the connection's foreign_keys setting.
	qDeleteConnectionPerms = sqlText(`DELETE FROM agent_permissions WHERE project = ? AND connection_id = ?`)
)

func scanConnection(c *store.Connection, version *int64) func(scanner) error {
	return func(r scanner) error {
		var scopes, status string
		var expiry sql.NullInt64
		var created, updated, isDefault int64
		if err := r.Scan(&c.ID, &c.Project, &c.Subject, &c.Connector, &c.AccountID, &c.AccountName, &c.KeyID,
			&c.AccessToken, &c.RefreshToken, &c.TokenType, &expiry, &scopes, &status, &created, &updated, &isDefault, version); err != nil {
			return err
		}
		c.Default = isDefault == 1
		var err error
		c.Scopes, err = fromList(scopes)
		c.Status = store.ConnectionStatus(status)
		c.Expiry = fromNullNS(expiry)
		c.CreatedAt, c.UpdatedAt = fromNS(created), fromNS(updated)
		return err
	}
}

func accountKey(c store.Connection) string {
	return c.Project + "\x00" + c.Subject + "\x00" + c.Connector + "\x00" + c.AccountID
}

// SaveConnection stores a connection, or updates the person's existing connection to the same
// account in place (keeping its ID, CreatedAt and agent permissions). An empty Status is
// stored as active.
func (s *Store) SaveConnection(ctx context.Context, c store.Connection) (_ store.Connection, err error) {
	defer s.observe(ctx, "SaveConnection", time.Now(), &err)
	unlock, err := s.holdAccount(ctx, &c)
	if err != nil {
		return store.Connection{}, err
	}
	defer unlock()
	var out store.Connection
	err = s.tx(ctx, func(x q) error {
		var version int64
		return saveConnection(ctx, x, c, &out, &version)
	})
	if err != nil {
		return store.Connection{}, err
	}
	return out, nil
}

// holdAccount readies c for a save: an empty Status is stored as active, and on SQLite the
// account's row lock is taken (an upstream refresh of the same account, UpdateConnection, holds
// it; PostgreSQL's row locks do that inside the transaction). The caller defers unlock.
func (s *Store) holdAccount(ctx context.Context, c *store.Connection) (unlock func(), err error) {
	if c.Status == "" {
		c.Status = store.ConnectionActive
	}
	if s.postgres() {
		return func() {}, nil
	}
	return s.rows.lock(ctx, accountKey(*c))
}

// saveConnection runs qSaveConnection. Two first connections of one person to one connector
// saved at once on PostgreSQL both find no other and both claim the default mark; the later
// one collides on the mark's unique index and runs again (errRace), then finds the earlier
// one and is saved without the mark.
func saveConnection(ctx context.Context, x q, c store.Connection, out *store.Connection, version *int64) error {
	err := x.row(ctx, scanConnection(out, version), qSaveConnection, c.ID, c.Project, c.Subject,
		c.Connector, c.AccountID, c.AccountName, c.KeyID, blob(c.AccessToken), blob(c.RefreshToken), c.TokenType,
		nullNS(c.Expiry), list(c.Scopes), string(c.Status), ns(c.CreatedAt), ns(c.UpdatedAt),
		c.Project, c.Subject, c.Connector)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "connections_default" {
		return errRace
	}
	return conflict(err)
}

// FinishConnection locks the person's row (on SQLite the transaction holds the only write
// connection), so an end of their access that commits first is seen here and one that commits
// later finds the connection saved.
func (s *Store) FinishConnection(ctx context.Context, c store.Connection, since time.Time, check func(store.Person) error) (_ store.Connection, err error) {
	defer s.observe(ctx, "FinishConnection", time.Now(), &err)
	unlock, err := s.holdAccount(ctx, &c)
	if err != nil {
		return store.Connection{}, err
	}
	defer unlock()
	var out store.Connection
	err = s.tx(ctx, func(x q) error {
		out = store.Connection{}
		var person store.Person
		if err := x.row(ctx, scanPerson(&person), qLockPerson, c.Project, c.Subject); err != nil {
			return err
		}
		// At since itself counts as after: on a clock that has not moved, an end and a start
		// at the same instant must not be taken for a start after the end.
		if !person.AccessEndedAt.IsZero() && !person.AccessEndedAt.Before(since) {
			return store.ErrAccessEnded
		}
		if check != nil {
			if err := check(person); err != nil {
				return err
			}
		}
		var version int64
		return saveConnection(ctx, x, c, &out, &version)
	})
	if err != nil {
		return store.Connection{}, err
	}
	return out, nil
}

func (s *Store) GetConnection(ctx context.Context, project, id string) (_ store.Connection, err error) {
	defer s.observe(ctx, "GetConnection", time.Now(), &err)
	return s.getConnection(ctx, project, id)
}

// getConnection is GetConnection for the store's own use: a read inside another operation is
// part of that operation's time, not an operation of its own.
func (s *Store) getConnection(ctx context.Context, project, id string) (store.Connection, error) {
	var c store.Connection
	var version int64
	err := s.reader().row(ctx, scanConnection(&c, &version), qGetConnection, project, id)
	return c, err
}

func (s *Store) ListConnections(ctx context.Context, project, subject string) (_ []store.Connection, err error) {
	defer s.observe(ctx, "ListConnections", time.Now(), &err)
	// The version guards UpdateConnection's write; a list has no use for it.
	return all(ctx, s.reader(), func(c *store.Connection) func(scanner) error {
		var version int64
		return scanConnection(c, &version)
	}, qListConnections, project, subject)
}

// UpdateConnection applies fn to the connection while no other caller can change it, and
// stores the result. ID, Project, Subject, Connector, AccountID and CreatedAt cannot change
// (a different account is a different connection: SaveConnection).
//
// PostgreSQL: fn runs inside a transaction holding the row lock (SELECT … FOR UPDATE), which
// serialises callers on every replica.
//
// SQLite: the only lock SQLite has is the database-wide write lock, and fn performs an upstream
// token refresh over the network; holding that lock meanwhile would stall every token request
// of the server for as long as the upstream takes. SQLite runs as a single replica, so a lock
// per account inside this process serialises the callers instead (SaveConnection and
// DeleteConnection take it too), and the write that follows checks the row's version, so a
// change made behind the process's back is reported as ErrConflict rather than overwritten.
func (s *Store) UpdateConnection(ctx context.Context, project, id string, fn func(store.Connection) (store.Connection, error)) (_ store.Connection, err error) {
	defer s.observe(ctx, "UpdateConnection", time.Now(), &err)
	if s.postgres() {
		var out store.Connection
		err := s.tx1(ctx, func(x q) error {
			var cur store.Connection
			var version int64
			if err := x.row(ctx, scanConnection(&cur, &version), qLockConnection, project, id); err != nil {
				return err
			}
			next, err := applyConnection(cur, fn)
			if err != nil {
				return err
			}
			if err := storeConnection(ctx, x, next, version); err != nil {
				return err
			}
			out = next
			return nil
		})
		return out, s.changed(ctx, err)
	}

	cur, err := s.getConnection(ctx, project, id)
	if err != nil {
		return store.Connection{}, err
	}
	unlock, err := s.rows.lock(ctx, accountKey(cur))
	if err != nil {
		return store.Connection{}, err
	}
	defer unlock()
	// Read again under the lock: the previous holder's write is what fn must see.
	var version int64
	if err := s.reader().row(ctx, scanConnection(&cur, &version), qGetConnection, project, id); err != nil {
		return store.Connection{}, err
	}
	next, err := applyConnection(cur, fn)
	if err != nil {
		return store.Connection{}, err
	}
	if err := s.write(ctx, func(x q) error { return storeConnection(ctx, x, next, version) }); err != nil {
		return store.Connection{}, err
	}
	return next, nil
}

// applyConnection runs fn and keeps what fn may not change.
func applyConnection(cur store.Connection, fn func(store.Connection) (store.Connection, error)) (store.Connection, error) {
	next, err := fn(cur)
	if err != nil {
		return store.Connection{}, err
	}
	next.ID, next.Project, next.Subject, next.Connector = cur.ID, cur.Project, cur.Subject, cur.Connector
	next.AccountID, next.CreatedAt, next.Default = cur.AccountID, cur.CreatedAt, cur.Default
	if next.Status == "" {
		next.Status = store.ConnectionActive
	}
	return next, nil
}

// storeConnection writes next if the row is still at version.
func storeConnection(ctx context.Context, x q, next store.Connection, version int64) error {
	n, err := x.execN(ctx, qUpdateConnection, next.AccountName, next.KeyID, blob(next.AccessToken),
		blob(next.RefreshToken), next.TokenType, nullNS(next.Expiry), list(next.Scopes), string(next.Status),
		ns(next.UpdatedAt), next.Project, next.ID, version)
	if err != nil {
		return err
	}
	if n != 1 {
		return errRace
	}
	return nil
}

// DeleteConnection removes the connection and every agent permission that names it.
func (s *Store) DeleteConnection(ctx context.Context, project, id string) (err error) {
	defer s.observe(ctx, "DeleteConnection", time.Now(), &err)
	if !s.postgres() {
		cur, err := s.getConnection(ctx, project, id)
		if err != nil {
			return err
		}
		unlock, err := s.rows.lock(ctx, accountKey(cur))
		if err != nil {
			return err
		}
		defer unlock()
	}
	return s.tx(ctx, func(x q) error {
		if _, err := x.exec(ctx, qDeleteConnectionPerms, project, id); err != nil {
			return err
		}
		n, err := x.execN(ctx, qDeleteConnection, project, id)
		if err == nil && n == 0 {
			err = store.ErrNotFound
		}
		return err
	})
}

// SetDefaultConnection moves the person's default mark for the connection's connector to the
// connection, in one transaction: no reader sees two defaults, or none in between.
func (s *Store) SetDefaultConnection(ctx context.Context, project, subject, id string) (err error) {
	defer s.observe(ctx, "SetDefaultConnection", time.Now(), &err)
	return s.tx(ctx, func(x q) error {
		var connector string
		if err := x.row(ctx, func(r scanner) error { return r.Scan(&connector) }, qConnectorOfConn, project, subject, id); err != nil {
			return err
		}
		if s.postgres() {
			if err := x.each(ctx, func(r scanner) error { var id string; return r.Scan(&id) }, qLockAccounts, project, subject, connector); err != nil {
				return err
			}
		}
		if _, err := x.exec(ctx, qUnsetDefault, project, subject, connector, id); err != nil {
			return err
		}
		n, err := x.execN(ctx, qSetDefault, project, subject, id)
		if err == nil && n == 0 {
			err = store.ErrNotFound
		}
		return conflict(err)
	})
}

// ---------------------------------------------------------------------------------------------
// Agent permissions

const permissionCols = `project, subject, connector, client_id, connection_id, created_at`

var (
	qAllowAgent = sqlText(`INSERT INTO agent_permissions (` + permissionCols + `) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (project, subject, connector, client_id, connection_id) DO NOTHING`)
	qFindPermission = sqlText(`SELECT ` + permissionCols + ` FROM agent_permissions
WHERE project = ? AND subject = ? AND connector = ? AND client_id = ? ORDER BY created_at, connection_id LIMIT 1`)
	qListPermissions = sqlText(`SELECT ` + permissionCols + ` FROM agent_permissions
WHERE project = ? AND subject = ? ORDER BY connector, client_id, created_at, connection_id`)
	qDeletePermission = sqlText(`DELETE FROM agent_permissions WHERE project = ? AND subject = ? AND connector = ? AND client_id = ?`)
	qDisallowAgent    = sqlText(`DELETE FROM agent_permissions WHERE project = ? AND subject = ? AND connection_id = ? AND client_id = ?`)
	// The permission's foreign key names a connection of the same person and connector, so the
	// join finds it among these rows or not at all.
	qAgentAccess = sqlText(`SELECT c.id, c.project, c.subject, c.connector, c.account_id, c.account_name, c.key_id,
c.access_token, c.refresh_token, c.token_type, c.expiry, c.scopes, c.status, c.created_at, c.updated_at,
c.is_default, c.version, p.client_id IS NOT NULL
FROM connections c LEFT JOIN agent_permissions p ON p.project = c.project AND p.subject = c.subject
AND p.connector = c.connector AND p.client_id = ? AND p.connection_id = c.id
WHERE c.project = ? AND c.subject = ? AND c.connector = ? ORDER BY c.created_at, c.id`)
)

// qSubjectAccess is qGetToken, qAgentAccess and qGetPerson in one: one row per connection of
// the token's person to the connector (one row with empty connection columns when there is
// none), each with the person, whom token exchange checks against the project's sign-in. The
// connection and person columns are coalesced so the scan needs no NULLs.
// The few rows are put in qAgentAccess's order in Go, which spares both databases a sort.
var qSubjectAccess = sqlText(`SELECT t.hash, t.kind, t.project, t.client_id, t.subject, t.scopes, t.audience,
t.family_id, t.generation, t.code_hash, t.auth_time, t.issued_at, t.expires_at, t.revoked_at, t.rotated_at, t.jkt, t.authorization_details, t.delegation,
COALESCE(c.id, ''), COALESCE(c.project, ''), COALESCE(c.subject, ''), COALESCE(c.connector, ''),
COALESCE(c.account_id, ''), COALESCE(c.account_name, ''), COALESCE(c.key_id, ''), c.access_token, c.refresh_token,
COALESCE(c.token_type, ''), c.expiry, COALESCE(c.scopes, ''), COALESCE(c.status, ''), COALESCE(c.created_at, 0),
COALESCE(c.updated_at, 0), COALESCE(c.is_default, 0), COALESCE(c.version, 0), p.client_id IS NOT NULL,
COALESCE(pe.project, ''), COALESCE(pe.id, ''), COALESCE(pe.source, ''), COALESCE(pe.source_subject, ''),
COALESCE(pe.email, ''), COALESCE(pe.name, ''), COALESCE(pe.created_at, 0), COALESCE(pe.access_ended_at, 0)
FROM tokens t
LEFT JOIN people pe ON pe.project = t.project AND pe.id = t.subject AND t.subject <> ''
LEFT JOIN connections c ON c.project = t.project AND c.subject = t.subject AND c.connector = ?
LEFT JOIN agent_permissions p ON p.project = c.project AND p.subject = c.subject
AND p.connector = c.connector AND p.client_id = t.client_id AND p.connection_id = c.id
WHERE t.hash = ?`)

func scanPermission(p *store.AgentPermission) func(scanner) error {
	return func(r scanner) error {
		var created int64
		if err := r.Scan(&p.Project, &p.Subject, &p.Connector, &p.ClientID, &p.ConnectionID, &created); err != nil {
			return err
		}
		p.CreatedAt = fromNS(created)
		return nil
	}
}

// AllowAgent lets a client use a connection, beside the other connections of the connector it
// may already use. The connection must belong to the same person and connector, else
// ErrNotFound (a foreign key enforces it).
func (s *Store) AllowAgent(ctx context.Context, p store.AgentPermission) (err error) {
	defer s.observe(ctx, "AllowAgent", time.Now(), &err)
	_, err = s.wexec(ctx, qAllowAgent, p.Project, p.Subject, p.Connector, p.ClientID, p.ConnectionID,
		ns(p.CreatedAt))
	if err != nil && isForeignKey(err) {
		return errors.Join(store.ErrNotFound, err)
	}
	return err
}

func (s *Store) FindPermission(ctx context.Context, project, subject, connector, clientID string) (_ store.AgentPermission, err error) {
	defer s.observe(ctx, "FindPermission", time.Now(), &err)
	var p store.AgentPermission
	err = s.reader().row(ctx, scanPermission(&p), qFindPermission, project, subject, connector, clientID)
	return p, err
}

func (s *Store) ListPermissions(ctx context.Context, project, subject string) (_ []store.AgentPermission, err error) {
	defer s.observe(ctx, "ListPermissions", time.Now(), &err)
	return all(ctx, s.reader(), scanPermission, qListPermissions, project, subject)
}

func (s *Store) AgentAccess(ctx context.Context, project, subject, connector, clientID string) (_ store.AgentAccess, err error) {
	defer s.observe(ctx, "AgentAccess", time.Now(), &err)
	var out store.AgentAccess
	err = s.reader().each(ctx, func(r scanner) error {
		var c store.Connection
		var version int64
		var allowed bool
		if err := scanConnection(&c, &version)(withExtra{r, []any{&allowed}}); err != nil {
			return err
		}
		if allowed {
			out.Permits = append(out.Permits, c.ID)
		}
		out.Connections = append(out.Connections, c)
		return nil
	}, qAgentAccess, clientID, project, subject, connector)
	if err != nil {
		return store.AgentAccess{}, err
	}
	out.Allowed = out.Choose()
	return out, nil
}

func (s *Store) SubjectAccess(ctx context.Context, hash []byte, connector string) (_ store.Token, _ store.AgentAccess, err error) {
	defer s.observe(ctx, "SubjectAccess", time.Now(), &err)
	var (
		t     store.Token
		out   store.AgentAccess
		found bool
	)
	err = s.reader().each(ctx, func(r scanner) error {
		var c store.Connection
		var version int64
		var allowed bool
		// The token's columns come first, then the connection's, the permission, and the
		// person's: each scan function hands its destinations to the next, and the innermost
		// scans the row.
		err := scanToken(&t, nil)(scanFunc(func(tok ...any) error {
			return scanConnection(&c, &version)(scanFunc(func(cn ...any) error {
				return scanPerson(&out.Person)(scanFunc(func(pe ...any) error {
					return r.Scan(append(append(append(tok, cn...), &allowed), pe...)...)
				}))
			}))
		}))
		if err != nil {
			return err
		}
		found = true
		if c.ID == "" {
			return nil
		}
		if allowed {
			out.Permits = append(out.Permits, c.ID)
		}
		out.Connections = append(out.Connections, c)
		return nil
	}, qSubjectAccess, connector, hash)
	if err == nil && !found {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Token{}, store.AgentAccess{}, err
	}
	slices.SortFunc(out.Connections, func(a, b store.Connection) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	if len(out.Permits) > 0 {
		permits := make([]string, 0, len(out.Permits))
		for _, c := range out.Connections {
			if slices.Contains(out.Permits, c.ID) {
				permits = append(permits, c.ID)
			}
		}
		out.Permits = permits
	}
	out.Allowed = out.Choose()
	return t, out, nil
}

// scanFunc is a scanner made of a function.
type scanFunc func(dest ...any) error

func (f scanFunc) Scan(dest ...any) error { return f(dest...) }

// withExtra scans the columns a scan function knows, then the extra ones after them.
type withExtra struct {
	scanner
	extra []any
}

func (w withExtra) Scan(dest ...any) error { return w.scanner.Scan(append(dest, w.extra...)...) }

func (s *Store) DeletePermission(ctx context.Context, project, subject, connector, clientID string) (err error) {
	defer s.observe(ctx, "DeletePermission", time.Now(), &err)
	return s.wexecOne(ctx, qDeletePermission, project, subject, connector, clientID)
}

func (s *Store) DisallowAgent(ctx context.Context, project, subject, connectionID, clientID string) (err error) {
	defer s.observe(ctx, "DisallowAgent", time.Now(), &err)
	return s.wexecOne(ctx, qDisallowAgent, project, subject, connectionID, clientID)
}

// ---------------------------------------------------------------------------------------------

// keyedLock is a set of mutexes created on demand, one per key, that waiting callers can give
// up on when their context ends.
type keyedLock struct {
	mu sync.Mutex
	m  map[string]*keyedEntry
}

type keyedEntry struct {
	ch   chan struct{} // holds one token while the key is locked
	refs int
}

func (l *keyedLock) lock(ctx context.Context, key string) (unlock func(), err error) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*keyedEntry{}
	}
	e := l.m[key]
	if e == nil {
		e = &keyedEntry{ch: make(chan struct{}, 1)}
		l.m[key] = e
	}
	e.refs++
	l.mu.Unlock()

	release := func() {
		l.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(l.m, key)
		}
		l.mu.Unlock()
	}
	select {
	case e.ch <- struct{}{}:
		return func() { <-e.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}

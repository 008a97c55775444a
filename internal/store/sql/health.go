package sqlstore

import (
	"context"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// Connection health (docs/connection-health.md): when connections were last used, which are
// due for a refresh, and how many there are in each state.

var (
	// The version is left alone: a use is not a change UpdateConnection must see.
	qTouchConnection = sqlText(`UPDATE connections SET last_used_at = ?
WHERE project = ? AND id = ? AND (last_used_at IS NULL OR last_used_at < ?)`)
	qDueConnections = sqlText(`SELECT ` + connectionCols + `, version FROM connections
WHERE expiry IS NOT NULL AND expiry <= ? AND status IN ('active', 'expiring')
AND (refresh_token IS NULL OR last_used_at >= ?)
AND (expiry > ? OR (expiry = ? AND id > ?))
ORDER BY expiry, id LIMIT ?`)
	qCountConnections = sqlText(`SELECT connector, status, COUNT(*) FROM connections GROUP BY connector, status`)
)

func (s *Store) TouchConnections(ctx context.Context, uses []store.ConnectionUse) (err error) {
	defer s.observe(ctx, "TouchConnections", time.Now(), &err)
	if len(uses) == 0 {
		return nil
	}
	return s.tx(ctx, func(x q) error {
		for _, u := range uses {
			at := ns(u.At)
			if _, err := x.exec(ctx, qTouchConnection, at, u.Project, u.ID, at); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *Store) DueConnections(ctx context.Context, dq store.DueQuery) (_ []store.Connection, err error) {
	defer s.observe(ctx, "DueConnections", time.Now(), &err)
	after := int64(-1 << 63)
	if !dq.AfterExpiry.IsZero() {
		after = ns(dq.AfterExpiry)
	}
	return all(ctx, s.reader(), func(c *store.Connection) func(scanner) error {
		var version int64
		return scanConnection(c, &version)
	}, qDueConnections, ns(dq.Before), ns(dq.UsedSince), after, after, dq.AfterID, dq.Limit)
}

func (s *Store) CountConnections(ctx context.Context) (_ []store.ConnectionCount, err error) {
	defer s.observe(ctx, "CountConnections", time.Now(), &err)
	return all(ctx, s.reader(), func(c *store.ConnectionCount) func(scanner) error {
		return func(r scanner) error {
			var status string
			err := r.Scan(&c.Connector, &status, &c.Count)
			c.Status = store.ConnectionStatus(status)
			return err
		}
	}, qCountConnections)
}

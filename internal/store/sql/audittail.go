package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// The primary key orders the scan; the time bound only filters, and is used by a tail's first
// read alone.
var qAuditAfter = sqlText(`SELECT id, project, time, actor, action, target, details FROM audit
WHERE id > ? AND time >= ? ORDER BY id LIMIT ?`)

// ListAuditAfter returns records of every project after afterID, oldest first; limit <= 0
// means 100.
func (s *Store) ListAuditAfter(ctx context.Context, afterID int64, since time.Time, limit int) (_ []store.AuditRecord, err error) {
	defer s.observe("ListAuditAfter", time.Now(), &err)
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.reader().query(ctx, qAuditAfter, afterID, ns(since), int64(limit))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.AuditRecord
	for rows.Next() {
		var r store.AuditRecord
		var t int64
		var details string
		if err := rows.Scan(&r.ID, &r.Project, &t, &r.Actor, &r.Action, &r.Target, &details); err != nil {
			return nil, err
		}
		r.Time = fromNS(t)
		if details != "{}" {
			if err := json.Unmarshal([]byte(details), &r.Details); err != nil {
				return nil, fmt.Errorf("sqlstore: audit %d details: %w", r.ID, err)
			}
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

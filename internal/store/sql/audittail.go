package sqlstore

import (
	"context"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// The primary key orders the scan; the time bound only filters, and is used by a tail's first
// read alone.
var qAuditAfter = sqlText(`SELECT ` + auditCols + ` FROM audit
WHERE id > ? AND time >= ? ORDER BY id LIMIT ?`)

// ListAuditAfter returns records of every project after afterID, oldest first; limit <= 0
// means 100.
func (s *Store) ListAuditAfter(ctx context.Context, afterID int64, since time.Time, limit int) (_ []store.AuditRecord, err error) {
	defer s.observe(ctx, "ListAuditAfter", time.Now(), &err)
	if limit <= 0 {
		limit = 100
	}
	return s.listAudit(ctx, qAuditAfter, afterID, ns(since), int64(limit))
}

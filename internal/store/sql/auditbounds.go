package sqlstore

import (
	"context"
	"time"
)

// Both ends of the primary key: two index lookups whatever the table's size.
var qAuditBounds = sqlText(`SELECT COALESCE(MIN(id), 0), COALESCE(MAX(id), 0) FROM audit`)

// AuditBounds returns the smallest and largest audit record id, or 0, 0 for an empty log.
func (s *Store) AuditBounds(ctx context.Context) (first, last int64, err error) {
	defer s.observe(ctx, "AuditBounds", time.Now(), &err)
	err = s.reader().row(ctx, func(r scanner) error { return r.Scan(&first, &last) }, qAuditBounds)
	return first, last, err
}

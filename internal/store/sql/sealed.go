package sqlstore

import (
	"context"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

var (
	// Walks the primary key, so a page costs its own rows whatever the table's size.
	qConnectionsSealedWithout = sqlText(`SELECT ` + connectionCols + `, version FROM connections
WHERE id > ? AND key_id <> ? ORDER BY id LIMIT ?`)
	qSealedValueCounts = sqlText(`SELECT key_id, count(*) FROM connections GROUP BY key_id
UNION ALL SELECT key_id, count(*) FROM links WHERE sealed_code IS NOT NULL GROUP BY key_id
UNION ALL SELECT key_id, count(*) FROM callback_states WHERE verifier IS NOT NULL GROUP BY key_id`)
)

func (s *Store) ConnectionsSealedWithout(ctx context.Context, keyID, afterID string, limit int) (_ []store.Connection, err error) {
	defer s.observe(ctx, "ConnectionsSealedWithout", time.Now(), &err)
	return all(ctx, s.reader(), func(c *store.Connection) func(scanner) error {
		var version int64
		return scanConnection(c, &version)
	}, qConnectionsSealedWithout, afterID, keyID, limit)
}

func (s *Store) SealedValueCounts(ctx context.Context) (_ map[string]int64, err error) {
	defer s.observe(ctx, "SealedValueCounts", time.Now(), &err)
	out := map[string]int64{}
	err = s.reader().each(ctx, func(r scanner) error {
		var id string
		var n int64
		if err := r.Scan(&id, &n); err != nil {
			return err
		}
		out[id] += n
		return nil
	}, qSealedValueCounts)
	return out, err
}

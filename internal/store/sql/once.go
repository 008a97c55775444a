package sqlstore

import (
	"context"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// One statement decides: the insert wins, or it takes over a record that has expired, or it
// changes nothing, which is a replay. Concurrent uses of one key on any replica leave exactly
// one winner (the primary key serialises them).
var qUseOnce = sqlText(`INSERT INTO used_once (key, expires_at) VALUES (?, ?)
ON CONFLICT (key) DO UPDATE SET expires_at = excluded.expires_at WHERE used_once.expires_at <= ?`)

// UseOnce records key. A replay is the client's mistake, answered correctly: it is observed as
// a success, not as a store error.
func (s *Store) UseOnce(ctx context.Context, key []byte, expiresAt, now time.Time) error {
	var observed error
	defer s.observe(ctx, "UseOnce", time.Now(), &observed)
	n, err := s.wexecQuiet(ctx, qUseOnce, key, ns(expiresAt), ns(now))
	if observed = err; err != nil {
		return err
	}
	if n == 0 {
		return store.ErrConflict
	}
	return nil
}

package sqlstore

import (
	"context"
	"time"

	"latchkey.dev/latchkey/internal/ratelimit"
)

var (
	// A missing bucket is created full, so the locking read below always finds a row to lock:
	// two replicas meeting a new key then queue on that row instead of both starting afresh.
	qRateSeed = sqlText(`INSERT INTO rate_buckets (key, tokens, last, expires_at) VALUES (?, ?, ?, ?)
ON CONFLICT (key) DO NOTHING`)
	qRateLock = sqlText(`SELECT tokens, last FROM rate_buckets WHERE key = ?` + forUpdate)
	qRateSet  = sqlText(`UPDATE rate_buckets SET tokens = ?, last = ?, expires_at = ? WHERE key = ?`)
)

// RateBuckets is where the HTTP server keeps its rate limits: this store on PostgreSQL, which
// several replicas share, so a limit holds however requests are spread over them; nil (each
// process's memory) on SQLite, which runs one replica.
func (s *Store) RateBuckets() ratelimit.Shared {
	if s.postgres() {
		return s
	}
	return nil
}

// UpdateRateBucket keeps the rate limits every replica shares (ratelimit.Shared): fn runs on
// the stored bucket, locked for the transaction, and what it returns is stored. Sign-in,
// registration and pushed authorization requests ask it once or twice per attempt; it is not
// on the token endpoint's path.
func (s *Store) UpdateRateBucket(ctx context.Context, key []byte, full float64, now time.Time,
	fn func(tokens float64, last time.Time) (float64, time.Time, time.Time)) (err error) {
	defer s.observe(ctx, "UpdateRateBucket", time.Now(), &err)
	return s.txQuiet(ctx, func(x q) error {
		if _, err := x.exec(ctx, qRateSeed, key, full, ns(now), ns(now)); err != nil {
			return err
		}
		var tokens float64
		var last int64
		if err := x.row(ctx, func(r scanner) error { return r.Scan(&tokens, &last) }, qRateLock, key); err != nil {
			return err
		}
		t, l, expires := fn(tokens, fromNS(last))
		_, err := x.exec(ctx, qRateSet, t, ns(l), ns(expires), key)
		return err
	})
}

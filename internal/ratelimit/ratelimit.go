// Package ratelimit is keyed token buckets kept in this process's memory, for limits that slow
// attempts down rather than lock anyone out: when a bucket is empty the caller learns how long
// until the next attempt is allowed, and tells the client (Retry-After).
//
// With several replicas a Limiter shared through the store (Share) keeps its buckets there, so
// every replica spends from the same bucket and the limit holds however the requests are spread.
// Unshared (one replica, SQLite), or when the store cannot be asked, each process limits on its
// own.
package ratelimit

import (
	"context"
	"crypto/sha256"
	"sync"
	"time"
)

// Shared keeps buckets where every replica sees them (the store, on PostgreSQL).
type Shared interface {
	// UpdateRateBucket runs fn on the bucket stored under key — or on a full one (full tokens
	// at now) when none is stored — and stores what fn returns, as one step with respect to
	// every other caller on every replica. expires is when the stored bucket is full again and
	// may be forgotten. fn may run more than once; the last run's result is the one stored.
	UpdateRateBucket(ctx context.Context, key []byte, full float64, now time.Time,
		fn func(tokens float64, last time.Time) (newTokens float64, newLast, expires time.Time)) error
}

// Limiter is a set of token buckets by key, each holding up to Burst tokens and gaining one
// every Every. Safe for concurrent use.
type Limiter struct {
	mu      sync.Mutex
	buckets map[string]*bucket
	every   time.Duration
	burst   float64

	// shared, when set, keeps the buckets; name keeps this limiter's keys apart from others'.
	shared Shared
	name   string
}

type bucket struct {
	tokens float64
	last   time.Time
}

// maxBuckets bounds memory: beyond it, full buckets (which hold nothing a new one would not)
// are forgotten.
const maxBuckets = 100_000

// New returns a Limiter of burst tokens per key, one more every every.
func New(burst int, every time.Duration) *Limiter {
	return &Limiter{buckets: map[string]*bucket{}, every: every, burst: float64(burst)}
}

func (l *Limiter) fill(b *bucket, now time.Time) {
	// A clock behind the bucket's (another replica's) neither refills nor moves it back.
	if el := now.Sub(b.last); el > 0 {
		b.tokens = min(l.burst, b.tokens+float64(el)/float64(l.every))
		b.last = now
	}
}

// Share keeps the limiter's buckets in s (nil: in this process), under keys of its own name.
// It returns l.
func (l *Limiter) Share(s Shared, name string) *Limiter {
	l.shared, l.name = s, name
	return l
}

// sharedKey is what a key is stored as: a hash, because keys hold client addresses and the
// names people type.
func (l *Limiter) sharedKey(key string) []byte {
	sum := sha256.Sum256([]byte(l.name + "\x00" + key))
	return sum[:]
}

// update runs fn on the shared bucket of key; false when the store could not be asked.
func (l *Limiter) update(ctx context.Context, key string, now time.Time, fn func(*bucket)) bool {
	if l.shared == nil {
		return false
	}
	err := l.shared.UpdateRateBucket(ctx, l.sharedKey(key), l.burst, now, func(tokens float64, last time.Time) (float64, time.Time, time.Time) {
		b := bucket{tokens: tokens, last: last}
		fn(&b)
		return b.tokens, b.last, b.last.Add(time.Duration((l.burst - b.tokens) * float64(l.every)))
	})
	// A store that cannot be asked leaves the decision to this process's own bucket: the
	// limit then holds per replica, as it would unshared.
	return err == nil
}

// Take spends a token for key. When none is left it spends nothing and returns false with how
// long until one is.
func (l *Limiter) Take(ctx context.Context, key string, now time.Time) (ok bool, retryAfter time.Duration) {
	if l.update(ctx, key, now, func(b *bucket) { ok, retryAfter = l.take(b, now) }) {
		return ok, retryAfter
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= maxBuckets {
			l.sweep(now)
		}
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[key] = b
	}
	return l.take(b, now)
}

// take is one attempt on b.
func (l *Limiter) take(b *bucket, now time.Time) (bool, time.Duration) {
	l.fill(b, now)
	if b.tokens < 1 {
		return false, time.Duration((1 - b.tokens) * float64(l.every))
	}
	b.tokens--
	return true, 0
}

// Refund gives back a token spent on an attempt that turned out to be legitimate (a correct
// password), so people who get it right never use up their limit.
func (l *Limiter) Refund(ctx context.Context, key string, now time.Time) {
	refund := func(b *bucket) {
		l.fill(b, now)
		b.tokens = min(l.burst, b.tokens+1)
	}
	if l.update(ctx, key, now, refund) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.buckets[key]; b != nil {
		refund(b)
	}
}

func (l *Limiter) sweep(now time.Time) {
	for k, b := range l.buckets {
		l.fill(b, now)
		if b.tokens >= l.burst {
			delete(l.buckets, k)
		}
	}
}

// Seconds is retryAfter as a Retry-After value: whole seconds, at least 1.
func Seconds(retryAfter time.Duration) int {
	s := int((retryAfter + time.Second - 1) / time.Second)
	return max(s, 1)
}

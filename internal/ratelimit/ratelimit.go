// Package ratelimit is keyed token buckets kept in this process's memory, for limits that slow
// attempts down rather than lock anyone out: when a bucket is empty the caller learns how long
// until the next attempt is allowed, and tells the client (Retry-After).
//
// With several replicas each one limits on its own, so the effective limit is the per-replica
// limit times the number of replicas.
package ratelimit

import (
	"sync"
	"time"
)

// Limiter is a set of token buckets by key, each holding up to Burst tokens and gaining one
// every Every. Safe for concurrent use.
type Limiter struct {
	mu      sync.Mutex
	buckets map[string]*bucket
	every   time.Duration
	burst   float64
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
	if el := now.Sub(b.last); el > 0 {
		b.tokens = min(l.burst, b.tokens+float64(el)/float64(l.every))
	}
	b.last = now
}

// Take spends a token for key. When none is left it spends nothing and returns false with how
// long until one is.
func (l *Limiter) Take(key string, now time.Time) (ok bool, retryAfter time.Duration) {
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
	l.fill(b, now)
	if b.tokens < 1 {
		return false, time.Duration((1 - b.tokens) * float64(l.every))
	}
	b.tokens--
	return true, 0
}

// Refund gives back a token spent on an attempt that turned out to be legitimate (a correct
// password), so people who get it right never use up their limit.
func (l *Limiter) Refund(key string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.buckets[key]; b != nil {
		l.fill(b, now)
		b.tokens = min(l.burst, b.tokens+1)
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

package signin

import (
	"sync"
	"time"
)

// limiter is a set of token buckets kept in this process's memory. With several replicas each
// one limits on its own, so the effective limit is the per-replica limit times the number of
// replicas; that is still far below what guessing passwords needs.
type limiter struct {
	mu      sync.Mutex
	buckets map[string]*bucket
	every   time.Duration // one token back per every
	burst   float64
}

type bucket struct {
	tokens float64
	last   time.Time
}

const maxBuckets = 100_000

func newLimiter(burst int, every time.Duration) *limiter {
	return &limiter{buckets: map[string]*bucket{}, every: every, burst: float64(burst)}
}

func (l *limiter) fill(b *bucket, now time.Time) {
	if el := now.Sub(b.last); el > 0 {
		b.tokens = min(l.burst, b.tokens+float64(el)/float64(l.every))
	}
	b.last = now
}

// take spends a token for key, reporting false when none is left.
func (l *limiter) take(key string, now time.Time) bool {
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
		return false
	}
	b.tokens--
	return true
}

// refund gives back a token spent on an attempt that succeeded, so people who sign in
// correctly never use up their limit.
func (l *limiter) refund(key string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.buckets[key]; b != nil {
		l.fill(b, now)
		b.tokens = min(l.burst, b.tokens+1)
	}
}

// sweep forgets full buckets; they hold nothing a new bucket would not.
func (l *limiter) sweep(now time.Time) {
	for k, b := range l.buckets {
		l.fill(b, now)
		if b.tokens >= l.burst {
			delete(l.buckets, k)
		}
	}
}

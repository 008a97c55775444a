// Package testclock is the injected clock tests move instead of sleeping: lifetimes (codes,
// links, sessions, callback states, refresh grace) are checked by advancing it.
package testclock

import (
	"sync"
	"time"
)

// Clock is safe for concurrent use; its zero value reads the zero time.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a clock standing at t.
func New(t time.Time) *Clock { return &Clock{t: t} }

// Now is the clock's time; pass it where code takes a func() time.Time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

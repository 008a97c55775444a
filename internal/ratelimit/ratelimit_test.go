package ratelimit

import (
	"strconv"
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	l := New(3, time.Minute)
	now := time.Unix(0, 0)
	for i := range 3 {
		if ok, _ := l.Take(t.Context(), "k", now); !ok {
			t.Fatalf("attempt %d refused", i)
		}
	}
	if ok, wait := l.Take(t.Context(), "k", now); ok || wait != time.Minute {
		t.Fatalf("fourth attempt: %v, wait %v", ok, wait)
	}
	if ok, _ := l.Take(t.Context(), "other", now); !ok {
		t.Fatal("keys are separate")
	}
	if ok, wait := l.Take(t.Context(), "k", now.Add(45*time.Second)); ok || wait != 15*time.Second {
		t.Fatalf("refilled too early, or the wait is wrong: %v %v", ok, wait)
	}
	if ok, _ := l.Take(t.Context(), "k", now.Add(61*time.Second)); !ok {
		t.Fatal("not refilled")
	}
	l.Refund(t.Context(), "k", now.Add(61*time.Second))
	if ok, _ := l.Take(t.Context(), "k", now.Add(61*time.Second)); !ok {
		t.Fatal("refund lost")
	}
	l.sweep(now.Add(time.Hour))
	if len(l.buckets) != 0 {
		t.Errorf("full buckets kept: %d", len(l.buckets))
	}
	if Seconds(0) != 1 || Seconds(1500*time.Millisecond) != 2 || Seconds(15*time.Second) != 15 {
		t.Error("Seconds rounds up to whole seconds, at least one")
	}
}

// Keys are chosen by whoever makes the requests, so the buckets are bounded: past maxBuckets the
// full ones are forgotten (a fresh bucket would be the same), while one still being drained keeps
// its count however many new keys arrive.
func TestLimiterForgetsOnlyFullBuckets(t *testing.T) {
	l := New(2, time.Minute)
	now := time.Unix(0, 0)
	for i := range maxBuckets - 1 {
		l.Take(t.Context(), strconv.Itoa(i), now)
	}
	later := now.Add(2 * time.Minute)
	l.Take(t.Context(), "victim", later.Add(-30*time.Second))
	l.Take(t.Context(), "victim", later.Add(-30*time.Second))
	l.Take(t.Context(), "new", later)
	if n := len(l.buckets); n != 2 {
		t.Errorf("%d buckets after the sweep, want 2 (the drained one and the new one)", n)
	}
	if ok, _ := l.Take(t.Context(), "victim", later); ok {
		t.Error("the drained bucket was forgotten by the sweep")
	}
}

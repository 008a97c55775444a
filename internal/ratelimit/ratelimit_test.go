package ratelimit

import (
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	l := New(3, time.Minute)
	now := time.Unix(0, 0)
	for i := range 3 {
		if ok, _ := l.Take("k", now); !ok {
			t.Fatalf("attempt %d refused", i)
		}
	}
	if ok, wait := l.Take("k", now); ok || wait != time.Minute {
		t.Fatalf("fourth attempt: %v, wait %v", ok, wait)
	}
	if ok, _ := l.Take("other", now); !ok {
		t.Fatal("keys are separate")
	}
	if ok, wait := l.Take("k", now.Add(45*time.Second)); ok || wait != 15*time.Second {
		t.Fatalf("refilled too early, or the wait is wrong: %v %v", ok, wait)
	}
	if ok, _ := l.Take("k", now.Add(61*time.Second)); !ok {
		t.Fatal("not refilled")
	}
	l.Refund("k", now.Add(61*time.Second))
	if ok, _ := l.Take("k", now.Add(61*time.Second)); !ok {
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

package secret

import (
	"fmt"
	"regexp"
	"testing"
	"time"
)

func TestNewIDIs128RandomBitsInHex(t *testing.T) {
	hex128 := regexp.MustCompile(`^[0-9a-f]{32}$`)
	seen := map[string]bool{}
	for range 1000 {
		id := NewID()
		if !hex128.MatchString(id) {
			t.Fatalf("NewID() = %q, want 32 lowercase hex digits", id)
		}
		if seen[id] {
			t.Fatalf("NewID() repeated %q", id)
		}
		seen[id] = true
	}
}

// Ordered IDs have NewID's form, sort by the time they were made, and are distinct within one
// millisecond (their last 80 bits are random).
func TestNewOrderedIDSortsByTime(t *testing.T) {
	hex128 := regexp.MustCompile(`^[0-9a-f]{32}$`)
	base := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	seen := map[string]bool{}
	prev := ""
	for i := range 1000 {
		now := base.Add(time.Duration(i/10) * time.Millisecond) // ten IDs a millisecond
		id := NewOrderedID(now)
		if !hex128.MatchString(id) {
			t.Fatalf("NewOrderedID() = %q, want 32 lowercase hex digits", id)
		}
		if seen[id] {
			t.Fatalf("NewOrderedID() repeated %q", id)
		}
		seen[id] = true
		if want := fmt.Sprintf("%012x", now.UnixMilli()); id[:12] != want {
			t.Fatalf("NewOrderedID(%v) = %q, want the time %s first", now, id, want)
		}
		if i%10 == 0 && id <= prev {
			t.Fatalf("%q, made a millisecond after %q, sorts before it", id, prev)
		}
		prev = id
	}
}

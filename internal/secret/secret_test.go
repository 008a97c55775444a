package secret

import (
	"regexp"
	"testing"
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

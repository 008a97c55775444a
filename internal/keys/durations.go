package keys

import (
	"time"

	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/upstream"
)

// Durations the chart's keys values set; docs/operations.md explains each.
const (
	DefaultSigningAnnounce    = 24 * time.Hour
	DefaultSigningRetire      = 24 * time.Hour
	DefaultSigningRotateEvery = 90 * 24 * time.Hour
	// DefaultSealingAnnounce is how long a new sealing key is held by every replica before any
	// seals with it: well beyond the Loader's poll, so all have it first.
	DefaultSealingAnnounce = 2 * time.Minute
)

// ResealStore is the part of the store the re-seal uses.
type ResealStore interface {
	store.Sealed
	upstream.ConnectionStore
}

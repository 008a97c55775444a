package keys

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"latchkey.dev/latchkey/internal/config"
)

// Signing is what the compiler needs to give a Project the operator's signing keys: the loaded
// set and the retire period. Every replica loads the same Secret, so every replica derives the
// same keys with the same schedule.
type Signing struct {
	// Retire is how long a key stays published after the next key took over signing. A
	// Project's keys stay at least as long as its access tokens (and ID tokens) live.
	Retire time.Duration

	set   atomic.Pointer[Set]
	mu    sync.Mutex
	cache map[derivation]config.SigningKey
}

type derivation struct{ seed, project string }

// Store publishes a newly loaded set, and forgets the keys derived from seeds it no longer
// holds.
func (s *Signing) Store(set *Set) {
	s.set.Store(set)
	s.mu.Lock()
	defer s.mu.Unlock()
	for d := range s.cache {
		if !slices.ContainsFunc(set.Signing, func(k SigningKey) bool { return string(k.Seed) == d.seed }) {
			delete(s.cache, d)
		}
	}
}

// Loaded reports whether a set has been loaded.
func (s *Signing) Loaded() bool { return s.set.Load() != nil }

// ProjectKeys returns the Project's signing keys newest first, with their bounds; ok is false
// while no set is loaded. tokenLifetime is the Project's longest JWT lifetime.
func (s *Signing) ProjectKeys(project string, tokenLifetime time.Duration) (_ []config.SigningKey, ok bool, _ error) {
	set := s.set.Load()
	if set == nil {
		return nil, false, nil
	}
	retire := max(s.Retire, tokenLifetime)
	scheds := set.Schedules(retire)
	out := make([]config.SigningKey, 0, len(scheds))
	for _, k := range slices.Backward(scheds) {
		priv, err := s.derive(k.Seed, project)
		if err != nil {
			return nil, false, err
		}
		out = append(out, config.SigningKey{
			ID: k.ID, Algorithm: "ES256", Private: priv,
			SignsFrom: k.ActiveAt, SignsUntil: k.RetiredAt, PublishedUntil: k.Until,
		})
	}
	return out, true, nil
}

// derive memoises ProjectKey: deriving costs a scalar multiplication, and every compilation
// asks again for every Project.
func (s *Signing) derive(seed []byte, project string) (any, error) {
	d := derivation{string(seed), project}
	s.mu.Lock()
	defer s.mu.Unlock()
	if k, ok := s.cache[d]; ok {
		return k.Private, nil
	}
	k, err := ProjectKey(seed, project)
	if err != nil {
		return nil, err
	}
	if s.cache == nil {
		s.cache = map[derivation]config.SigningKey{}
	}
	s.cache[d] = config.SigningKey{Private: k}
	return k, nil
}

// Keys returns the loaded set, nil before the first load. Callers must not modify it.
func (s *Signing) Keys() *Set { return s.set.Load() }

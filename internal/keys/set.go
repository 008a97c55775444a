// Package keys holds the installation's keys as the operator keeps them in one Kubernetes
// Secret: the AES-256 keys that seal values at rest (upstream tokens, link codes, callback
// verifiers) and the seeds of the keys that sign each Project's JWTs, with the times that make
// every replica agree on which key signs and which are published.
//
// The Secret is created once and never replaced: losing a sealing key loses every value sealed
// with it. Keys are only ever added, and removed only when nothing needs them any more
// (docs/operations.md, "Keys: creation and rotation"; docs/decisions/0033-the-operator-keeps-the-keys.md).
package keys

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Entry names in the Secret. A sealing key is any other entry: its name is its id, the shape
// earlier chart versions and `kubectl create secret --from-literal=<id>=…` produce.
const (
	// StateEntry holds the State as JSON.
	StateEntry = "state.json"
	// SigningPrefix starts the entry of a signing seed; the rest of the name is its key id.
	SigningPrefix = "signing-"
)

// Annotations on the keys Secret.
const (
	// RotateSigningAnnotation: an admin sets it (to any new value, say the date) to ask the
	// leader for a new signing key now. The value acted on is recorded in the state, so each
	// value rotates once.
	RotateSigningAnnotation = "latchkey.dev/rotate-signing"
	// RotateSealingAnnotation does the same for the sealing key; stored values are then
	// re-sealed with the new key in the background.
	RotateSealingAnnotation = "latchkey.dev/rotate-sealing"
	// ResealAnnotation is the leader's report of the re-seal: "running: …" or "done: …".
	ResealAnnotation = "latchkey.dev/reseal"
)

// idPattern limits ids to what a Secret entry, a file name and a JWT kid can all hold.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// Set is the content of the keys Secret.
type Set struct {
	// Sealing keys by id, 32 bytes each.
	Sealing map[string][]byte
	// Signing keys, oldest first (by ActiveAt, then id).
	Signing []SigningKey
	State   State
}

// SigningKey is a signing seed and when it is published and used. Each Project's ES256 key is
// derived from the seed (ProjectKey), so tenants never share a private key while one schedule
// rotates them all.
type SigningKey struct {
	ID   string
	Seed []byte
	// PublishedAt: from then on the key is in every JWKS (announce).
	PublishedAt time.Time
	// ActiveAt: from then on the key signs, until the next key's ActiveAt (use). It is published
	// after that for the retire period (retire), then removed.
	ActiveAt time.Time
}

// State is what the Secret records besides key material.
type State struct {
	// SealingPrimary is the id of the key new values are sealed with. Empty: the lexically
	// greatest sealing id (the rule of Secrets written by hand).
	SealingPrimary string `json:"sealingPrimary,omitempty"`
	// SealingNext is a new sealing key every replica holds but none seals with before
	// SealingNextAt, so no replica meets a value sealed with a key it has not loaded yet.
	SealingNext   string    `json:"sealingNext,omitempty"`
	SealingNextAt time.Time `json:"sealingNextAt,omitzero"`
	// Signing holds the schedule of each signing key by id.
	Signing map[string]SigningTimes `json:"signing,omitempty"`
	// Handled records the rotate annotation values already acted on.
	Handled map[string]string `json:"handled,omitempty"`
	// Reseal is the background re-seal's progress, so a new leader resumes it.
	Reseal *Reseal `json:"reseal,omitempty"`
}

// SigningTimes is one signing key's schedule.
type SigningTimes struct {
	PublishedAt time.Time `json:"publishedAt"`
	ActiveAt    time.Time `json:"activeAt"`
}

// Reseal is the progress of re-sealing stored values with the primary sealing key.
type Reseal struct {
	// To is the key values are re-sealed with.
	To string `json:"to"`
	// After is the last connection done ("project\x00id"), where a new leader resumes.
	After string `json:"after,omitempty"`
	// Resealed and Unreadable count connections re-sealed and those no key present opens.
	Resealed   int64     `json:"resealed"`
	Unreadable int64     `json:"unreadable,omitempty"`
	StartedAt  time.Time `json:"startedAt"`
	// DoneAt is set when every connection is sealed with To; until then it is zero.
	DoneAt time.Time `json:"doneAt,omitzero"`
}

// Parse reads the keys Secret's data. A Secret written by hand or by an earlier chart (sealing
// keys only, no state) parses too.
func Parse(data map[string][]byte) (*Set, error) {
	s := &Set{Sealing: map[string][]byte{}}
	if b, ok := data[StateEntry]; ok {
		if err := json.Unmarshal(b, &s.State); err != nil {
			return nil, fmt.Errorf("%s: %w", StateEntry, err)
		}
	}
	for name, b := range data {
		if name == StateEntry {
			continue
		}
		if id, ok := strings.CutPrefix(name, SigningPrefix); ok {
			if !idPattern.MatchString(id) || len(b) != 32 {
				return nil, fmt.Errorf("signing key %q: want 32 bytes and an id of letters, digits, '.', '_' or '-'", name)
			}
			t := s.State.Signing[id] // zero times: published and active since ever
			s.Signing = append(s.Signing, SigningKey{ID: id, Seed: b, PublishedAt: t.PublishedAt, ActiveAt: t.ActiveAt})
			continue
		}
		if !idPattern.MatchString(name) {
			return nil, fmt.Errorf("sealing key %q: id must be letters, digits, '.', '_' or '-'", name)
		}
		key, err := ParseSealingKey(b)
		if err != nil {
			// The entry's name only: its value is key material.
			return nil, fmt.Errorf("sealing key %q: %w", name, err)
		}
		s.Sealing[name] = key
	}
	for _, p := range []string{s.State.SealingPrimary, s.State.SealingNext} {
		if _, ok := s.Sealing[p]; p != "" && !ok {
			return nil, fmt.Errorf("%s names sealing key %q, which the Secret does not hold", StateEntry, p)
		}
	}
	s.sortSigning()
	return s, nil
}

func (s *Set) sortSigning() {
	slices.SortFunc(s.Signing, func(a, b SigningKey) int {
		if c := a.ActiveAt.Compare(b.ActiveAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// Data encodes the set as the Secret's data.
func (s *Set) Data() (map[string][]byte, error) {
	out := make(map[string][]byte, len(s.Sealing)+len(s.Signing)+1)
	for id, k := range s.Sealing {
		out[id] = k
	}
	st := s.State
	st.Signing = map[string]SigningTimes{}
	for _, k := range s.Signing {
		out[SigningPrefix+k.ID] = k.Seed
		st.Signing[k.ID] = SigningTimes{PublishedAt: k.PublishedAt, ActiveAt: k.ActiveAt}
	}
	b, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	out[StateEntry] = b
	return out, nil
}

// PrimarySealing is the id of the key new values are sealed with at now.
func (s *Set) PrimarySealing(now time.Time) string {
	if s.State.SealingNext != "" && !now.Before(s.State.SealingNextAt) {
		return s.State.SealingNext
	}
	if s.State.SealingPrimary != "" {
		return s.State.SealingPrimary
	}
	ids := make([]string, 0, len(s.Sealing))
	for id := range s.Sealing {
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return ""
	}
	slices.Sort(ids)
	return ids[len(ids)-1]
}

// NewID names a key made at now: UTC to the second, so ids sort by age and a key made by
// hand ("2026-11") sorts before it.
func NewID(now time.Time) string { return now.UTC().Format("20060102-150405") }

// New is a fresh set: one sealing key and one signing key that signs at once (nothing signed
// before it, so there is nothing to announce it to).
func New(now time.Time) *Set {
	id := NewID(now)
	s := &Set{Sealing: map[string][]byte{id: random32()}, State: State{SealingPrimary: id}}
	s.Signing = []SigningKey{{ID: id, Seed: random32(), PublishedAt: now, ActiveAt: now}}
	return s
}

// AddSealing adds a new sealing key that seals from now+announce, once every replica has
// loaded it. Promote then makes it the primary and starts the re-seal.
func (s *Set) AddSealing(now time.Time, announce time.Duration) string {
	id := uniqueID(NewID(now), func(id string) bool { _, ok := s.Sealing[id]; return ok })
	s.Sealing[id] = random32()
	s.State.SealingNext, s.State.SealingNextAt = id, now.Add(announce)
	return id
}

// Promote records a next sealing key whose time has come as the primary and starts re-sealing
// stored values with it. It reports whether it changed the set.
func (s *Set) Promote(now time.Time) bool {
	next := s.State.SealingNext
	if next == "" || now.Before(s.State.SealingNextAt) {
		return false
	}
	s.State.SealingPrimary, s.State.SealingNext, s.State.SealingNextAt = next, "", time.Time{}
	s.State.Reseal = &Reseal{To: next, StartedAt: now}
	return true
}

// AddSigning announces a new signing key at now; it signs from now+announce.
func (s *Set) AddSigning(now time.Time, announce time.Duration) string {
	id := uniqueID(NewID(now), func(id string) bool {
		return slices.ContainsFunc(s.Signing, func(k SigningKey) bool { return k.ID == id })
	})
	s.Signing = append(s.Signing, SigningKey{ID: id, Seed: random32(), PublishedAt: now, ActiveAt: now.Add(announce)})
	s.sortSigning()
	return id
}

func uniqueID(id string, taken func(string) bool) string {
	for n := 2; taken(id); n++ {
		id = fmt.Sprintf("%s.%d", strings.SplitN(id, ".", 2)[0], n)
	}
	return id
}

// Schedule is a signing key's place in the rotation at some moment.
type Schedule struct {
	SigningKey
	// RetiredAt is when the next key took over signing; zero while none has.
	RetiredAt time.Time
	// Until is when it leaves the JWKS (RetiredAt + retire); zero while it has not retired.
	Until time.Time
}

// Signs reports whether the key signs at now.
func (k Schedule) Signs(now time.Time) bool {
	return !now.Before(k.ActiveAt) && (k.RetiredAt.IsZero() || now.Before(k.RetiredAt))
}

// Published reports whether the key is in the JWKS at now.
func (k Schedule) Published(now time.Time) bool {
	return !now.Before(k.PublishedAt) && (k.Until.IsZero() || now.Before(k.Until))
}

// Schedules places each signing key, oldest first, given the retire period: a key retires
// when the next key becomes active, and stays published for retire after that.
func (s *Set) Schedules(retire time.Duration) []Schedule {
	out := make([]Schedule, len(s.Signing))
	for i, k := range s.Signing {
		out[i].SigningKey = k
		if i+1 < len(s.Signing) {
			out[i].RetiredAt = s.Signing[i+1].ActiveAt
			out[i].Until = out[i].RetiredAt.Add(retire)
		}
	}
	return out
}

// Prune removes the signing keys that have left every JWKS at now and reports whether it
// removed any. The newest key is never removed.
func (s *Set) Prune(now time.Time, retire time.Duration) bool {
	var kept []SigningKey
	for _, k := range s.Schedules(retire) {
		if !k.Until.IsZero() && !now.Before(k.Until) {
			continue
		}
		kept = append(kept, k.SigningKey)
	}
	removed := len(kept) != len(s.Signing)
	s.Signing = kept
	return removed
}

// ProjectKey derives a Project's ES256 private key from a signing seed: HKDF-SHA256 over the
// seed with the Project's key ("namespace/name") as info, retried with a counter in the rare
// case the output is not a valid P-256 scalar. Deterministic, so every replica derives the same
// key without storing one per Project.
func ProjectKey(seed []byte, project string) (*ecdsa.PrivateKey, error) {
	for n := range 16 {
		b, err := hkdf.Key(sha256.New, seed, []byte("latchkey.dev/signing-key/v1"),
			fmt.Sprintf("%s\x00%d", project, n), 32)
		if err != nil {
			return nil, err
		}
		if k, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), b); err == nil {
			return k, nil
		}
	}
	return nil, errors.New("keys: cannot derive a P-256 key") // probability about 2^-512
}

// ParseSealingKey accepts 32 raw bytes (what `head -c32 /dev/urandom` or earlier charts'
// randBytes put in a Secret) or text holding 32 bytes as base64 (standard or URL, padded or
// not) or hex.
func ParseSealingKey(b []byte) ([]byte, error) {
	if len(b) == 32 {
		return b, nil
	}
	s := strings.TrimSpace(string(b))
	if k, ok := decode32(s); ok {
		return k, nil
	}
	return nil, errors.New("not an AES-256 key: want 32 raw bytes, or 32 bytes as base64 or hex")
}

func random32() []byte {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return b
}

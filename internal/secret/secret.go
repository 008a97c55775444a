// Package secret holds the few primitives every flow uses for secrets: random values, the hash
// under which they are stored, constant-time comparison, and AEAD sealing with rotating keys.
//
// Random secrets (tokens, codes, cookies, client secrets) carry 256 bits of entropy, so a single
// SHA-256 is the right storage hash: a slow password hash adds nothing an attacker could not
// already not do, and costs every token request milliseconds (the reason some peers serve
// ~150 token requests a second).
package secret

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"time"
)

// Prefixes make leaked tokens recognisable to secret scanners.
const (
	PrefixAccessToken  = "lk_at_"
	PrefixRefreshToken = "lk_rt_"
	PrefixClientSecret = "lk_cs_"
	PrefixRegToken     = "lk_rat_"
	PrefixCode         = "lk_ac_"
)

// New returns prefix followed by 32 random bytes in unpadded base64url.
func New(prefix string) string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand never fails on supported platforms (Go 1.24+ panics inside Read itself).
		panic(err)
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// NewID returns a random identifier: 128 bits in lowercase hex. Identifiers (people, clients,
// token families, connections, links, events) name a record rather than grant anything, so
// they carry half a secret's entropy, still far beyond guessing or collision.
func NewID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // as in New
	}
	return hex.EncodeToString(b[:])
}

// NewOrderedID returns an identifier in NewID's form (32 lowercase hex digits) whose first 48
// bits are the time in milliseconds and the other 80 random. IDs made later sort later, so an
// index on one (token families) grows at its right edge: the rows a group commit stores share
// that edge's page instead of each dirtying a page of its own in the middle of the index. The
// time it reveals is the record's creation, which the record keeps anyway.
func NewOrderedID(now time.Time) string {
	var b [18]byte // the time's 8 bytes, of which the last 6 are kept, then 10 random
	binary.BigEndian.PutUint64(b[:8], uint64(max(now.UnixMilli(), 0)))
	if _, err := rand.Read(b[8:]); err != nil {
		panic(err) // as in New
	}
	return hex.EncodeToString(b[2:])
}

// Hash is the storage form of a random secret.
func Hash(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// Equal compares two secrets in constant time (for equal lengths).
func Equal(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// HashEqual compares a presented secret with a stored hash in constant time.
func HashEqual(presented string, stored []byte) bool {
	return len(stored) == sha256.Size && subtle.ConstantTimeCompare(Hash(presented), stored) == 1
}

// HasPrefix reports whether s looks like a secret of the given kind.
func HasPrefix(s, prefix string) bool { return strings.HasPrefix(s, prefix) }

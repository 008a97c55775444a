package signin

import (
	"crypto/subtle"
	"encoding/base64"
	"strconv"
	"strings"

	"golang.org/x/crypto/argon2"
	"golang.org/x/crypto/bcrypt"
)

// Bounds on argon2id parameters read from a password file, so one bad line cannot make every
// sign-in allocate gigabytes.
const (
	maxArgonMemoryKiB = 256 << 10
	maxArgonTime      = 16
	maxArgonThreads   = 16
	maxPasswordLen    = 1024
)

// verifyPassword checks a password against a bcrypt or argon2id PHC hash in constant time.
func verifyPassword(hash, password string) bool {
	if len(password) > maxPasswordLen {
		return false
	}
	switch {
	case strings.HasPrefix(hash, "$2a$"), strings.HasPrefix(hash, "$2b$"), strings.HasPrefix(hash, "$2y$"):
		return bcrypt.CompareHashAndPassword([]byte(hash), []byte(password)) == nil
	case strings.HasPrefix(hash, "$argon2id$"):
		return verifyArgon2id(hash, password)
	}
	return false
}

// verifyArgon2id: $argon2id$v=19$m=65536,t=3,p=4$<salt>$<hash>, base64 without padding.
func verifyArgon2id(phc, password string) bool {
	parts := strings.Split(phc, "$")
	if len(parts) != 6 || parts[2] != "v=19" {
		return false
	}
	var m, t, p uint64
	for kv := range strings.SplitSeq(parts[3], ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return false
		}
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return false
		}
		switch k {
		case "m":
			m = n
		case "t":
			t = n
		case "p":
			p = n
		default:
			return false
		}
	}
	if m == 0 || t == 0 || p == 0 || m > maxArgonMemoryKiB || t > maxArgonTime || p > maxArgonThreads {
		return false
	}
	salt, err1 := base64.RawStdEncoding.DecodeString(parts[4])
	want, err2 := base64.RawStdEncoding.DecodeString(parts[5])
	if err1 != nil || err2 != nil || len(want) < 16 || len(want) > 128 {
		return false
	}
	got := argon2.IDKey([]byte(password), salt, uint32(t), uint32(m), uint8(p), uint32(len(want))) //nolint:gosec // G115: every value is bounded by the checks above
	return subtle.ConstantTimeCompare(got, want) == 1
}

package keys

import (
	"encoding/base64"
	"encoding/hex"
)

// decode32 reads 32 bytes written as base64 (any of the four alphabets and paddings) or hex.
func decode32(s string) ([]byte, bool) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding,
		base64.URLEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(s); err == nil && len(k) == 32 {
			return k, true
		}
	}
	if k, err := hex.DecodeString(s); err == nil && len(k) == 32 {
		return k, true
	}
	return nil, false
}

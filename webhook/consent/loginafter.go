package consent

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"net/url"
	"strings"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/webhook/site"
)

// loginAfterParam carries, across the sign-in that prompt=login or max_age=0 asks for, the
// time from which a sign-in counts: sealed with the keyring every replica shares, over that
// time, the request's parameters and an expiry. The browser, or whoever hands it an address,
// can neither write an earlier time nor move the seal to another request, and a seal replayed
// after continuationLifetime counts for nothing: the person signs in again
// (docs/security.md, "Sign-in").
const loginAfterParam = "login_after"

func loginAfterPurpose(p *config.Project) string { return "consent.login_after:" + p.Key }

// sealLoginAfter seals now as the time from which a sign-in satisfies the request params.
func sealLoginAfter(env *site.Env, p *config.Project, params url.Values, now time.Time) string {
	sum := sha256.Sum256([]byte(params.Encode()))
	var b [48]byte
	copy(b[:32], sum[:])
	binary.BigEndian.PutUint64(b[32:40], uint64(now.Unix()))                         //nolint:gosec // G115: times after 1970
	binary.BigEndian.PutUint64(b[40:], uint64(now.Add(continuationLifetime).Unix())) //nolint:gosec // G115: as above
	kid, sealed := env.Keyring.Seal(loginAfterPurpose(p), b[:])
	return base64.RawURLEncoding.EncodeToString([]byte(kid)) + "." + base64.RawURLEncoding.EncodeToString(sealed)
}

// openLoginAfter returns the time seal holds, when it was made for params and has not expired;
// otherwise 0, which no sign-in satisfies.
func openLoginAfter(env *site.Env, p *config.Project, params url.Values, seal string, now time.Time) int64 {
	k, s, ok := strings.Cut(seal, ".")
	if !ok || len(seal) > 512 {
		return 0
	}
	kid, err1 := base64.RawURLEncoding.DecodeString(k)
	sealed, err2 := base64.RawURLEncoding.DecodeString(s)
	if err1 != nil || err2 != nil {
		return 0
	}
	b, err := env.Keyring.Open(loginAfterPurpose(p), string(kid), sealed)
	if err != nil || len(b) != 48 {
		return 0
	}
	sum := sha256.Sum256([]byte(params.Encode()))
	after := int64(binary.BigEndian.Uint64(b[32:40])) //nolint:gosec // G115: made by sealLoginAfter
	exp := int64(binary.BigEndian.Uint64(b[40:]))     //nolint:gosec // G115: as above
	if !bytes.Equal(b[:32], sum[:]) || now.Unix() >= exp || after <= 0 {
		return 0
	}
	return after
}

package oauth

import (
	"time"

	"latchkey.dev/latchkey/internal/config"
)

// Sign signs claims as a JWT with the project's signing key of the moment now and the typ header typ,
// for flows outside this package that issue JWTs of their own (webhook/idjag).
func Sign(p *config.Project, now time.Time, typ string, claims any) (string, error) {
	return sign(p, now, typ, claims)
}

// PublicKey returns the public half of a signing key, to verify what the project signed.
func PublicKey(k config.SigningKey) (any, bool) { return publicKey(k) }

package upstream

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"latchkey.dev/latchkey/internal/config"
)

// ClientAssertionType is RFC 7523's client_assertion_type for a JWT.
const ClientAssertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

// assertionLifetime bounds how long a client assertion is accepted. It is used once, at once;
// services refuse long-lived assertions (Microsoft wants at most ten minutes).
const assertionLifetime = 5 * time.Minute

type clockKey struct{}

// WithClock makes now the clock of calls to a service under ctx: the times of client
// assertions and the expiry check of ID tokens read it. Without it they use the wall clock.
func WithClock(ctx context.Context, now func() time.Time) context.Context {
	if now == nil {
		return ctx
	}
	return context.WithValue(ctx, clockKey{}, now)
}

// now is the time on the clock of r's context (WithClock), else the wall clock.
func now(r *http.Request) time.Time {
	if f, ok := r.Context().Value(clockKey{}).(func() time.Time); ok {
		return f()
	}
	return time.Now()
}

// clientAssertion is the private_key_jwt credential of RFC 7523 §2.2 and OpenID Connect Core
// §9: iss and sub are the client id, aud is the token endpoint (which RFC 7523 §3 allows and
// every service we know accepts), jti is fresh so a captured assertion cannot be replayed
// where the service remembers them, and exp is minutes away.
func clientAssertion(r *http.Request, c *config.Connector) (string, error) {
	a := c.Assertion
	opts := (&jose.SignerOptions{}).WithType("JWT")
	if a.KeyID != "" {
		opts = opts.WithHeader("kid", a.KeyID)
	}
	if a.X5TS256 != "" {
		opts = opts.WithHeader("x5t#S256", a.X5TS256)
	}
	if a.X5T != "" {
		opts = opts.WithHeader("x5t", a.X5T)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.SignatureAlgorithm(a.Algorithm), Key: a.Key}, opts)
	if err != nil {
		return "", fail(ErrService, "client assertion: the key cannot sign", nil)
	}
	at := now(r)
	jti := make([]byte, 18)
	_, _ = rand.Read(jti)
	claims := jwt.Claims{
		Issuer:    c.ClientID,
		Subject:   c.ClientID,
		Audience:  jwt.Audience{c.TokenURL},
		ID:        base64.RawURLEncoding.EncodeToString(jti),
		IssuedAt:  jwt.NewNumericDate(at),
		NotBefore: jwt.NewNumericDate(at),
		Expiry:    jwt.NewNumericDate(at.Add(assertionLifetime)),
	}
	out, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		return "", fail(ErrService, "client assertion: signing failed", nil)
	}
	return out, nil
}

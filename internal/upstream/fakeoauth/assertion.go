package fakeoauth

import (
	"crypto"
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// ClientAssertionType is RFC 7523's client_assertion_type for a JWT.
const ClientAssertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

// AssertionCheck is what a provider holds to check a private_key_jwt client assertion: the
// client's registered public key and, for a provider that finds certificate credentials by
// thumbprint (Microsoft), the certificate's SHA-256 thumbprint the header must carry.
type AssertionCheck struct {
	ClientID string
	Key      crypto.PublicKey
	// X5TS256, when set, must be the assertion's x5t#S256 header (base64url, no padding).
	X5TS256 string
	// MaxLifetime bounds exp - iat; Microsoft documents ten minutes.
	MaxLifetime time.Duration
}

// VerifyClientAssertion checks a client assertion as RFC 7523 §3 and Microsoft's certificate
// credentials page (https://learn.microsoft.com/entra/identity-platform/certificate-credentials)
// say: a signature by the registered key with an asymmetric algorithm, iss and sub the client
// id, aud the token endpoint, a jti not seen before (seen records it), nbf and exp around now,
// and a short lifetime. It returns what is wrong in the words an error_description would use.
func (c AssertionCheck) VerifyClientAssertion(raw, tokenEndpoint string, now time.Time, seen map[string]bool) error {
	tok, err := jwt.ParseSigned(raw, []jose.SignatureAlgorithm{jose.RS256, jose.PS256, jose.ES256})
	if err != nil {
		return fmt.Errorf("client_assertion is not a signed JWT: %w", err)
	}
	if len(tok.Headers) != 1 {
		return errors.New("client_assertion has more than one signature")
	}
	if c.X5TS256 != "" {
		if got, _ := tok.Headers[0].ExtraHeaders["x5t#S256"].(string); got != c.X5TS256 {
			return errors.New("AADSTS700027: the certificate thumbprint x5t#S256 names no credential of the app")
		}
	}
	var claims jwt.Claims
	if err := tok.Claims(c.Key, &claims); err != nil {
		return errors.New("AADSTS700027: the client assertion's signature does not verify")
	}
	if claims.Issuer != c.ClientID || claims.Subject != c.ClientID {
		return errors.New("client_assertion: iss and sub must be the client id")
	}
	if !slices.Contains([]string(claims.Audience), tokenEndpoint) {
		return errors.New("client_assertion: aud must be the token endpoint")
	}
	if claims.ID == "" || seen[claims.ID] {
		return errors.New("client_assertion: jti missing or already used")
	}
	if claims.Expiry == nil || claims.IssuedAt == nil {
		return errors.New("client_assertion: exp and iat are required")
	}
	if err := claims.ValidateWithLeeway(jwt.Expected{Time: now}, 0); err != nil {
		return fmt.Errorf("client_assertion: %w", err)
	}
	if c.MaxLifetime > 0 && claims.Expiry.Time().Sub(claims.IssuedAt.Time()) > c.MaxLifetime {
		return errors.New("client_assertion: lifetime too long")
	}
	seen[claims.ID] = true
	return nil
}

// clientAuthenticated checks the token request's client: its secret, or, where the server
// takes private_key_jwt (Options.ClientAssertion), a client assertion for the token endpoint at
// base, with no secret beside it.
func (s *Server) clientAuthenticated(req Request, base string) bool {
	p := req.Params
	if p.Get("client_id") != s.o.ClientID {
		return false
	}
	s.mu.Lock()
	check := s.o.ClientAssertion
	s.mu.Unlock()
	if check == nil {
		return subtle.ConstantTimeCompare([]byte(p.Get("client_secret")), []byte(s.o.ClientSecret)) == 1
	}
	if p.Get("client_secret") != "" || p.Get("client_assertion_type") != ClientAssertionType {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.jtis == nil {
		s.jtis = map[string]bool{}
	}
	return check.VerifyClientAssertion(p.Get("client_assertion"), base+s.p.Paths.Token, s.o.Now(), s.jtis) == nil
}

// RequireClientAssertion makes the token endpoint take private_key_jwt (as Options.ClientAssertion
// does) from now on, for a test whose harness made the server.
func (s *Server) RequireClientAssertion(c AssertionCheck) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.o.ClientAssertion = &c
}

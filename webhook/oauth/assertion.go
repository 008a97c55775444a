package oauth

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"latchkey.dev/latchkey/internal/config"
	keyset "latchkey.dev/latchkey/internal/jwks"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/site"
)

// AssertionType is the client_assertion_type of a JWT client assertion (RFC 7523 §2.2).
const AssertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

// Algorithms of client assertions: private_key_jwt accepts the asymmetric ones, which the
// metadata lists with HS256 (client_secret_jwt only) as token_endpoint_auth_signing_alg_values_supported.
var (
	privateKeyAlgs = []jose.SignatureAlgorithm{jose.ES256, jose.EdDSA, jose.PS256, jose.RS256}
	secretAlgs     = []jose.SignatureAlgorithm{jose.HS256}
)

// AssertionSigningAlgs lists what client assertions may be signed with, for metadata.
func AssertionSigningAlgs() []string {
	out := make([]string, 0, len(privateKeyAlgs)+len(secretAlgs))
	for _, a := range append(slices.Clone(privateKeyAlgs), secretAlgs...) {
		out = append(out, string(a))
	}
	return out
}

// Limits on an assertion's times: clock skew tolerated, and how far ahead exp may be (an
// assertion is made for one request; a long-lived one is a bearer credential).
const (
	assertionSkew   = 30 * time.Second
	assertionMaxTTL = 10 * time.Minute
)

func assertionError(desc string) Error { return ErrInvalidClient.WithDescription(desc) }

// assertionSubject is the sub of a client assertion, unverified: for the record of a failed
// authentication only, which names the client the caller claimed to be.
func assertionSubject(raw string) (string, bool) {
	if raw == "" || len(raw) > 16<<10 {
		return "", false
	}
	tok, err := jwt.ParseSigned(raw, append(slices.Clone(privateKeyAlgs), secretAlgs...))
	if err != nil {
		return "", false
	}
	var c jwt.Claims
	if err := tok.UnsafeClaimsWithoutVerification(&c); err != nil {
		return "", false
	}
	return c.Subject, c.Subject != ""
}

// authenticateAssertion authenticates a client by a JWT assertion (RFC 7523 §2.2, RFC 7521
// §4.2, OpenID Connect Core §9): private_key_jwt, signed with a key the client publishes
// (spec.jwks or spec.jwksURI of an OAuthClient, jwks or jwks_uri of a client ID metadata
// document), or client_secret_jwt, HS256 under a declared client's secret. The method is the
// client's: a client of one method cannot use the other, nor a secret, nor nothing. iss and sub
// are the client id; aud is this issuer, its token endpoint or the endpoint called; exp is
// required and at most ten minutes ahead; the jti is spent once.
func authenticateAssertion(ctx context.Context, env *site.Env, st ReplayStore, p *config.Project, r *http.Request, form url.Values) (*site.Client, error) {
	typ := form.Get("client_assertion_type")
	if typ != AssertionType && typ != SPIFFEAssertionType {
		return nil, ErrInvalidClient.WithDescription("client_assertion_type must be " + AssertionType + " (or " + SPIFFEAssertionType + " for a SPIFFE JWT-SVID)")
	}
	raw := form.Get("client_assertion")
	if raw == "" {
		return nil, ErrInvalidClient.WithDescription("client_assertion is required with client_assertion_type")
	}
	if form.Get("client_secret") != "" || strings.HasPrefix(strings.ToLower(r.Header.Get("Authorization")), "basic ") {
		return nil, ErrInvalidRequest.WithDescription("use one client authentication method per request")
	}
	if len(raw) > 16<<10 {
		return nil, assertionError("client_assertion is too long")
	}
	if c, handled, err := workloadAssertion(ctx, env, p, form, typ, raw); handled {
		return c, err
	}
	tok, err := jwt.ParseSigned(raw, append(slices.Clone(privateKeyAlgs), secretAlgs...))
	if err != nil || len(tok.Headers) != 1 {
		// go-jose refuses alg none and every algorithm not listed here.
		return nil, assertionError("client_assertion is not a JWT signed with an accepted algorithm")
	}
	var unverified jwt.Claims
	if err := tok.UnsafeClaimsWithoutVerification(&unverified); err != nil {
		return nil, assertionError("client_assertion's claims do not parse")
	}
	id := unverified.Subject
	if fid := form.Get("client_id"); fid != "" && fid != id {
		return nil, ErrInvalidClient.WithDescription("client_id does not match the assertion's sub")
	}
	if id == "" || unverified.Issuer != id {
		return nil, assertionError("the assertion's iss and sub must both be the client id")
	}
	c, err := env.Client(ctx, p, id)
	if errors.Is(err, site.ErrUnknownClient) {
		return nil, failed("unknown_client")
	}
	if err != nil {
		return nil, Internal(err)
	}
	alg := jose.SignatureAlgorithm(tok.Headers[0].Algorithm)
	var claims jwt.Claims
	switch c.AuthMethod {
	case site.AuthPrivateKeyJWT:
		if !slices.Contains(privateKeyAlgs, alg) {
			return nil, failed("assertion_refused")
		}
		if claims, err = verifyWithClientKeys(ctx, env, c, tok); err != nil {
			return nil, err
		}
	case site.AuthClientSecretJWT:
		if alg != jose.HS256 || len(c.SecretJWTKey) == 0 {
			return nil, failed("assertion_refused")
		}
		if err := tok.Claims(c.SecretJWTKey, &claims); err != nil {
			return nil, failed("assertion_refused")
		}
	default:
		// A client that authenticates with a secret, or not at all, has no keys to sign with:
		// an assertion in its name is someone else's.
		return nil, failed("method_not_allowed")
	}
	now := env.Now()
	if err := checkAssertionClaims(p, r, claims, id, now); err != nil {
		return nil, err
	}
	key := sha256.Sum256([]byte("assertion\x00" + p.Key + "\x00" + id + "\x00" + claims.ID))
	err = st.UseOnce(ctx, key[:], claims.Expiry.Time().Add(assertionSkew), now)
	if errors.Is(err, store.ErrConflict) {
		return nil, assertionError("this client assertion was already used; make a new one (with a new jti) for every request").because("assertion_replayed")
	}
	if err != nil {
		return nil, Internal(err)
	}
	return c, nil
}

// verifyWithClientKeys verifies tok with the client's published keys: the one its kid names,
// or each key in turn when it names none. An unknown kid fetches a jwks_uri again (bounded
// by internal/jwks), so a client can rotate its key.
func verifyWithClientKeys(ctx context.Context, env *site.Env, c *site.Client, tok *jwt.JSONWebToken) (jwt.Claims, error) {
	var set *jose.JSONWebKeySet
	var err error
	switch {
	case len(c.JWKS) > 0:
		set, err = keyset.Parse(c.JWKS)
	case c.JWKSURI != "" && env.ClientKeys != nil:
		set, err = env.ClientKeys.Get(ctx, c.JWKSURI)
	default:
		return jwt.Claims{}, failed("assertion_refused")
	}
	var bad *keyset.Error
	if errors.As(err, &bad) {
		return jwt.Claims{}, assertionError("the client's keys cannot be used: " + bad.Reason)
	}
	if err != nil {
		return jwt.Claims{}, Internal(err)
	}
	kid, alg := tok.Headers[0].KeyID, tok.Headers[0].Algorithm
	candidates := keyset.Select(set, kid, alg)
	if len(candidates) == 0 && kid != "" && c.JWKSURI != "" && len(c.JWKS) == 0 {
		if set, err = env.ClientKeys.Refresh(ctx, c.JWKSURI); err == nil {
			candidates = keyset.Select(set, kid, alg)
		}
	}
	for _, k := range candidates {
		var claims jwt.Claims
		if err := tok.Claims(k.Key, &claims); err == nil {
			return claims, nil
		}
	}
	return jwt.Claims{}, failed("assertion_refused")
}

// checkAssertionClaims applies RFC 7523 §3 to a verified assertion.
func checkAssertionClaims(p *config.Project, r *http.Request, c jwt.Claims, id string, now time.Time) error {
	if c.Issuer != id || c.Subject != id {
		return assertionError("the assertion's iss and sub must both be the client id")
	}
	endpoint := p.Issuer
	if i := strings.LastIndex(r.URL.Path, "/"); i >= 0 {
		endpoint += r.URL.Path[i:]
	}
	// RFC 7523 names the token endpoint; its revision and OpenID Connect accept the issuer. The
	// endpoint actually called (introspection, revocation, PAR) is this server too.
	if !slices.ContainsFunc(c.Audience, func(a string) bool { return a == p.Issuer || a == p.Issuer+"/token" || a == endpoint }) {
		return assertionError("the assertion's aud must be this issuer or its token endpoint")
	}
	if c.Expiry == nil {
		return assertionError("the assertion must carry exp")
	}
	exp := c.Expiry.Time()
	if now.After(exp.Add(assertionSkew)) {
		return assertionError("the assertion has expired")
	}
	if exp.After(now.Add(assertionMaxTTL + assertionSkew)) {
		return assertionError("the assertion's exp is more than ten minutes ahead")
	}
	if c.NotBefore != nil && now.Add(assertionSkew).Before(c.NotBefore.Time()) {
		return assertionError("the assertion is not valid yet (nbf)")
	}
	if c.IssuedAt != nil && now.Add(assertionSkew).Before(c.IssuedAt.Time()) {
		return assertionError("the assertion's iat is in the future")
	}
	if c.ID == "" || len(c.ID) > 256 {
		return assertionError("the assertion must carry a jti")
	}
	return nil
}

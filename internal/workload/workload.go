// Package workload verifies the JWTs a workload's platform issues it, so that an OAuth client
// running as that workload proves itself without a secret (docs/workload-identity.md): a
// Kubernetes ServiceAccount's projected token, which the cluster itself confirms (TokenReview),
// and a SPIFFE JWT-SVID, checked against its trust domain's bundle.
//
// Both are bearer tokens the workload reuses until its platform rotates them, so neither is
// spent once as a private_key_jwt assertion is; what bounds one is its audience (this issuer
// and nothing else), its lifetime, and for a ServiceAccount token the cluster's word that the
// ServiceAccount, and the pod it is bound to, still exist.
package workload

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/spiffe/go-spiffe/v2/svid/jwtsvid"

	"latchkey.dev/latchkey/internal/config"
)

// Kinds of workload identity.
const (
	KindServiceAccount = "kubernetes"
	KindSPIFFE         = "spiffe"
)

// Limits on a workload token's times: the clock skew tolerated, and how far ahead its exp may
// be. Projected ServiceAccount tokens last an hour by default (the kubelet renews them at 80%)
// and JWT-SVIDs minutes; a token valid for more than a day is a long-lived credential, which
// is what workload identity replaces.
const (
	Skew      = 30 * time.Second
	MaxExpiry = 24 * time.Hour
	// MaxTokenBytes bounds the token read before anything else is done with it.
	MaxTokenBytes = 16 << 10
)

// Identity is a workload whose token was verified: what the audit record and an act claim
// name.
type Identity struct {
	// Kind is KindServiceAccount or KindSPIFFE.
	Kind string
	// Subject is "system:serviceaccount:NAMESPACE:NAME" or the SPIFFE ID.
	Subject string
	// Issuer is the token's iss: the cluster's service-account issuer, or for a JWT-SVID its
	// iss when it carries one.
	Issuer string
	// ServiceAccountUID, PodName and PodUID are what the cluster said of a ServiceAccount token
	// (the pod ones only for a token bound to a pod).
	ServiceAccountUID string
	PodName, PodUID   string
	// Expiry is the token's exp.
	Expiry time.Time
}

// Refusal is a token that does not prove the workload. Reason is for the audit record; Public
// says whether Description may be shown to the client (what is wrong with the token's shape),
// or the client gets the same answer as every failed authentication (who the token is for,
// what the cluster said).
type Refusal struct {
	Reason      string
	Description string
	Public      bool
}

func (r *Refusal) Error() string { return "workload token refused: " + r.Reason + ": " + r.Description }

func refused(reason, format string, args ...any) *Refusal {
	return &Refusal{Reason: reason, Description: fmt.Sprintf(format, args...)}
}

func shape(reason, format string, args ...any) *Refusal {
	r := refused(reason, format, args...)
	r.Public = true
	return r
}

// AsRefusal returns the Refusal in err's chain.
func AsRefusal(err error) (*Refusal, bool) {
	var r *Refusal
	ok := errors.As(err, &r)
	return r, ok
}

// ErrUnavailable: the server has no way to ask a cluster about ServiceAccount tokens (it runs
// without one, docs/no-cluster.md).
var ErrUnavailable = errors.New("workload identity with a Kubernetes ServiceAccount needs Latchkey to run in a cluster; this server runs without one")

// Algorithms Kubernetes and SPIRE sign with.
var tokenAlgs = []jose.SignatureAlgorithm{jose.RS256, jose.ES256, jose.ES384, jose.PS256, jose.RS384, jose.RS512, jose.EdDSA}

// checkTimes applies the bounds every workload token must meet on the injected clock.
func checkTimes(c jwt.Claims, now time.Time) error {
	if c.Expiry == nil {
		// A ServiceAccount token without exp is a legacy Secret-based token that never
		// expires: exactly the stored secret this replaces.
		return shape("no_expiry", "the token must carry exp (a projected or requested token, not a legacy ServiceAccount Secret)")
	}
	exp := c.Expiry.Time()
	if now.After(exp.Add(Skew)) {
		return shape("expired", "the token has expired")
	}
	if exp.After(now.Add(MaxExpiry + Skew)) {
		return shape("expiry_too_far", "the token's exp is more than %s ahead; request a shorter-lived token", MaxExpiry)
	}
	if c.NotBefore != nil && now.Add(Skew).Before(c.NotBefore.Time()) {
		return shape("not_yet_valid", "the token is not valid yet (nbf)")
	}
	if c.IssuedAt != nil && now.Add(Skew).Before(c.IssuedAt.Time()) {
		return shape("issued_in_future", "the token's iat is in the future")
	}
	return nil
}

// checkAudience requires the token to be for audience and nothing else: a token that names a
// second audience was also given to that other service, which could replay it here.
func checkAudience(aud jwt.Audience, audience string) error {
	if len(aud) != 1 || aud[0] != audience {
		return shape("wrong_audience", "the token's aud must be exactly this issuer (%s)", audience)
	}
	return nil
}

// unverified reads a token's claims without checking its signature, for the checks that need
// no key (and so cost the cluster no request) and to find whom it claims to be.
func unverified(raw string) (jwt.Claims, error) {
	if raw == "" || len(raw) > MaxTokenBytes {
		return jwt.Claims{}, shape("malformed", "the token is empty or longer than %d bytes", MaxTokenBytes)
	}
	tok, err := jwt.ParseSigned(raw, tokenAlgs)
	if err != nil || len(tok.Headers) != 1 {
		return jwt.Claims{}, shape("malformed", "the token is not a JWT signed with an accepted algorithm")
	}
	var c jwt.Claims
	if err := tok.UnsafeClaimsWithoutVerification(&c); err != nil {
		return jwt.Claims{}, shape("malformed", "the token's claims do not parse")
	}
	return c, nil
}

// Subject is the sub a workload token claims, unverified: for finding which client's workload
// it may be, and for the record of a failed attempt.
func Subject(raw string) (string, bool) {
	c, err := unverified(raw)
	return c.Subject, err == nil && c.Subject != ""
}

// VerifySVID verifies raw as a JWT-SVID of w's SPIFFE ID for audience: signed with a JWT-SVID
// key of w's trust bundle (a token of another trust domain finds no bundle), sub exactly the
// SPIFFE ID, aud exactly audience, and within its times on the injected clock.
func VerifySVID(raw string, w *config.Workload, audience string, now time.Time) (*Identity, error) {
	if w == nil || w.SPIFFEID == "" || w.SPIFFEBundle == nil {
		return nil, refused("not_spiffe", "the client has no SPIFFE ID")
	}
	c, err := unverified(raw)
	if err != nil {
		return nil, err
	}
	if err := checkAudience(c.Audience, audience); err != nil {
		return nil, err
	}
	if err := checkTimes(c, now); err != nil {
		return nil, err
	}
	if c.Subject != w.SPIFFEID {
		return nil, refused("wrong_workload", "the JWT-SVID is for %q, not %q", c.Subject, w.SPIFFEID)
	}
	// go-spiffe checks the signature with the bundle of the sub's trust domain and the times on
	// the wall clock, with a minute's leeway; the checks above did so on the injected one.
	svid, err := jwtsvid.ParseAndValidate(raw, w.SPIFFEBundle, []string{audience})
	if err != nil {
		return nil, refused("svid_invalid", "%v", err)
	}
	if svid.ID.String() != w.SPIFFEID {
		return nil, refused("wrong_workload", "the JWT-SVID is for %q, not %q", svid.ID, w.SPIFFEID)
	}
	return &Identity{Kind: KindSPIFFE, Subject: svid.ID.String(), Issuer: c.Issuer, Expiry: svid.Expiry}, nil
}

// ParseSubject splits "system:serviceaccount:NAMESPACE:NAME".
func ParseSubject(sub string) (namespace, name string, ok bool) {
	rest, found := strings.CutPrefix(sub, "system:serviceaccount:")
	if !found {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ":")
	return namespace, name, ok && namespace != "" && name != "" && !strings.Contains(name, ":")
}

// sameAudiences reports whether the cluster confirmed audience.
func sameAudiences(confirmed []string, audience string) bool {
	return slices.Contains(confirmed, audience)
}

package oauth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"net/http"
	"strings"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/dpop"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/site"
)

// DPoP errors (RFC 9449 §5, §8).
var (
	ErrInvalidDPoPProof = Error{Code: "invalid_dpop_proof", Status: http.StatusBadRequest}
	ErrUseDPoPNonce     = Error{Code: "use_dpop_nonce", Status: http.StatusBadRequest, Description: "sign the DPoP proof again with the nonce in the DPoP-Nonce header"}
)

// TokenTypeDPoP is the token_type of an access token bound to a key (RFC 9449 §5).
const TokenTypeDPoP = "DPoP"

// nonceWindow is how long a server nonce is handed out for; one is accepted during its window
// and the next, so a client that just got one has at least this long to use it.
const nonceWindow = time.Minute

// DPoPRequired reports whether every token request of client must carry a proof: the Project
// says so for everyone, the OAuthClient for itself, or the client registered
// dpop_bound_access_tokens (RFC 9449 §5.2).
func DPoPRequired(p *config.Project, c *site.Client) bool {
	return p.RequireDPoP || c.RequireDPoP
}

// tokenProof checks the DPoP header of a token request (htu is the token endpoint's URL) and
// returns the thumbprint of the key it proves, or "" when the request carries no proof and the
// client need not send one (DPoPRequired).
func tokenProof(ctx context.Context, env *site.Env, st ReplayStore, w http.ResponseWriter, r *http.Request, p *config.Project, c *site.Client, htu string, now time.Time) (jkt string, err error) {
	return endpointProof(ctx, env, st, w, r, p, c, "token", htu, DPoPRequired(p, c), now)
}

// PushedProof checks the DPoP header of a pushed authorization request, if it has one, and
// returns the thumbprint of the key it proves, which binds the authorization code (RFC 9449
// §10.1); "" without a header. A proof there is optional, whatever the client must send at the
// token endpoint.
func PushedProof(ctx context.Context, env *site.Env, st ReplayStore, w http.ResponseWriter, r *http.Request, p *config.Project, c *site.Client, now time.Time) (string, error) {
	return endpointProof(ctx, env, st, w, r, p, c, "par", p.Issuer+"/par", false, now)
}

// endpointProof checks the DPoP header of a request to one of the authorization server's
// endpoints (where names it, htu is its URL) and returns the thumbprint of the key it proves,
// or "" when the request carries no proof and none is required. A proof is checked whole (RFC
// 9449 §4.3): form, signature, htm, htu, iat, nonce when the Project requires nonces, and its
// jti once, in the store, so no replica accepts it twice. When the Project requires nonces, a
// fresh one is set on w with every answer.
func endpointProof(ctx context.Context, env *site.Env, st ReplayStore, w http.ResponseWriter, r *http.Request, p *config.Project, c *site.Client, where, htu string, required bool, now time.Time) (jkt string, err error) {
	defer func() {
		if e := AsError(err); err != nil && e.Code == ErrInvalidDPoPProof.Code {
			recordProofRefused(ctx, env, p, c, where, e)
		}
	}()
	values := r.Header.Values("DPoP")
	if len(values) == 0 {
		if required {
			return "", ErrInvalidDPoPProof.WithDescription("this client must send a DPoP proof (RFC 9449) with every token request").because("proof_required")
		}
		return "", nil
	}
	if len(values) > 1 {
		return "", ErrInvalidDPoPProof.WithDescription("send exactly one DPoP header").because("malformed")
	}
	proof, err := dpop.Verify(values[0], dpop.Check{Method: r.Method, URL: htu, Now: now})
	if err != nil {
		return "", ErrInvalidDPoPProof.WithDescription(dpop.Problem(err)).because("malformed")
	}
	if p.RequireDPoPNonce {
		w.Header().Set("DPoP-Nonce", NewDPoPNonce(env, p, now))
		if !validNonce(env, p, proof.Nonce, now) {
			return "", ErrUseDPoPNonce
		}
	}
	if err := useProof(ctx, st, p, where, proof, now); err != nil {
		return "", err
	}
	return proof.JKT, nil
}

// ValidJKT reports whether s has the form of a JWK SHA-256 thumbprint (RFC 7638), as dpop_jkt
// must (RFC 9449 §10): 32 bytes, base64url without padding.
func ValidJKT(s string) bool {
	if len(s) != 43 {
		return false
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	return err == nil && len(b) == sha256.Size
}

// ProofState says, for the audit record of a bound credential refused, what the request
// proved: no key at all ("none") or a key other than the bound one ("another_key").
func ProofState(jkt string) string {
	if jkt == "" {
		return "none"
	}
	return "another_key"
}

// BoundKeyError is the refusal of a credential bound to a DPoP key (a code requested with
// dpop_jkt, a refresh token, a subject token) presented without a proof by that key: the grant
// is what fails, so invalid_grant, as RFC 9449 §5 answers a bound refresh token (decision 0053).
func BoundKeyError(what string) Error {
	return ErrInvalidGrant.WithDescription("the " + what + " is bound to a DPoP key; send a DPoP proof signed with that key")
}

// RecordBoundKeyRefused writes dpop.proof_refused with reason dpop_key_mismatch: a credential
// bound to a key came without a proof by it, most likely a copy (an intercepted code, a token
// taken off the wire). grant names the use, subject whom the credential speaks for.
func RecordBoundKeyRefused(ctx context.Context, req *TokenRequest, grant, subject string) {
	req.Env.Record(ctx, store.AuditRecord{
		Project: req.Project.Key, Actor: "client:" + req.Client.ID, Action: events.DPoPProofRefused, Target: subject, ClientID: req.Client.ID,
		Outcome: store.OutcomeRefused, Reason: "dpop_key_mismatch", Details: map[string]string{"grant_type": grant, "proof": ProofState(req.JKT)},
	})
}

// useProof records the proof's jti for its window: the same proof (same key and jti) is
// refused on every replica until it is too old to pass on iat anyway.
func useProof(ctx context.Context, st ReplayStore, p *config.Project, where string, proof *dpop.Proof, now time.Time) error {
	key := sha256.Sum256([]byte("dpop\x00" + where + "\x00" + p.Key + "\x00" + proof.JKT + "\x00" + proof.JTI))
	err := st.UseOnce(ctx, key[:], proof.ReplayUntil, now)
	if errors.Is(err, store.ErrConflict) {
		return ErrInvalidDPoPProof.WithDescription("this DPoP proof was already used; make a new one for every request").because("replayed")
	}
	if err != nil {
		return Internal(err)
	}
	return nil
}

// recordProofRefused writes dpop.proof_refused for a request to the token or pushed request
// endpoint (where) whose proof was refused (invalid_dpop_proof; a request for a nonce is the
// protocol, not a refusal). A replayed proof means someone else saw it; the others are mostly
// clients that sign wrongly. Queued, like failed client authentications (events.WrittenBehind).
func recordProofRefused(ctx context.Context, env *site.Env, p *config.Project, c *site.Client, where string, e Error) {
	reason := "malformed"
	var why authReason
	if errors.As(e, &why) {
		reason = string(why)
	}
	env.Record(ctx, store.AuditRecord{
		Project: p.Key, Actor: "client:" + c.ID, Action: events.DPoPProofRefused, Target: "client:" + c.ID, ClientID: c.ID,
		Outcome: store.OutcomeRefused, Reason: reason, Details: map[string]string{"problem": e.Description, "endpoint": where},
	})
}

func noncePurpose(p *config.Project) string { return "oauth.dpop-nonce:" + p.Key }

// NewDPoPNonce makes a server nonce (RFC 9449 §8) that any replica can check without storing
// it: the current time window, sealed with the keyring every replica shares and bound to the
// Project. It is opaque to clients.
func NewDPoPNonce(env *site.Env, p *config.Project, now time.Time) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(now.Unix()/int64(nonceWindow/time.Second))) //nolint:gosec // G115: times after 1970
	kid, sealed := env.Keyring.Seal(noncePurpose(p), b[:])
	return base64.RawURLEncoding.EncodeToString([]byte(kid)) + "." + base64.RawURLEncoding.EncodeToString(sealed)
}

// validNonce accepts a nonce made for this Project in the current or the previous window.
func validNonce(env *site.Env, p *config.Project, nonce string, now time.Time) bool {
	k, s, ok := strings.Cut(nonce, ".")
	if !ok || len(nonce) > 512 {
		return false
	}
	kid, err1 := base64.RawURLEncoding.DecodeString(k)
	sealed, err2 := base64.RawURLEncoding.DecodeString(s)
	if err1 != nil || err2 != nil {
		return false
	}
	b, err := env.Keyring.Open(noncePurpose(p), string(kid), sealed)
	if err != nil || len(b) != 8 {
		return false
	}
	w := int64(binary.BigEndian.Uint64(b)) //nolint:gosec // G115: made by NewDPoPNonce
	cur := now.Unix() / int64(nonceWindow/time.Second)
	return w == cur || w == cur-1
}

// dpopChallenge is the WWW-Authenticate challenge of a resource Latchkey serves (userinfo) for
// a request refused over DPoP (RFC 9449 §7.1).
func dpopChallenge(e Error) string {
	return `DPoP error="` + e.Code + `"` + describe(e.Description) + `, algs="` + strings.Join(dpop.Algorithms, " ") + `"`
}

// DPoPToken reads "Authorization: DPoP <token>" (RFC 9449 §7.1), or "".
func DPoPToken(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) < 5 || !strings.EqualFold(h[:5], "dpop ") {
		return ""
	}
	return strings.TrimSpace(h[5:])
}

// ResourceAccessToken finds the live access token a request to one of Latchkey's own resources
// (userinfo) presents, under either scheme: a bearer token must not be bound to a key, and a
// DPoP-bound token must come with "Authorization: DPoP" and a proof for this request, signed
// with the bound key, whose ath is the token's hash. htu is the resource's URL.
func ResourceAccessToken(ctx context.Context, env *site.Env, st ResourceStore, w http.ResponseWriter, r *http.Request, p *config.Project, htu string, now time.Time) (store.Token, error) {
	raw := DPoPToken(r)
	if raw == "" {
		raw = BearerToken(r)
	}
	t, err := LookupAccessToken(ctx, env, st, p, raw, now)
	if err != nil {
		return store.Token{}, err
	}
	if err := Presented(ctx, st, w, r, p, htu, t, now); err != nil {
		return store.Token{}, err
	}
	return t, nil
}

// Presented checks how r presents t, an access token found live: a DPoP-bound one with
// Authorization: DPoP and exactly one proof of its key for this call (method, htu, the token's
// hash, a jti never used before, RFC 9449 §7.1), an unbound one as a Bearer token (a bound
// token presented as a bearer token is what a thief holding the token but not the key would
// send, RFC 9449 §7.2). It runs on every call, also when the caller remembers t from an
// earlier one (the token proxy's decision cache). A refusal's WWW-Authenticate goes on w.
func Presented(ctx context.Context, st ReplayStore, w http.ResponseWriter, r *http.Request, p *config.Project, htu string, t store.Token, now time.Time) error {
	raw := DPoPToken(r)
	if raw == "" {
		if t.JKT != "" {
			e := ErrInvalidToken.WithDescription("the access token is bound to a DPoP key; present it with Authorization: DPoP and a proof")
			w.Header().Set("WWW-Authenticate", dpopChallenge(e))
			return e
		}
		return nil
	}
	fail := func(e Error) error {
		w.Header().Set("WWW-Authenticate", dpopChallenge(e))
		return e
	}
	if t.JKT == "" {
		return fail(ErrInvalidToken.WithDescription("the access token is not bound to a key; present it as a Bearer token"))
	}
	values := r.Header.Values("DPoP")
	if len(values) != 1 {
		return fail(ErrInvalidToken.WithDescription("send exactly one DPoP proof"))
	}
	proof, err := dpop.Verify(values[0], dpop.Check{Method: r.Method, URL: htu, Now: now, AccessToken: raw})
	if err != nil {
		return fail(ErrInvalidDPoPProof.WithStatus(http.StatusUnauthorized).WithDescription(dpop.Problem(err)))
	}
	if proof.JKT != t.JKT {
		return fail(ErrInvalidToken.WithDescription("the DPoP proof is not signed with the key the access token is bound to"))
	}
	if err := useProof(ctx, st, p, "resource", proof, now); err != nil {
		if e := AsError(err); e.Status < 500 {
			return fail(e.WithStatus(http.StatusUnauthorized))
		}
		return err
	}
	return nil
}

package signin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/webauthn"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/pages"
	"latchkey.dev/latchkey/webhook/site"
)

// Passkeys (docs/passkeys.md, docs/decisions/0041). The relying party is the project's issuer:
// its host is the RP ID and its origin the only origin a ceremony may come from. Every project
// of an installation shares that host, so a passkey is scoped to its project by the store (a
// credential ID is looked up in the request's project only), not by the authenticator.

// Sign-in methods recorded on a session (RFC 8176 amr values).
const (
	MethodPassword = "pwd"
	MethodOIDC     = "oidc"
	// MethodHardwareKey is a passkey that cannot leave its device; MethodSoftwareKey one that
	// can be synced to others (backup eligible).
	MethodHardwareKey = "hwk"
	MethodSoftwareKey = "swk"
)

// PhishingResistant reports whether a session's sign-in method cannot be replayed on a
// look-alike site: only passkeys, whose signature covers the origin.
func PhishingResistant(method string) bool {
	return method == MethodHardwareKey || method == MethodSoftwareKey
}

// CeremonyLife bounds the time between a ceremony's options and the browser's answer.
const CeremonyLife = 5 * time.Minute

const (
	maxPasskeyBody  = 64 << 10
	ceremonyEnrol   = "enrol"
	ceremonySignIn  = "sign-in"
	passkeyNameSize = 64
)

// RelyingParty is the project's WebAuthn relying party: RP ID the issuer's host, origin the
// issuer's origin, resident keys and user verification required, no attestation asked for.
func RelyingParty(p *config.Project) (*webauthn.WebAuthn, error) {
	u, err := url.Parse(p.Issuer)
	if err != nil || u.Hostname() == "" {
		return nil, errors.New("signin: the issuer has no host")
	}
	required := true
	return webauthn.New(&webauthn.Config{
		RPID:          u.Hostname(),
		RPDisplayName: projectName(p),
		RPOrigins:     []string{u.Scheme + "://" + u.Host},
		AuthenticatorSelection: protocol.AuthenticatorSelection{
			RequireResidentKey: &required,
			ResidentKey:        protocol.ResidentKeyRequirementRequired,
			UserVerification:   protocol.VerificationRequired,
		},
		AttestationPreference: protocol.PreferNoAttestation,
		Timeouts: webauthn.TimeoutsConfig{
			Login:        webauthn.TimeoutConfig{Enforce: true, Timeout: CeremonyLife, TimeoutUVD: CeremonyLife},
			Registration: webauthn.TimeoutConfig{Enforce: true, Timeout: CeremonyLife, TimeoutUVD: CeremonyLife},
		},
	})
}

// PasskeyUser is a person as the WebAuthn library sees them: the user handle is the person's
// ID, which is random and names them in this project only.
type PasskeyUser struct {
	Person   store.Person
	Passkeys []store.Passkey
}

func (u PasskeyUser) WebAuthnID() []byte          { return []byte(u.Person.ID) }
func (u PasskeyUser) WebAuthnName() string        { return displayName(u.Person) }
func (u PasskeyUser) WebAuthnDisplayName() string { return displayName(u.Person) }
func (u PasskeyUser) WebAuthnCredentials() []webauthn.Credential {
	out := make([]webauthn.Credential, 0, len(u.Passkeys))
	for _, k := range u.Passkeys {
		out = append(out, Credential(k))
	}
	return out
}

// Credential is the stored passkey as the WebAuthn library sees it.
func Credential(k store.Passkey) webauthn.Credential {
	c := webauthn.Credential{
		ID: k.CredentialID, PublicKey: k.PublicKey, AttestationFormat: k.AttestationFormat,
		Flags: webauthn.CredentialFlags{
			UserPresent: true, UserVerified: k.UserVerified, BackupEligible: k.BackupEligible, BackupState: k.BackupState,
		},
		Authenticator: webauthn.Authenticator{AAGUID: k.AAGUID, SignCount: k.SignCount},
	}
	for _, t := range k.Transports {
		c.Transport = append(c.Transport, protocol.AuthenticatorTransport(t))
	}
	return c
}

// Passkey is a credential the WebAuthn library accepted at enrolment, to store.
func Passkey(p *config.Project, subject, name string, c *webauthn.Credential, now time.Time) store.Passkey {
	k := store.Passkey{
		Project: p.Key, CredentialID: c.ID, Subject: subject, Name: name, PublicKey: c.PublicKey,
		SignCount: c.Authenticator.SignCount, AAGUID: c.Authenticator.AAGUID, AttestationFormat: c.AttestationFormat,
		UserVerified: c.Flags.UserVerified, BackupEligible: c.Flags.BackupEligible, BackupState: c.Flags.BackupState,
		CreatedAt: now,
	}
	for _, t := range c.Transport {
		k.Transports = append(k.Transports, string(t))
	}
	return k
}

// PasskeyMethod is the sign-in method a passkey gives a session.
func PasskeyMethod(k store.Passkey) string {
	if k.BackupEligible {
		return MethodSoftwareKey
	}
	return MethodHardwareKey
}

// BeginCeremony stores a ceremony's session data, bound to this browser: its row is keyed by
// the hash of a cookie the page already set and the challenge — the session cookie for an
// enrolment, the sign-in form's anti-forgery cookie for a sign-in — so a browser may run
// several ceremonies at once (the sign-in page's autofill request and its button), each
// finished once, and only where that cookie is. The cookie is set when the page is rendered,
// before any script runs, so concurrent first requests cannot each bind to a different value.
func BeginCeremony(ctx context.Context, env *site.Env, st CeremonyStore, r *http.Request, p *config.Project, kind, subject string, data *webauthn.SessionData) error {
	v := ceremonyCookieValue(env, r, p, kind)
	if v == "" {
		return errNoCeremony
	}
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	return st.CreatePasskeyCeremony(ctx, store.PasskeyCeremony{
		IDHash: ceremonyID(v, data.Challenge), Project: p.Key, Kind: kind, Subject: subject, Data: b,
		Expires: env.Now().Add(CeremonyLife),
	})
}

func ceremonyCookieValue(env *site.Env, r *http.Request, p *config.Project, kind string) string {
	name := csrfCookie
	if kind == ceremonyEnrol {
		name = sessionCookie
	}
	v := ReadCookie(r, env, p, name)
	if len(v) > 128 {
		return ""
	}
	return v
}

func ceremonyID(cookie, challenge string) []byte { return secret.Hash(cookie + "|" + challenge) }

// errNoCeremony: the browser has no live ceremony of that kind in this project (none started
// here, finished already, expired, or started for someone else), or lacks the cookie one is
// bound to.
var errNoCeremony = errors.New("no passkey ceremony")

// FinishCeremony takes this browser's ceremony for challenge (as the browser's answer
// states it), once. A ceremony of another kind, project or person is errNoCeremony, and is
// used up all the same.
func FinishCeremony(ctx context.Context, env *site.Env, st CeremonyStore, r *http.Request, p *config.Project, kind, subject, challenge string) (webauthn.SessionData, error) {
	v := ceremonyCookieValue(env, r, p, kind)
	if v == "" || challenge == "" {
		return webauthn.SessionData{}, errNoCeremony
	}
	c, err := st.TakePasskeyCeremony(ctx, ceremonyID(v, challenge), env.Now())
	if errors.Is(err, store.ErrNotFound) {
		return webauthn.SessionData{}, errNoCeremony
	}
	if err != nil {
		return webauthn.SessionData{}, err
	}
	if c.Project != p.Key || c.Kind != kind || c.Subject != subject {
		return webauthn.SessionData{}, errNoCeremony
	}
	var data webauthn.SessionData
	if err := json.Unmarshal(c.Data, &data); err != nil {
		return webauthn.SessionData{}, err
	}
	return data, nil
}

// IsNoCeremony reports whether FinishCeremony found no ceremony to finish.
func IsNoCeremony(err error) bool { return errors.Is(err, errNoCeremony) }

// ReadJSONBody reads a ceremony's JSON answer, at most 64 KiB; nil when it is not JSON.
func ReadJSONBody(w http.ResponseWriter, r *http.Request) []byte {
	b, err := readAll(http.MaxBytesReader(w, r.Body, maxPasskeyBody))
	if err != nil || !json.Valid(b) {
		return nil
	}
	return b
}

func readAll(r interface{ Read([]byte) (int, error) }) ([]byte, error) {
	var buf bytes.Buffer
	_, err := buf.ReadFrom(r)
	return buf.Bytes(), err
}

// JSON answers a ceremony endpoint. Errors are {"error": code, "message": what to tell the
// person}; the script shows the message.
func JSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// JSONError answers a ceremony endpoint with an error.
func JSONError(w http.ResponseWriter, status int, code, message string) {
	JSON(w, status, map[string]string{"error": code, "message": pages.Translate(w, message)})
}

// CheckHeaderCSRF compares the X-CSRF-Token header of a script's request with the session's.
func CheckHeaderCSRF(env *site.Env, r *http.Request) bool {
	return CheckCSRF(env, r, r.Header.Get("X-CSRF-Token"))
}

package signin

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/webauthn"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/ratelimit"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/pages"
	"latchkey.dev/latchkey/webhook/site"
)

// Paths of the passkey sign-in ceremony under the issuer. The page's script asks for options,
// hands them to the browser, and posts the browser's answer back.
const (
	PasskeyOptionsPath = "/sign-in/passkey/options"
	PasskeyFinishPath  = "/sign-in/passkey"
)

// What a refused passkey sign-in tells the person. An unknown passkey, one of another project
// and one whose signature fails read the same, so the answer says nothing about which
// credentials exist.
const (
	msgPasskeyUnknown = "That passkey is not one of this project's. Sign in another way, then add a passkey on your account page."
	msgPasskeyClone   = "That passkey was refused: its signature counter went backwards, which happens when a passkey has been copied. Sign in another way and remove it from your account page."
	msgPasskeyExpired = "Signing in with a passkey took too long or was already used. Please try again."
	msgPasskeyBad     = "Your browser's answer could not be read. Please try again."
)

func (h *handler) registerPasskeys(rt site.Router) {
	rt.Page("POST "+PasskeyOptionsPath, http.HandlerFunc(h.passkeyOptions))
	rt.Page("POST "+PasskeyFinishPath, http.HandlerFunc(h.passkeyFinish))
}

// PasskeysOffered reports whether passkeys can work for the project at all: WebAuthn needs a
// domain name as the relying party ID, so an issuer on an IP address has none.
func PasskeysOffered(p *config.Project) bool {
	u, err := url.Parse(p.Issuer)
	return err == nil && u.Hostname() != "" && net.ParseIP(u.Hostname()) == nil
}

// passkeyForm adds the passkey parts of the sign-in page. The button and the autofill only
// work with the page's script; the password form works without it.
func (h *handler) passkeyForm(w http.ResponseWriter, r *http.Request, p *config.Project, d *pages.SignInData) {
	if !PasskeysOffered(p) {
		return
	}
	base := site.IssuerPath(p)
	d.Passkeys = true
	d.PasskeyOptions = base + PasskeyOptionsPath
	d.PasskeyFinish = base + PasskeyFinishPath + "?" + url.Values{"return_to": {d.ReturnTo}}.Encode()
	d.PasskeyRequired = d.PasskeyRequired || r.URL.Query().Get("passkey") == "1"
	pages.AllowScripts(w)
}

// passkeyOptions starts a discoverable sign-in: no user is named, the authenticator offers
// the passkeys it holds for this relying party.
func (h *handler) passkeyOptions(w http.ResponseWriter, r *http.Request) {
	p := site.Project(r)
	if !PasskeysOffered(p) {
		JSONError(w, http.StatusNotFound, "passkeys_off", "This project cannot use passkeys.")
		return
	}
	if !h.passkeyAllowed(w, r, p) {
		return
	}
	rp, err := RelyingParty(p)
	if err != nil {
		h.passkeyInternal(w, p, err)
		return
	}
	opts, data, err := rp.BeginDiscoverableLogin(webauthn.WithUserVerification(protocol.VerificationRequired))
	if err != nil {
		h.passkeyInternal(w, p, err)
		return
	}
	if err := BeginCeremony(r.Context(), h.env, h.store, r, p, ceremonySignIn, "", data); IsNoCeremony(err) {
		JSONError(w, http.StatusBadRequest, "expired", msgPasskeyExpired)
		return
	} else if err != nil {
		h.passkeyInternal(w, p, err)
		return
	}
	JSON(w, http.StatusOK, opts)
}

// passkeyFinish checks the browser's answer and signs the person in. The ceremony is used up
// whatever happens, so a challenge is answered once.
//
//nolint:funlen // the WebAuthn assertion checks in the order the spec sets them; the ceremony is spent first whatever follows
func (h *handler) passkeyFinish(w http.ResponseWriter, r *http.Request) {
	p := site.Project(r)
	ctx := r.Context()
	if !h.passkeyAllowed(w, r, p) {
		return
	}
	body := ReadJSONBody(w, r)
	if body == nil {
		JSONError(w, http.StatusBadRequest, "invalid_request", msgPasskeyBad)
		return
	}
	parsed, err := protocol.ParseCredentialRequestResponseBytes(body)
	if err != nil {
		JSONError(w, http.StatusBadRequest, "invalid_request", msgPasskeyBad)
		return
	}
	data, err := FinishCeremony(ctx, h.env, h.store, r, p, ceremonySignIn, "", parsed.Response.CollectedClientData.Challenge)
	if IsNoCeremony(err) {
		JSONError(w, http.StatusBadRequest, "expired", msgPasskeyExpired)
		return
	}
	if err != nil {
		h.passkeyInternal(w, p, err)
		return
	}
	rp, err := RelyingParty(p)
	if err != nil {
		h.passkeyInternal(w, p, err)
		return
	}
	var (
		key     store.Passkey
		person  store.Person
		lookErr error
	)
	// The credential is looked up in this project only: a passkey enrolled in another project
	// on the same host is unknown here.
	find := func(rawID, userHandle []byte) (webauthn.User, error) {
		key, lookErr = h.store.GetPasskey(ctx, p.Key, rawID)
		if lookErr != nil {
			return nil, lookErr
		}
		if !bytes.Equal(userHandle, []byte(key.Subject)) {
			lookErr = store.ErrNotFound
			return nil, lookErr
		}
		person, lookErr = h.store.GetPerson(ctx, p.Key, key.Subject)
		if lookErr != nil {
			return nil, lookErr
		}
		return PasskeyUser{Person: person, Passkeys: []store.Passkey{key}}, nil
	}
	_, cred, err := rp.ValidatePasskeyLogin(find, data, parsed)
	switch {
	case lookErr != nil && !errors.Is(lookErr, store.ErrNotFound):
		h.passkeyInternal(w, p, lookErr)
		return
	case err != nil:
		h.env.Logger.V(1).Info("passkey sign-in refused", "project", p.Key, "reason", err.Error())
		JSONError(w, http.StatusBadRequest, "refused", msgPasskeyUnknown)
		return
	}
	// The library only flags a counter that did not move; refusing is ours to do, and the
	// store makes the check and the update one step across replicas.
	if cred.Authenticator.CloneWarning {
		JSONError(w, http.StatusBadRequest, "refused", msgPasskeyClone)
		return
	}
	now := h.env.Now()
	err = h.store.UsePasskey(ctx, p.Key, key.CredentialID, cred.Authenticator.SignCount, cred.Flags.BackupState, now)
	if errors.Is(err, store.ErrConflict) {
		JSONError(w, http.StatusBadRequest, "refused", msgPasskeyClone)
		return
	}
	if errors.Is(err, store.ErrNotFound) {
		JSONError(w, http.StatusBadRequest, "refused", msgPasskeyUnknown)
		return
	}
	if err != nil {
		h.passkeyInternal(w, p, err)
		return
	}
	// A person the project no longer lets sign in (removed from the password file, or whose
	// provider is no longer trusted) cannot come back through a passkey either.
	if !site.PersonActive(p, person) {
		h.passkeyRefused(r, p, person, "person_removed")
		JSONError(w, http.StatusBadRequest, "refused", msgPasskeyUnknown)
		return
	}
	// Nor can someone their provider let go since it last confirmed them: with re-checks on,
	// the provider is asked (or its word is recent enough) before the session starts. A
	// passkey is Latchkey's own credential; without this it would outlive the person's
	// account at their organisation (docs/leavers.md).
	if err := h.confirmPerson(ctx, p, person, now); err != nil {
		reason := "recheck_failed"
		switch {
		case errors.Is(err, site.ErrPersonUnchecked):
			reason = "recheck_impossible"
		case errors.Is(err, site.ErrPersonUnconfirmed):
			reason = "recheck_unavailable"
		case !errors.Is(err, site.ErrPersonEnded):
			h.passkeyInternal(w, p, err)
			return
		}
		h.passkeyRefused(r, p, person, reason)
		JSONError(w, http.StatusBadRequest, "refused", msgPasskeyUnknown)
		return
	}
	if err := startWith(ctx, h.env, h.store, w, r, p, person, now, "", PasskeyMethod(key)); err != nil {
		h.passkeyInternal(w, p, err)
		return
	}
	returnTo, ok := SafeReturn(p, r.URL.Query().Get("return_to"))
	if !ok {
		returnTo = DefaultReturn(p)
	}
	JSON(w, http.StatusOK, map[string]string{"continue": returnTo})
}

// passkeyAllowed takes one request of the ceremony from the client address's budget
// (PasskeyBurst), or answers 429 with Retry-After in the ceremony's JSON shape.
func (h *handler) passkeyAllowed(w http.ResponseWriter, r *http.Request, p *config.Project) bool {
	ok, wait := h.passkeys.Take(r.Context(), p.Key+"|"+h.env.ClientAddress(r), h.env.Now())
	if ok {
		return true
	}
	secs := ratelimit.Seconds(wait)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	JSONError(w, http.StatusTooManyRequests, "too_many_requests",
		pages.T(w, "Too many sign-in attempts. Wait %d seconds, then try again.", secs))
	return false
}

// passkeyRefused records a passkey that was genuine but whose person may not sign in now. The
// answer to the browser is the unknown passkey's: it says nothing about the person.
func (h *handler) passkeyRefused(r *http.Request, p *config.Project, person store.Person, reason string) {
	h.env.Record(r.Context(), store.AuditRecord{
		Project: p.Key, Actor: "anonymous", Action: events.SignInFailed, Target: person.ID, Reason: reason,
		Details: map[string]string{"method": "passkey"},
	})
}

func (h *handler) passkeyInternal(w http.ResponseWriter, p *config.Project, err error) {
	h.env.Logger.Error(err, "passkey sign-in failed", "project", p.Key)
	JSONError(w, http.StatusInternalServerError, "server_error", "Signing in failed on our side. Please try again in a moment.")
}

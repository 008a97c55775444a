package account

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/webauthn"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/pages"
	"latchkey.dev/latchkey/webhook/signin"
	"latchkey.dev/latchkey/webhook/site"
)

// Passkey paths under the issuer (docs/passkeys.md). Enrolling is a ceremony the page's
// script runs (options, then the browser's answer); removing is a plain form.
const (
	PasskeyOptionsPath = "/account/passkeys/options"
	PasskeyAddPath     = "/account/passkeys"
	PasskeyRemovePath  = "/account/passkeys/remove"
)

const (
	msgEnrolNotRecent       = "Adding a passkey needs a recent sign-in. Sign in again, then add it."
	msgFirstPasskeyProvider = "This project asks for a sign-in with your organisation's account before your first passkey is added. A password is not enough."
	// A project that signs people in with passwords only: nobody can vouch for a first
	// passkey while the policy is on (docs/passkeys.md).
	msgFirstPasskeyNoProvider = "This project asks for a passkey, and a first passkey cannot be added after a password sign-in. Ask an administrator of this project."
)

func (h *handler) registerPasskeys(rt site.Router) {
	rt.Page("POST "+PasskeyOptionsPath, http.HandlerFunc(h.passkeyOptions))
	rt.Page("POST "+PasskeyAddPath, http.HandlerFunc(h.passkeyAdd))
	rt.Page("POST "+PasskeyRemovePath, http.HandlerFunc(h.passkeyRemove))
}

// What a session lacks to change passkeys (mayChangePasskeys).
type lack int

const (
	lacksNothing lack = iota
	// lacksRecent: no sign-in within the project's RecentSignIn.
	lacksRecent
	// lacksPasskey: the project requires a phishing-resistant sign-in and the person has a
	// passkey to sign in with.
	lacksPasskey
	// lacksProvider: the project requires a phishing-resistant sign-in, the person has no
	// passkey yet, and the session is not a recent sign-in with the project's OpenID provider.
	lacksProvider
)

// mayChangePasskeys says what this session lacks to add or remove passkeys: a recent sign-in
// (the project's RecentSignIn), and, where the project requires a phishing-resistant one, with
// a passkey. A person who has none yet enrols their first one after a recent sign-in with the
// project's OpenID provider, never after a password sign-in: a phished password would
// otherwise let the attacker enrol their own passkey and pass every check the policy makes
// (docs/decisions/0055-first-passkey-under-the-phishing-resistant-policy.md).
func mayChangePasskeys(p *config.Project, s store.Session, keys []store.Passkey, now time.Time) lack {
	ok, needPasskey := signin.Recent(p, s, now)
	switch {
	case ok:
		return lacksNothing
	case !needPasskey:
		return lacksRecent
	case len(keys) > 0:
		return lacksPasskey
	case s.Method == signin.MethodOIDC:
		// Recent asked for a passkey, so the sign-in is recent.
		return lacksNothing
	}
	return lacksProvider
}

func (h *handler) passkeyData(p *config.Project, keys []store.Passkey, d *pages.AccountData) {
	if !signin.PasskeysOffered(p) {
		return
	}
	base := site.IssuerPath(p)
	d.PasskeysOffered = true
	d.PasskeyOptions = base + PasskeyOptionsPath
	d.PasskeyAdd = base + PasskeyAddPath
	d.PasskeyRemove = base + PasskeyRemovePath
	for _, k := range keys {
		ak := pages.AccountPasskey{ID: base64.RawURLEncoding.EncodeToString(k.CredentialID), Name: k.Name, Added: day(k.CreatedAt)}
		if !k.LastUsedAt.IsZero() {
			ak.LastUsed = day(k.LastUsedAt)
		}
		d.Passkeys = append(d.Passkeys, ak)
	}
}

// enrolling finds the signed-in person of an enrolment step, which the page's script sends with
// the session's anti-forgery token in a header; otherwise it answers in JSON and returns false.
func (h *handler) enrolling(w http.ResponseWriter, r *http.Request) (store.Session, store.Person, bool) {
	session, person, err := signin.Lookup(h.env, h.store, r)
	if errors.Is(err, signin.ErrNotSignedIn) {
		signin.JSONError(w, http.StatusUnauthorized, "not_signed_in", "You are not signed in any more. Sign in, then add the passkey.")
		return store.Session{}, store.Person{}, false
	}
	if err != nil {
		signin.JSONError(w, http.StatusServiceUnavailable, "unavailable", "This page cannot check who you are right now. Nothing was changed.")
		return store.Session{}, store.Person{}, false
	}
	if !signin.CheckHeaderCSRF(h.env, r) {
		signin.JSONError(w, http.StatusForbidden, "csrf", "This page has expired. Reload it and try again.")
		return store.Session{}, store.Person{}, false
	}
	return session, person, true
}

// mayEnrol checks, at each enrolment step, that this session may add a passkey now
// (mayChangePasskeys), and returns the person's passkeys and the relying party; otherwise it
// answers in JSON and returns false.
func (h *handler) mayEnrol(w http.ResponseWriter, r *http.Request, p *config.Project, session store.Session, person store.Person) ([]store.Passkey, *webauthn.WebAuthn, bool) {
	keys, err := h.store.ListPasskeys(r.Context(), p.Key, person.ID)
	if err != nil {
		h.passkeyInternal(w, p, err)
		return nil, nil, false
	}
	if l := mayChangePasskeys(p, session, keys, h.env.Now()); l != lacksNothing {
		h.notRecent(w, p, l)
		return nil, nil, false
	}
	rp, err := signin.RelyingParty(p)
	if err != nil {
		h.passkeyInternal(w, p, err)
		return nil, nil, false
	}
	return keys, rp, true
}

// passkeyOptions starts enrolling a passkey for the signed-in person.
func (h *handler) passkeyOptions(w http.ResponseWriter, r *http.Request) {
	p := site.Project(r)
	ctx := r.Context()
	session, person, ok := h.enrolling(w, r)
	if !ok {
		return
	}
	if !signin.PasskeysOffered(p) {
		signin.JSONError(w, http.StatusNotFound, "passkeys_off", "This project cannot use passkeys.")
		return
	}
	keys, rp, ok := h.mayEnrol(w, r, p, session, person)
	if !ok {
		return
	}
	user := signin.PasskeyUser{Person: person, Passkeys: keys}
	var exclude []protocol.CredentialDescriptor
	for _, c := range user.WebAuthnCredentials() {
		exclude = append(exclude, c.Descriptor())
	}
	opts, data, err := rp.BeginRegistration(user, webauthn.WithExclusions(exclude),
		webauthn.WithResidentKeyRequirement(protocol.ResidentKeyRequirementRequired))
	if err != nil {
		h.passkeyInternal(w, p, err)
		return
	}
	if err := signin.BeginCeremony(ctx, h.env, h.store, r, p, "enrol", person.ID, data); err != nil {
		h.passkeyInternal(w, p, err)
		return
	}
	signin.JSON(w, http.StatusOK, opts)
}

// passkeyAdd checks the browser's answer and stores the passkey. The ceremony was started for
// this person in this browser; the sign-in is checked again, as it may have aged meanwhile.
func (h *handler) passkeyAdd(w http.ResponseWriter, r *http.Request) {
	p := site.Project(r)
	ctx := r.Context()
	body := signin.ReadJSONBody(w, r)
	if body == nil {
		signin.JSONError(w, http.StatusBadRequest, "invalid_request", "Your browser's answer could not be read. Please try again.")
		return
	}
	session, person, ok := h.enrolling(w, r)
	if !ok {
		return
	}
	parsed, err := protocol.ParseCredentialCreationResponseBytes(body)
	if err != nil {
		signin.JSONError(w, http.StatusBadRequest, "invalid_request", "Your browser's answer could not be read. Please try again.")
		return
	}
	data, err := signin.FinishCeremony(ctx, h.env, h.store, r, p, "enrol", person.ID, parsed.Response.CollectedClientData.Challenge)
	if signin.IsNoCeremony(err) {
		signin.JSONError(w, http.StatusBadRequest, "expired", "Adding the passkey took too long or was already done. Please try again.")
		return
	}
	if err != nil {
		h.passkeyInternal(w, p, err)
		return
	}
	keys, rp, ok := h.mayEnrol(w, r, p, session, person)
	if !ok {
		return
	}
	cred, err := rp.CreateCredential(signin.PasskeyUser{Person: person, Passkeys: keys}, data, parsed)
	if err != nil {
		h.env.Logger.V(1).Info("passkey enrolment refused", "project", p.Key, "reason", err.Error())
		signin.JSONError(w, http.StatusBadRequest, "refused", "The passkey could not be added. Please try again.")
		return
	}
	name := "Passkey " + strconv.Itoa(len(keys)+1)
	now := h.env.Now()
	err = h.store.AddPasskey(ctx, signin.Passkey(p, person.ID, name, cred, now))
	if errors.Is(err, store.ErrConflict) {
		signin.JSONError(w, http.StatusBadRequest, "refused", "That passkey is already registered.")
		return
	}
	if err != nil {
		h.passkeyInternal(w, p, err)
		return
	}
	h.env.Record(ctx, store.AuditRecord{Project: p.Key, Actor: person.ID, Action: events.PasskeyAdded, Target: person.ID,
		Details: map[string]string{"credential_id": base64.RawURLEncoding.EncodeToString(cred.ID)}})
	signin.JSON(w, http.StatusOK, map[string]string{"continue": site.IssuerPath(p) + Path + "?done=passkey-added"})
}

// passkeyRemove removes one of the person's passkeys; a form, so it works without the script.
func (h *handler) passkeyRemove(w http.ResponseWriter, r *http.Request) {
	p, person, session, form, ok := h.action(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	keys, err := h.store.ListPasskeys(ctx, p.Key, person.ID)
	if err != nil {
		h.internal(w, p, err)
		return
	}
	switch mayChangePasskeys(p, session, keys, h.env.Now()) {
	case lacksNothing:
	case lacksPasskey:
		http.Redirect(w, r, signin.PasskeyURL(p, site.IssuerPath(p)+Path), http.StatusSeeOther)
		return
	case lacksProvider:
		// No passkey to remove.
		h.back(w, r, p, "")
		return
	default:
		http.Redirect(w, r, signin.URL(p, site.IssuerPath(p)+Path, true), http.StatusSeeOther)
		return
	}
	id, err := base64.RawURLEncoding.DecodeString(form.Get("credential_id"))
	if err != nil || len(id) == 0 {
		h.back(w, r, p, "")
		return
	}
	err = h.store.DeletePasskey(ctx, p.Key, person.ID, id)
	if errors.Is(err, store.ErrNotFound) {
		h.back(w, r, p, "")
		return
	}
	if err != nil {
		h.internal(w, p, err)
		return
	}
	h.env.Record(ctx, store.AuditRecord{Project: p.Key, Actor: person.ID, Action: events.PasskeyRemoved, Target: person.ID,
		Details: map[string]string{"credential_id": form.Get("credential_id")}})
	h.back(w, r, p, "passkey-removed")
}

func (h *handler) notRecent(w http.ResponseWriter, p *config.Project, l lack) {
	back := site.IssuerPath(p) + Path
	if l == lacksProvider {
		if o := p.SignIn.OIDC; o != nil && !o.Unavailable {
			signin.JSON(w, http.StatusForbidden, map[string]string{"error": "provider_required",
				"message": pages.Translate(w, msgFirstPasskeyProvider), "continue": signin.ProviderURL(p, back)})
			return
		}
		signin.JSONError(w, http.StatusForbidden, "provider_required", msgFirstPasskeyNoProvider)
		return
	}
	if l == lacksPasskey {
		signin.JSON(w, http.StatusForbidden, map[string]string{"error": "passkey_required",
			"message": pages.Translate(w, "This project asks for a sign-in with a passkey before passkeys are changed."), "continue": signin.PasskeyURL(p, back)})
		return
	}
	signin.JSON(w, http.StatusForbidden, map[string]string{"error": "not_recent", "message": pages.Translate(w, msgEnrolNotRecent),
		"continue": signin.URL(p, back, true)})
}

func (h *handler) passkeyInternal(w http.ResponseWriter, p *config.Project, err error) {
	h.env.Logger.Error(err, "passkey enrolment failed", "project", p.Key)
	signin.JSONError(w, http.StatusInternalServerError, "server_error", "Adding the passkey failed on our side. Please try again in a moment.")
}

package callback

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"golang.org/x/oauth2"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/webhook/pages"
	"latchkey.dev/latchkey/webhook/signin"
	"latchkey.dev/latchkey/webhook/site"
)

// Hook runs after a connection has been saved, with the state row it was started from (its
// Purpose and LinkID say why) and the stored connection. The connect-link flow uses one to let
// the link's agent use the connection and close the link. An error is logged and the person is
// told that the connection was saved but the rest did not finish; the connection stays.
type Hook func(ctx context.Context, p *config.Project, st store.CallbackState, conn store.Connection) error

const (
	maxFormBytes = 16 << 10
	maxParam     = 2048
)

type handler struct {
	env   *site.Env
	store Store
	vault *upstream.Vault
	hooks []Hook
	// http is the client for calls to services; nil means http.DefaultClient.
	http *http.Client
}

// Register mounts each connector's callback: GET receives the service's redirect, POST is the
// confirmation step. hooks run, in order, after each saved connection. The old shared callback
// only tells whoever arrives there to start again.
func Register(rt site.Router, env *site.Env, st Store, hooks ...Hook) {
	h := &handler{
		env:   env,
		store: st,
		vault: &upstream.Vault{Store: st, Keyring: env.Keyring, Now: env.Clock},
		hooks: hooks,
	}
	rt.Page("GET "+Pattern, http.HandlerFunc(h.get))
	rt.Page("POST "+Pattern, http.HandlerFunc(h.post))
	rt.Page("GET "+SharedStartPattern, http.HandlerFunc(h.sharedStartPage))
	rt.Page("POST "+SharedStartPattern, http.HandlerFunc(h.sharedStart))
	rt.Page("GET "+LegacyPath, http.HandlerFunc(h.legacy))
	rt.Page("POST "+LegacyPath, http.HandlerFunc(h.legacy))
}

// Errors a consume check returns; the row stays when one does.
var (
	errMismatch    = errors.New("callback: the browser does not hold this state's binding")
	errBadToken    = errors.New("callback: missing or wrong confirmation token")
	errWrongPerson = errors.New("callback: the browser is not signed in as the person who started")
	// errPersonGone: the project no longer lets the person sign in; nothing is saved for them.
	errPersonGone = errors.New("callback: the person can no longer sign in to the project")
)

// Audit actions the callback records besides connection.saved and connection.confirmed.
const (
	// ActionWrongPerson: a callback or confirmation arrived in a browser signed in as another
	// person than the one who started the attempt; nothing was saved and the attempt ended.
	// Details name both: owner (who started) and signed_in. It reports the security event
	// callback.other_person (internal/events).
	ActionWrongPerson = events.ConnectionWrongPerson
	// ActionEndedBySignOut: the person signed out with attempts pending; they were ended.
	ActionEndedBySignOut = events.ConnectionEndedBySignOut
)

// headers are set on every callback response whatever the middleware does: each carries a
// code, a state, a token or a person's masked address.
func headers(w http.ResponseWriter) {
	h := w.Header()
	pages.NoStore(h)
	h.Set("Referrer-Policy", "no-referrer")
	if h.Get("Content-Security-Policy") == "" {
		h.Set("Content-Security-Policy", pages.CSP)
	}
}

func (h *handler) get(w http.ResponseWriter, r *http.Request) {
	headers(w)
	if r.Method == http.MethodHead {
		// Link checkers and previews must not use up a state or replace a confirmation token.
		return
	}
	p := site.Project(r)
	q := r.URL.Query()
	// redirect_uri and anything else in the query is ignored: the code was issued for the
	// fixed callback and is exchanged for it.
	for _, k := range []string{"state", "code", "error", "iss"} {
		if len(q[k]) > 1 {
			h.invalid(w, p)
			return
		}
	}
	if !h.checkIssuer(w, r, p, q) {
		return
	}
	state := q.Get("state")
	if e := q.Get("error"); e != "" {
		h.upstreamError(w, r, p, state, e)
		return
	}
	code := q.Get("code")
	at, ok := h.findAttempt(w, r, p, state, code)
	if !ok {
		return
	}
	if at.shared {
		h.sharedCallback(w, r, p, at, code)
		return
	}
	ctx := r.Context()
	if binding := readBinding(r, h.env); binding != "" && secret.HashEqual(binding, at.st.BindingHash) {
		// The browser that started. Its sign-in was recent when it did (both ways of starting
		// ask for that), so only who is signed in now matters: signing out ends the attempt,
		// and any other sign-in since was refused above.
		if !at.here.signedIn {
			h.signInFirst(w, r, p, at.c, at.st, http.StatusOK, r.URL.RequestURI(), false, false)
			return
		}
		h.finish(w, r, p, at.c, at.stateHash, code, events.ConnectionSaved, true, func(s store.CallbackState) error {
			if s.Project != p.Key || !secret.HashEqual(binding, s.BindingHash) {
				return errMismatch
			}
			return samePerson(s, at.here)
		})
		return
	}

	// Another browser (or none of our cookie): show who would receive the connection and stop.
	// Only a browser signed in recently as that person gets the form that finishes it.
	reason := "no_cookie"
	if _, err := r.Cookie(CookieName(h.env)); err == nil {
		reason = "other_cookie"
	}
	if ok, needPasskey := at.here.recent(h.env, p); !ok {
		signIn := "required"
		if needPasskey {
			signIn = "passkey_required"
		}
		h.record(ctx, p, at.st, events.ConnectionConfirmationShown, "connector:"+at.c.Key, map[string]string{"reason": reason, "sign_in": signIn})
		h.signInFirst(w, r, p, at.c, at.st, http.StatusOK, r.URL.RequestURI(), at.here.signedIn, needPasskey)
		return
	}
	token := secret.New("")
	if err := h.store.SetConfirmHash(ctx, at.stateHash, confirmHash(token, code), h.env.Now()); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			h.expired(w, p)
			return
		}
		h.internal(w, p, err)
		return
	}
	h.record(ctx, p, at.st, events.ConnectionConfirmationShown, "connector:"+at.c.Key, map[string]string{"reason": reason})
	h.env.Pages.ConnectConfirm(w, http.StatusOK, pages.ConnectConfirmData{
		// Not SignedInAs: the page names its person only masked, wherever it is shown.
		Frame:   pages.Frame{Title: "Finish this connection?", Project: signin.ProjectName(p)},
		Service: serviceName(at.c),
		Account: h.maskedOwner(ctx, p, at.st.Subject),
		Action:  ConnectorPath(p, at.c),
		Code:    code,
		State:   state,
		Token:   token,
		Iss:     q.Get("iss"),
	})
}

func (h *handler) post(w http.ResponseWriter, r *http.Request) {
	headers(w)
	p := site.Project(r)
	form, ok := h.readForm(w, r, p)
	if !ok {
		return
	}
	state, code, token := form.Get("state"), form.Get("code"), form.Get("confirm_token")
	at, ok := h.findAttempt(w, r, p, state, code)
	if !ok {
		return
	}
	ctx := r.Context()
	if at.shared {
		// A shared connection has no confirmation page: it finishes in the browser that
		// opened its start address, on the GET, or nowhere.
		h.record(ctx, p, at.st, events.SharedConnectionRefused, "connector:"+at.c.Key, map[string]string{"reason": "confirmation"})
		h.refused(w, p)
		return
	}
	if len(token) > maxParam || !checkToken(token, code, at.st) {
		// The row stays: a forged or stale POST must not cost the genuine person their
		// attempt. Guessing is hopeless (256-bit tokens) and the row dies with the state.
		h.record(ctx, p, at.st, events.ConnectionConfirmationRefused, "connector:"+at.c.Key, map[string]string{"reason": "bad_token"})
		h.refused(w, p)
		return
	}
	if ok, needPasskey := at.here.recent(h.env, p); !ok {
		// Signed out, or the sign-in grew old, since the page was shown (or, where the project
		// requires a passkey, it was never one: the form is shown only after a passkey sign-in,
		// but a POST needs no form). The token stays good until the page is shown again after
		// signing in, which replaces it.
		back := url.Values{"state": {state}, "code": {code}}
		if iss := form.Get("iss"); iss != "" && len(iss) <= maxParam {
			// The GET that showed the form passed the issuer check with it; the GET that
			// sign-in comes back to checks it again.
			back.Set("iss", iss)
		}
		h.signInFirst(w, r, p, at.c, at.st, http.StatusForbidden, r.URL.Path+"?"+back.Encode(), at.here.signedIn, needPasskey)
		return
	}
	h.finish(w, r, p, at.c, at.stateHash, code, events.ConnectionConfirmed, false, func(s store.CallbackState) error {
		if s.Project != p.Key {
			return errMismatch
		}
		if !checkToken(token, code, s) {
			return errBadToken
		}
		return samePerson(s, at.here)
	})
}

// attempt is the connection attempt a callback's state names, and who the browser is signed
// in as.
type attempt struct {
	stateHash []byte
	st        store.CallbackState
	c         *config.Connector
	here      here
	// shared: the attempt connects an Organisation connector's shared account
	// (sharedCallback); who the browser is signed in as plays no part.
	shared bool
}

// findAttempt checks a callback's state and code, finds the attempt the state names and who the
// browser is signed in as, in that order for the GET and the confirming POST alike: before
// any token is checked, a browser signed in as another person is refused (whoIsHere), whatever
// page it was shown. It answers the request itself and reports false when a step fails.
func (h *handler) findAttempt(w http.ResponseWriter, r *http.Request, p *config.Project, state, code string) (attempt, bool) {
	if !param(state) || !param(code) {
		h.invalid(w, p)
		return attempt{}, false
	}
	at := attempt{stateHash: secret.Hash(state)}
	var ok bool
	if at.st, at.c, ok = h.lookup(w, r, p, at.stateHash); !ok {
		return at, false
	}
	if store.IsSharedSubject(at.st.Subject) {
		at.shared = true
		return at, true
	}
	at.here, ok = h.whoIsHere(w, r, p, at.c, at.stateHash, at.st)
	return at, ok
}

// here is who the browser is signed in to the project as, when a callback request arrives.
type here struct {
	signedIn bool
	session  store.Session
	person   store.Person
}

// recent reports whether the browser is signed in, and signed in within the project's
// recent-sign-in window, with a passkey where the project requires a phishing-resistant
// sign-in (needPasskey then says that is what is missing): what connecting asks for wherever
// it starts (a connect link's check 4, the account page's Connect), and so what finishing in a
// browser that did not start asks for.
func (x here) recent(env *site.Env, p *config.Project) (ok, needPasskey bool) {
	if !x.signedIn {
		return false, false
	}
	return signin.Recent(p, x.session, env.Now())
}

// samePerson is part of every check a connection is saved under (it runs as the row is
// consumed): the row's person is the one signed in when the request arrived.
func samePerson(s store.CallbackState, x here) error {
	if !x.signedIn || x.person.ID != s.Subject {
		return errWrongPerson
	}
	return nil
}

// whoIsHere finds who the browser is signed in to the project as. A browser signed in as
// another person than the one the attempt was started for is refused here, whatever cookie it
// holds and whatever page it was shown (wrongPerson), and a store that cannot say who is signed
// in gets the pages' 503, never a page that could finish; both answer the request and report
// false. Signed in as nobody, or only to another project, is not refused: the caller asks for
// a sign-in as the right person before anything is saved.
func (h *handler) whoIsHere(w http.ResponseWriter, r *http.Request, p *config.Project, c *config.Connector, stateHash []byte, st store.CallbackState) (here, bool) {
	session, person, err := signin.Lookup(h.env, h.store, r)
	switch {
	case errors.Is(err, signin.ErrNotSignedIn):
		return here{}, true
	case err != nil:
		signin.Unavailable(h.env, w, r)
		return here{}, false
	case person.ID != st.Subject:
		h.wrongPerson(w, r, p, c, stateHash, st, person)
		return here{}, false
	}
	return here{signedIn: true, session: session, person: person}, true
}

// wrongPerson refuses a callback in a browser signed in as another person than the one who
// started the attempt, and ends the attempt so its code finishes nowhere. Either that browser
// holds someone else's authorization URL (forwarded to a colleague who is signed in here), or
// someone else signed in where the person started and approved at the service with their own
// account. It cannot be the person's app path in either case.
func (h *handler) wrongPerson(w http.ResponseWriter, r *http.Request, p *config.Project, c *config.Connector, stateHash []byte, st store.CallbackState, person store.Person) {
	ctx := r.Context()
	if _, err := h.store.ConsumeCallbackState(ctx, stateHash, h.env.Now(), func(s store.CallbackState) error {
		if s.Project != p.Key || s.Subject != st.Subject {
			return errMismatch
		}
		return nil
	}); err != nil {
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, errMismatch) {
			// Finished or ended meanwhile: say what any late arrival is told.
			h.expired(w, p)
			return
		}
		h.internal(w, p, err)
		return
	}
	browser := "other"
	if b := readBinding(r, h.env); b != "" && secret.HashEqual(b, st.BindingHash) {
		// The browser that started: someone else signed in there since.
		browser = "same"
		clearBinding(w, h.env, p, c)
	}
	h.record(ctx, p, st, ActionWrongPerson, "connector:"+c.Key, map[string]string{
		"owner": st.Subject, "signed_in": person.ID, "browser": browser, "state": stateDigest(stateHash),
	})
	h.env.Pages.Message(w, http.StatusForbidden, pages.MessageData{
		Frame:   pages.Frame{Title: "This connection is not yours", Project: signin.ProjectName(p), SignedInAs: signin.DisplayName(person)},
		Heading: "This connection is not yours",
		Paragraphs: []string{
			pages.T(w, "This %s connection was started by the account %s, not by the account you are signed in with. It is not yours to finish.",
				serviceName(c), h.maskedOwner(ctx, p, st.Subject)),
			"Nothing was saved, and this connection attempt has ended. You can close this window.",
		},
	})
}

// signInFirst answers a callback or confirmation that would finish a connection in a browser
// not signed in (recently) as the person who started it. Nothing is exchanged or consumed: the
// page names the receiving account, masked, and offers the project's sign-in, which returns to
// back (this callback's own path with the state and code, never anywhere else) while the state
// lives. Only the right person, signed in, gets further; anyone else who signs in is refused as
// the wrong person and the attempt ends. With passkey, the sign-in offered is one with a
// passkey (the project requires a phishing-resistant sign-in, and the browser has another).
func (h *handler) signInFirst(w http.ResponseWriter, r *http.Request, p *config.Project, c *config.Connector, st store.CallbackState, status int, back string, again, passkey bool) {
	if _, ok := signin.SafeReturn(p, back); !ok {
		// A state and code too long to come back with: they could not be real.
		h.invalid(w, p)
		return
	}
	h.env.Pages.ConnectConfirm(w, status, pages.ConnectConfirmData{
		Frame:    pages.Frame{Title: "Finish this connection?", Project: signin.ProjectName(p)},
		Service:  serviceName(c),
		Account:  h.maskedOwner(r.Context(), p, st.Subject),
		SignIn:   site.IssuerPath(p) + "/sign-in",
		ReturnTo: back,
		Again:    again || passkey,
		Passkey:  passkey,
	})
}

// confirmHash is what the row keeps of a confirmation token. The code shown with the token is
// bound into it, so a token confirms only the code it was rendered with.
func confirmHash(token, code string) []byte { return secret.Hash(token + "\x00" + code) }

func checkToken(token, code string, st store.CallbackState) bool {
	return token != "" && len(st.ConfirmHash) > 0 && secret.HashEqual(token+"\x00"+code, st.ConfirmHash)
}

// lookup finds the live state row of this project and of the connector whose callback this is,
// or answers the request. A state started for another connector gets the page of an unknown one
// and stays as it is: its code must never reach this connector's token endpoint, and a stranger
// must not be able to end someone else's attempt.
func (h *handler) lookup(w http.ResponseWriter, r *http.Request, p *config.Project, stateHash []byte) (store.CallbackState, *config.Connector, bool) {
	ctx := r.Context()
	st, err := h.store.GetCallbackState(ctx, stateHash, h.env.Now())
	if errors.Is(err, store.ErrNotFound) || (err == nil && (st.Project != p.Key || st.Connector != pathConnector(r))) {
		h.expired(w, p)
		return st, nil, false
	}
	if err != nil {
		h.internal(w, p, err)
		return st, nil, false
	}
	c := p.Connectors[st.Connector]
	if c == nil {
		// The connector was removed while the person was away: end the attempt.
		// The page below is the answer either way; a row left behind expires on its own.
		if _, err := h.store.ConsumeCallbackState(ctx, stateHash, h.env.Now(), nil); err != nil && !errors.Is(err, store.ErrNotFound) {
			h.env.Log(r.Context()).Error(err, "cannot end the attempt of a removed connector", "project", p.Key, "connector", st.Connector)
		}
		h.page(w, p, http.StatusGone, "This service is no longer available",
			"The service you were connecting has been removed from this project. Nothing was connected. You can close this window.")
		return st, nil, false
	}
	return st, c, true
}

// finish consumes the state row (once, and only if check passes), exchanges the code, saves the
// connection under the person recorded with the state and runs the hooks.
//
//nolint:funlen // the steps of finishing a connection (consume the state, exchange the code, check the person, save, run the hooks) must run in this order, and the order is the security argument
func (h *handler) finish(w http.ResponseWriter, r *http.Request, p *config.Project, c *config.Connector, stateHash []byte, code, action string, sameBrowser bool, check func(store.CallbackState) error) {
	ctx := r.Context()
	now := h.env.Now()
	st, err := h.store.ConsumeCallbackState(ctx, stateHash, now, check)
	switch {
	case errors.Is(err, store.ErrNotFound):
		h.expired(w, p)
		return
	case errors.Is(err, errBadToken):
		h.record(ctx, p, st, events.ConnectionConfirmationRefused, "connector:"+c.Key, map[string]string{"reason": "bad_token"})
		h.refused(w, p)
		return
	case errors.Is(err, errMismatch), errors.Is(err, errWrongPerson):
		// errWrongPerson cannot happen after whoIsHere passed (a row never changes its
		// person); the check only makes sure no row is ever consumed for anyone else.
		h.expired(w, p)
		return
	case err != nil:
		h.internal(w, p, err)
		return
	}
	verifier, err := h.env.Keyring.Open(verifierPurpose(p.Key, stateHash), st.KeyID, st.Verifier)
	if err != nil {
		h.internal(w, p, err)
		return
	}
	if !c.PKCE {
		verifier = nil
	}
	acct, tok, err := upstream.Exchange(upstream.WithClock(ctx, h.env.Clock), h.http, c, code, string(verifier))
	if err != nil {
		h.exchangeFailed(w, r, p, c, st, err)
		return
	}
	conn := store.Connection{
		ID:          secret.NewID(),
		Project:     p.Key,
		Subject:     st.Subject,
		Connector:   c.Key,
		AccountID:   acct.ID,
		AccountName: acct.Name,
		Status:      store.ConnectionActive,
		CreatedAt:   now,
		UpdatedAt:   now,
	}
	h.vault.Seal(&conn, tok)
	if store.IsSharedSubject(st.Subject) {
		h.saveShared(w, r, p, c, st, conn, map[string]string{
			"connector": c.Key, "purpose": st.Purpose, "state": stateDigest(stateHash), "browser": "same",
		})
		return
	}
	// The person is checked again where the connection is saved, in the same transaction: the
	// exchange with the service takes time, and a person whose access ended meanwhile (by the
	// store, or by the project's sign-in as published now) must not come back with a
	// connection (docs/leavers.md).
	saved, err := h.store.FinishConnection(ctx, conn, st.CreatedAt, func(person store.Person) error {
		if cur := h.env.Config.Load().Project(p.Key); cur == nil || !site.PersonActive(cur, person) {
			return errPersonGone
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrAccessEnded) || errors.Is(err, errPersonGone) {
		// The service's token is dropped unsaved; it was never handed to anyone.
		h.record(ctx, p, st, events.ConnectionFailed, "connector:"+c.Key, map[string]string{"reason": "access_ended"})
		h.page(w, p, http.StatusForbidden, "This connection was not finished",
			"Your access to this project has ended. Nothing was connected.")
		return
	}
	if err != nil {
		h.internal(w, p, err)
		return
	}
	details := map[string]string{
		"connector": c.Key, "account": saved.AccountName, "account_id": saved.AccountID,
		"purpose": st.Purpose, "owner": st.Subject, "state": stateDigest(stateHash),
	}
	if st.LinkID != "" {
		details["link_id"] = st.LinkID
	}
	if sameBrowser {
		details["browser"] = "same"
	} else {
		details["browser"] = "confirmed"
	}
	h.record(ctx, p, st, action, "connection:"+saved.ID, details)

	hookFailed := false
	for _, hook := range h.hooks {
		if err := hook(ctx, p, st, saved); err != nil {
			hookFailed = true
			h.env.Log(r.Context()).Error(err, "connection hook failed", "project", p.Key, "connection", saved.ID)
		}
	}
	if b := readBinding(r, h.env); b != "" && secret.HashEqual(b, st.BindingHash) {
		clearBinding(w, h.env, p, c)
	}
	h.connected(w, p, c, st, saved, hookFailed)
}

// exchangeFailed ends an attempt the service did not accept. The state is already gone, so
// the person starts again.
func (h *handler) exchangeFailed(w http.ResponseWriter, r *http.Request, p *config.Project, c *config.Connector, st store.CallbackState, err error) {
	reason := "service"
	status := http.StatusBadGateway
	var re *oauth2.RetrieveError
	switch {
	case errors.Is(err, upstream.ErrNotAllowed):
		reason = "address_not_allowed"
	case errors.Is(err, upstream.ErrTimeout):
		reason, status = "timeout", http.StatusGatewayTimeout
	case errors.Is(err, upstream.ErrTenant):
		reason, status = "tenant_not_allowed", http.StatusForbidden
	case errors.Is(err, upstream.ErrIssuer):
		reason, status = "wrong_issuer", http.StatusBadRequest
	case errors.As(err, &re) && (re.ErrorCode == "bad_verification_code" || re.ErrorCode == "invalid_grant"):
		// A code that is wrong, expired or already used is the request's fault, not ours.
		reason, status = "bad_code", http.StatusBadRequest
	}
	// The service's status and OAuth error code only: its body and error_description can carry
	// anything, a secret echoed back included.
	upstreamStatus, upstreamCode := upstream.Status(err)
	h.env.Log(r.Context()).Info("upstream code exchange failed", "project", p.Key, "connector", c.Key, "reason", reason,
		"upstream_status", upstreamStatus, "upstream_error", upstreamCode)
	h.record(r.Context(), p, st, events.ConnectionFailed, "connector:"+c.Key, map[string]string{"reason": reason})
	name := serviceName(c)
	if reason == "tenant_not_allowed" {
		h.page(w, p, status, pages.T(w, "%s accounts of this organisation cannot be connected here", name),
			"This connector admits accounts of some organisations only, and yours is not one of them. Nothing was connected. Sign in to the service with another account, or ask whoever runs this project.")
		return
	}
	if reason == "address_not_allowed" {
		h.page(w, p, status, pages.T(w, "%s cannot be reached from here", name),
			"This service's address is not one this server may call, so nothing was sent to it and nothing was connected. "+
				"Tell whoever runs this project: the connector's endpoints must be public addresses, or the project must allow theirs.")
		return
	}
	h.page(w, p, status, pages.T(w, "%s did not complete the connection", name),
		"Nothing was connected. Start again from your account page, or ask the agent for a new link.")
}

func (h *handler) connected(w http.ResponseWriter, p *config.Project, c *config.Connector, st store.CallbackState, conn store.Connection, hookFailed bool) {
	name := serviceName(c)
	back := pages.T(w, "Go back to the app — you can close this window.")
	if st.LinkID != "" {
		back = pages.T(w, "Go back to your agent — you can close this window.")
	}
	paras := []string{pages.T(w, "Your %s account %s is now connected.", name, conn.AccountName)}
	if hookFailed {
		paras = append(paras, pages.T(w, "The connection is saved, but letting the agent use it did not finish. Ask the agent to try again."))
	}
	paras = append(paras, back)
	d := pages.MessageData{
		Frame:      pages.Frame{Title: "Connected", Project: signin.ProjectName(p)},
		Heading:    "Connected",
		Paragraphs: paras,
	}
	if st.LinkID == "" {
		// Our own fixed page, shown as a link: the result never sends the browser anywhere.
		d.Actions = []pages.Action{{Label: "Your account", URL: site.IssuerPath(p) + "/account"}}
	}
	h.env.Pages.Message(w, http.StatusOK, d)
}

// upstreamError ends an attempt the service reports as failed (access_denied when the person
// declined). Only known codes change the wording: error_description is the sender's text and
// never shown.
func (h *handler) upstreamError(w http.ResponseWriter, r *http.Request, p *config.Project, state, code string) {
	name := pages.T(w, "The service")
	if param(state) {
		stateHash := secret.Hash(state)
		st, err := h.store.ConsumeCallbackState(r.Context(), stateHash, h.env.Now(), func(s store.CallbackState) error {
			if s.Project != p.Key || s.Connector != pathConnector(r) {
				return errMismatch
			}
			return nil
		})
		if err == nil {
			if c := p.Connectors[st.Connector]; c != nil {
				name = serviceName(c)
			}
			h.record(r.Context(), p, st, events.ConnectionCancelled, "connector:"+st.Connector, map[string]string{"error": upstream.ErrorCode(code)})
		}
	}
	if code == "access_denied" {
		h.page(w, p, http.StatusOK, "Nothing was connected",
			pages.T(w, "%s says the connection was not allowed, so nothing was connected. You can close this window.", name))
		return
	}
	h.page(w, p, http.StatusOK, "Nothing was connected",
		pages.T(w, "%s could not complete the connection, so nothing was connected. Start again from your account page, or ask the agent for a new link.", name))
}

func (h *handler) record(ctx context.Context, p *config.Project, st store.CallbackState, action, target string, details map[string]string) {
	if details == nil {
		details = map[string]string{}
	}
	if _, ok := details["connector"]; !ok {
		details["connector"] = st.Connector
	}
	if _, ok := details["purpose"]; !ok && st.Purpose != "" {
		details["purpose"] = st.Purpose
	}
	if _, ok := details["link_id"]; !ok && st.LinkID != "" {
		details["link_id"] = st.LinkID
	}
	// The person recorded with the state is the actor: every connection is saved for them, and
	// only while their browser is signed in as them.
	h.env.Record(ctx, store.AuditRecord{Project: p.Key, Time: h.env.Now(), Actor: st.Subject, Action: action, Target: target, Details: details})
}

func (h *handler) maskedOwner(ctx context.Context, p *config.Project, subject string) string {
	person, err := h.store.GetPerson(ctx, p.Key, subject)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			h.env.Log(ctx).Error(err, "cannot read person", "project", p.Key)
		}
		return "***"
	}
	if person.Email != "" {
		return Mask(person.Email)
	}
	return Mask(person.Name)
}

// Mask shows an email address by its first character and its domain only ("a***@example.com"),
// and anything else by its first character.
func Mask(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return "***"
	}
	first, _ := utf8.DecodeRuneInString(s)
	if at := strings.LastIndexByte(s, '@'); at > 0 && at < len(s)-1 {
		return string(first) + "***" + s[at:]
	}
	return string(first) + "***"
}

func serviceName(c *config.Connector) string {
	if c.DisplayName != "" {
		return c.DisplayName
	}
	return c.Name
}

// param accepts a state or code of sane length.
func param(s string) bool { return s != "" && len(s) <= maxParam }

func (h *handler) readForm(w http.ResponseWriter, r *http.Request, p *config.Project) (url.Values, bool) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		h.invalid(w, p)
		return nil, false
	}
	for _, v := range r.PostForm {
		if len(v) > 1 {
			h.invalid(w, p)
			return nil, false
		}
	}
	return r.PostForm, true
}

func (h *handler) page(w http.ResponseWriter, p *config.Project, status int, heading, text string) {
	h.env.Pages.Message(w, status, pages.MessageData{
		Frame:      pages.Frame{Title: heading, Project: signin.ProjectName(p)},
		Heading:    heading,
		Paragraphs: []string{text},
	})
}

func (h *handler) invalid(w http.ResponseWriter, p *config.Project) {
	h.page(w, p, http.StatusBadRequest, "This connection cannot be finished",
		"The address is incomplete. Nothing was connected. Start again from your account page, or ask the agent for a new link.")
}

// expired covers unknown, expired, used and foreign states alike, so the page says nothing
// about which states exist.
func (h *handler) expired(w http.ResponseWriter, p *config.Project) {
	h.page(w, p, http.StatusBadRequest, "This connection cannot be finished",
		"It has expired or has already been used. Nothing was connected. Start again from your account page, or ask the agent for a new link.")
}

func (h *handler) refused(w http.ResponseWriter, p *config.Project) {
	h.page(w, p, http.StatusForbidden, "This connection was not finished",
		"The confirmation did not come from the page we showed, or that page has been replaced. Nothing was connected. If you started this connection, open the confirmation page again and use its button.")
}

func (h *handler) internal(w http.ResponseWriter, p *config.Project, err error) {
	h.env.ResponseLog(w).Error(err, "connector callback failed", "project", p.Key)
	h.page(w, p, http.StatusInternalServerError, "Something went wrong",
		"The connection could not be finished because of a problem on our side. Nothing was connected. Please start again in a moment.")
}

// Package signin is how people sign in to a project: the project's own sign-in page with a
// password file and/or the company's OpenID Connect provider, server-side sessions, and the
// helpers later flows use to ask "who is this, and did they sign in recently?" (Current,
// RequireFresh, Redirect, CSRFToken).
package signin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/sync/singleflight"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/metrics"
	"latchkey.dev/latchkey/internal/ratelimit"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/pages"
	"latchkey.dev/latchkey/webhook/site"
)

// Sign-in attempt limits (token buckets, per replica). They slow attempts down, never lock
// anyone out: an empty bucket answers 429 with Retry-After, and the right password is accepted
// once the wait is over. Successful attempts are refunded.
var (
	// AccountBurst attempts per account from one client address, then one more every
	// AccountEvery. Keyed on both, so someone guessing at alice's password from one address
	// does not slow alice down at another.
	AccountBurst = 5
	AccountEvery = 20 * time.Second
	// AddressBurst attempts per client address across accounts, then one more every
	// AddressEvery. The address is the peer, or what a trusted proxy says (site.Env
	// ClientAddress); when no proxy is configured as trusted, everyone behind an ingress
	// shares its address, hence the large budget.
	AddressBurst = 60
	AddressEvery = time.Second
	// PasskeyBurst requests of the passkey sign-in ceremony (options and answers alike) per
	// client address, then one more every PasskeyEvery. Each options request stores a
	// challenge and each answer is a signature check: without a limit, one client could make
	// the database and the CPU do either as fast as it can send.
	PasskeyBurst = 60
	PasskeyEvery = time.Second
	// LogoutBurst back-channel logout requests per client address, then one more every
	// LogoutEvery. A logout token that verifies is refunded, so a provider ending many
	// sessions at once (a mass disablement) is not slowed down; tokens that fail to verify,
	// whose checks may make Latchkey fetch the provider's keys, spend the budget.
	LogoutBurst = 100
	LogoutEvery = 100 * time.Millisecond
)

const (
	csrfCookie   = "signin_csrf"
	maxFormBytes = 16 << 10
)

// Messages are identical for a wrong password and an unknown person, so the page does not say
// which accounts exist.
const (
	msgWrong    = "That email and password do not match. Check them and try again."
	msgExpired  = "This sign-in form has expired. Please try again."
	msgUpstream = "Signing in with your organisation did not complete. Please try again."
	// msgPasswordsOff answers a password form posted while the project's password file is
	// unavailable (its Secret is missing or does not parse).
	msgPasswordsOff = "Password sign-in is unavailable right now. Please try again later."
)

type handler struct {
	env        *site.Env
	store      Store
	perAccount *ratelimit.Limiter // by account and client address
	perAddress *ratelimit.Limiter
	passkeys   *ratelimit.Limiter // passkey ceremony requests by client address
	logouts    *ratelimit.Limiter // back-channel logout requests by client address
	providers  *providers
	onSignOut  []SignOutHook
	// recheck shares one question to the provider among concurrent refreshes of one person.
	recheck singleflight.Group
}

// SignOutHook runs when a browser signs out of project p, before its session ends, with the
// person who was signed in ("" when nobody was). A flow whose pending steps belong to that
// sign-in ends them here, and may clear its own cookies on w. An error fails the sign-out
// (the person stays signed in and can try again), so nothing outlives a sign-out that
// succeeded.
type SignOutHook func(ctx context.Context, w http.ResponseWriter, p *config.Project, subject string) error

// Register mounts /sign-in, the upstream sign-in start and callback, the back-channel logout
// endpoint, and /sign-out. onSignOut run, in order, on every sign-out. It returns the re-check
// of people at the project's OpenID provider, for site.Env.CheckPerson.
func Register(rt site.Router, env *site.Env, st Store, onSignOut ...SignOutHook) func(ctx context.Context, p *config.Project, person store.Person, now time.Time) error {
	h := &handler{
		env:        env,
		store:      st,
		perAccount: ratelimit.New(AccountBurst, AccountEvery).Share(env.RateBuckets, "signin.account"),
		perAddress: ratelimit.New(AddressBurst, AddressEvery).Share(env.RateBuckets, "signin.address"),
		passkeys:   ratelimit.New(PasskeyBurst, PasskeyEvery).Share(env.RateBuckets, "signin.passkey.address"),
		logouts:    ratelimit.New(LogoutBurst, LogoutEvery).Share(env.RateBuckets, "backchannel_logout.address"),
		providers:  newProviders(env.Now),
		onSignOut:  onSignOut,
	}
	rt.Page("GET /sign-in", http.HandlerFunc(h.page))
	rt.Page("POST /sign-in", http.HandlerFunc(h.submit))
	rt.Page("GET /sign-in/oidc", http.HandlerFunc(h.oidcStart))
	rt.Page("GET /sign-in/callback", http.HandlerFunc(h.oidcCallback))
	rt.Page("GET /sign-out", http.HandlerFunc(h.signOutPage))
	rt.Page("POST /sign-out", http.HandlerFunc(h.signOut))
	// Called by the provider, server to server: no cookies, JSON errors.
	rt.API(BackchannelLogoutPath, http.HandlerFunc(h.backchannelLogout))
	h.registerPasskeys(rt)
	return h.checkPerson
}

func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	p := site.Project(r)
	q := r.URL.Query()
	returnTo, ok := SafeReturn(p, q.Get("return_to"))
	if !ok {
		returnTo = DefaultReturn(p)
	}
	again := q.Get("prompt") == "login"
	if !again {
		if _, _, ok := Current(h.env, h.store, r); ok {
			http.Redirect(w, r, returnTo, http.StatusSeeOther)
			return
		}
	}
	h.form(w, r, p, http.StatusOK, pages.SignInData{ReturnTo: returnTo, Again: again, Recent: q.Get("recent") == "1"})
}

// form renders the sign-in page with a double-submit anti-forgery token: nobody is signed in
// yet, so the token lives in its own cookie.
func (h *handler) form(w http.ResponseWriter, r *http.Request, p *config.Project, status int, d pages.SignInData) {
	tok := ReadCookie(r, h.env, p, csrfCookie)
	if len(tok) != 43 {
		tok = secret.New("")
		SetCookie(w, h.env, p, csrfCookie, tok, 0)
	}
	base := site.IssuerPath(p)
	d.Project = projectName(p)
	d.Action = base + "/sign-in"
	d.CSRF = tok
	d.Passwords = len(p.SignIn.Passwords) > 0
	// Said once: a refused password form already carries it as the error.
	d.PasswordsUnavailable = p.SignIn.PasswordsUnavailable && d.Error != msgPasswordsOff
	if o := p.SignIn.OIDC; o != nil && o.Unavailable {
		d.OIDCUnavailable = true
	} else if o != nil {
		q := url.Values{"return_to": {d.ReturnTo}}
		if d.Again {
			q.Set("prompt", "login")
		} else if d.Recent {
			q.Set("recent", "1")
		}
		d.OIDCURL = base + "/sign-in/oidc?" + q.Encode()
		d.OIDCLabel = o.Label
	}
	h.passkeyForm(w, r, p, &d)
	h.env.Pages.SignIn(w, status, d)
}

func (h *handler) submit(w http.ResponseWriter, r *http.Request) {
	p := site.Project(r)
	form, ok := readForm(h.env, w, r)
	if !ok {
		return
	}
	returnTo, ok := SafeReturn(p, form.Get("return_to"))
	if !ok {
		returnTo = DefaultReturn(p)
	}
	username := strings.ToLower(strings.TrimSpace(form.Get("username")))
	d := pages.SignInData{ReturnTo: returnTo, Username: username, Again: form.Get("again") == "1", Recent: form.Get("recent") == "1"}
	if !sameToken(ReadCookie(r, h.env, p, csrfCookie), form.Get("csrf_token")) {
		d.Error = msgExpired
		h.form(w, r, p, http.StatusForbidden, d)
		return
	}
	if p.SignIn.PasswordsUnavailable {
		// The form was loaded before the file broke. Show it again with the other ways in.
		d.Error = msgPasswordsOff
		h.form(w, r, p, http.StatusServiceUnavailable, d)
		return
	}
	if len(p.SignIn.Passwords) == 0 {
		h.env.Pages.Error(w, http.StatusBadRequest, pages.ErrorData{
			Frame:   pages.Frame{Title: "Password sign-in is off", Project: projectName(p)},
			Message: "This project does not use passwords. Go back and choose another way to sign in.",
		})
		return
	}
	now := h.env.Now()
	addr := p.Key + "|" + h.env.ClientAddress(r)
	// Emails are at most 254 characters; a longer name shares its bucket with its prefix
	// rather than growing the limiter's memory with the form's size.
	acct := addr + "|" + username[:min(len(username), 320)]
	if ok, wait := h.perAddress.Take(r.Context(), addr, now); !ok {
		h.tooMany(w, r, p, d, wait)
		return
	}
	if ok, wait := h.perAccount.Take(r.Context(), acct, now); !ok {
		h.perAddress.Refund(r.Context(), addr, now)
		h.tooMany(w, r, p, d, wait)
		return
	}
	user, known := p.SignIn.Passwords[username]
	if !known || !verifyPassword(user.Hash, form.Get("password")) {
		if !known {
			// Spend the same time on an unknown person as on a wrong password.
			dummyVerify(p, form.Get("password"))
		}
		h.failed(r, p, "password", username, known)
		d.Error = msgWrong
		h.env.Metrics.SignIn(p.Key, metrics.SignInPassword, metrics.SignInRefused)
		h.form(w, r, p, http.StatusOK, d)
		return
	}
	h.perAccount.Refund(r.Context(), acct, now)
	h.perAddress.Refund(r.Context(), addr, now)
	person, err := h.store.UpsertPerson(r.Context(), store.Person{
		Project:       p.Key,
		ID:            secret.NewID(),
		Source:        "password",
		SourceSubject: username,
		Email:         user.Email,
		Name:          user.Name,
		CreatedAt:     now,
	})
	if err != nil {
		h.internal(w, p, err)
		return
	}
	if err := start(r.Context(), h.env, h.store, w, r, p, person, now, ""); err != nil {
		h.internal(w, p, err)
		return
	}
	h.continueTo(w, p, person, returnTo)
}

// failed records a refused password sign-in. Never the password; and an unknown name only as
// a digest, since people sometimes type a password into the name field. Attempts over the rate
// limit are not recorded: the limit is what bounds how many records an attacker can cause.
func (h *handler) failed(r *http.Request, p *config.Project, method, username string, known bool) {
	details := map[string]string{"method": method}
	reason := "bad_password"
	if known {
		details["username"] = username
	} else {
		reason = "unknown_person"
		sum := sha256.Sum256([]byte(p.Key + "\x00" + username))
		details["username_digest"] = hex.EncodeToString(sum[:8])
	}
	h.env.Record(r.Context(), store.AuditRecord{
		Project: p.Key, Actor: "anonymous", Action: events.SignInFailed, Reason: reason, Details: details,
	})
}

// tooMany answers an attempt over the limit: the form again, 429, and how long to wait.
func (h *handler) tooMany(w http.ResponseWriter, r *http.Request, p *config.Project, d pages.SignInData, wait time.Duration) {
	h.env.Metrics.SignIn(p.Key, metrics.SignInPassword, metrics.SignInLimited)
	secs := ratelimit.Seconds(wait)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	d.Error = pages.T(w, "Too many sign-in attempts. Wait %d seconds, then try again.", secs)
	h.form(w, r, p, http.StatusTooManyRequests, d)
}

// continueTo ends a successful sign-in. The answer to the form POST is a page that moves on
// at once, not a redirect: the next stop (an authorization response) may redirect to the
// client's address, and browsers apply form-action 'self' to every redirect that follows a
// form submission.
func (h *handler) continueTo(w http.ResponseWriter, p *config.Project, person store.Person, returnTo string) {
	h.env.Pages.Message(w, http.StatusOK, pages.MessageData{
		Frame:      pages.Frame{Title: "Signed in", Project: projectName(p), SignedInAs: displayName(person)},
		Heading:    "You are signed in",
		Paragraphs: []string{"Taking you back to where you were."},
		Continue:   returnTo,
	})
}

func (h *handler) signOutPage(w http.ResponseWriter, r *http.Request) {
	p := site.Project(r)
	_, person, ok := Current(h.env, h.store, r)
	if !ok {
		h.env.Pages.Message(w, http.StatusOK, pages.MessageData{
			Frame:   pages.Frame{Title: "Signed out", Project: projectName(p)},
			Heading: "You are not signed in",
			Actions: []pages.Action{{Label: "Sign in", URL: URL(p, "", false), Primary: true}},
		})
		return
	}
	h.env.Pages.Message(w, http.StatusOK, pages.MessageData{
		Frame:      pages.Frame{Title: "Sign out", Project: projectName(p), SignedInAs: displayName(person)},
		Heading:    pages.T(w, "Sign out of %s?", projectName(p)),
		Paragraphs: []string{"Apps you have allowed keep their access. You can withdraw it on your account page."},
		Actions: []pages.Action{{
			Label: "Sign out", URL: site.IssuerPath(p) + "/sign-out", Post: true, Primary: true,
			Fields: []pages.Field{{Name: "csrf_token", Value: CSRFToken(h.env, r)}},
		}},
	})
}

func (h *handler) signOut(w http.ResponseWriter, r *http.Request) {
	p := site.Project(r)
	form, ok := readForm(h.env, w, r)
	if !ok {
		return
	}
	_, person, signedIn := Current(h.env, h.store, r)
	if signedIn && !CheckCSRF(h.env, r, form.Get("csrf_token")) {
		h.env.Pages.Error(w, http.StatusForbidden, pages.ErrorData{
			Frame:   pages.Frame{Title: "Form expired", Project: projectName(p)},
			Message: "This form has expired. Go back, reload the page and try again.",
		})
		return
	}
	for _, hook := range h.onSignOut {
		if err := hook(r.Context(), w, p, person.ID); err != nil {
			h.internal(w, p, err)
			return
		}
	}
	if err := end(r.Context(), h.env, h.store, w, r, p); err != nil {
		h.internal(w, p, err)
		return
	}
	if signedIn {
		h.env.Record(r.Context(), store.AuditRecord{Project: p.Key, Actor: person.ID, Action: events.SignedOut, Target: person.ID})
	}
	h.env.Pages.Message(w, http.StatusOK, pages.MessageData{
		Frame:   pages.Frame{Title: "Signed out", Project: projectName(p)},
		Heading: "You are signed out",
		Actions: []pages.Action{{Label: "Sign in again", URL: URL(p, "", false)}},
	})
}

func (h *handler) internal(w http.ResponseWriter, p *config.Project, err error) {
	h.env.ResponseLog(w).Error(err, "sign-in failed", "project", p.Key)
	h.env.Pages.Error(w, http.StatusInternalServerError, pages.ErrorData{
		Frame:   pages.Frame{Title: "Something went wrong", Project: projectName(p)},
		Message: "Signing in failed on our side. Please try again in a moment.",
	})
}

// readForm parses a small urlencoded form, refusing oversized bodies and repeated fields
// with an error page.
func readForm(env *site.Env, w http.ResponseWriter, r *http.Request) (url.Values, bool) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		status := http.StatusBadRequest
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			status = http.StatusRequestEntityTooLarge
		}
		env.Pages.Error(w, status, pages.ErrorData{Message: "The form could not be read."})
		return nil, false
	}
	for _, v := range r.PostForm {
		if len(v) > 1 {
			env.Pages.Error(w, http.StatusBadRequest, pages.ErrorData{Message: "The form could not be read."})
			return nil, false
		}
	}
	return r.PostForm, true
}

func sameToken(cookie, submitted string) bool {
	return cookie != "" && subtle.ConstantTimeCompare([]byte(cookie), []byte(submitted)) == 1
}

// dummyHash matches the work of a real bcrypt check when a project has no password users to
// borrow a hash from. Made on first use, from a password nobody knows.
var dummyHash = sync.OnceValue(func() string {
	b, _ := bcrypt.GenerateFromPassword([]byte(secret.New("")), bcrypt.DefaultCost)
	return string(b)
})

// dummyVerify runs the hash of some real user of the project (or a bcrypt dummy), so an
// unknown person takes as long as a wrong password. The result is ignored.
func dummyVerify(p *config.Project, password string) {
	var hash string
	for _, u := range p.SignIn.Passwords {
		hash = u.Hash
		break
	}
	if hash == "" {
		hash = dummyHash()
	}
	verifyPassword(hash, password)
}

func projectName(p *config.Project) string {
	if p.DisplayName != "" {
		return p.DisplayName
	}
	return p.Name
}

// ProjectName is how pages name the project.
func ProjectName(p *config.Project) string { return projectName(p) }

// DisplayName is how pages name a signed-in person.
func DisplayName(person store.Person) string { return displayName(person) }

func displayName(person store.Person) string {
	if person.Email != "" {
		return person.Email
	}
	if person.Name != "" {
		return person.Name
	}
	return person.ID
}

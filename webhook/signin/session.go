package signin

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/metrics"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/pages"
	"latchkey.dev/latchkey/webhook/site"
)

const sessionCookie = "session"

// ErrNotSignedIn: the request carries no live session of someone the project still lets sign
// in. Any other error from Lookup means the store could not say (an outage).
var ErrNotSignedIn = errors.New("signin: not signed in")

// Current returns the session and person signed in to the request's project, if any. The
// cookie holds 32 random bytes; only their hash is looked up. A store failure reads as "not
// signed in"; pages that would then send the person to sign in use Lookup instead, so an outage
// shows as one rather than as a sign-in form.
func Current(env *site.Env, st SessionStore, r *http.Request) (store.Session, store.Person, bool) {
	s, person, err := Lookup(env, st, r)
	return s, person, err == nil
}

// Lookup is Current with the reason: ErrNotSignedIn, or the store's error.
func Lookup(env *site.Env, st SessionStore, r *http.Request) (store.Session, store.Person, error) {
	p := site.Project(r)
	v := ReadCookie(r, env, p, sessionCookie)
	if v == "" || len(v) > 128 {
		return store.Session{}, store.Person{}, ErrNotSignedIn
	}
	ctx := r.Context()
	s, err := st.GetSession(ctx, secret.Hash(v), env.Now())
	if errors.Is(err, store.ErrNotFound) {
		return store.Session{}, store.Person{}, ErrNotSignedIn
	}
	if err != nil {
		env.Log(r.Context()).Error(err, "cannot read session", "project", p.Key)
		return store.Session{}, store.Person{}, err
	}
	if s.Project != p.Key {
		return store.Session{}, store.Person{}, ErrNotSignedIn
	}
	person, err := st.GetPerson(ctx, p.Key, s.Subject)
	if errors.Is(err, store.ErrNotFound) {
		return store.Session{}, store.Person{}, ErrNotSignedIn
	}
	if err != nil {
		env.Log(r.Context()).Error(err, "cannot read person", "project", p.Key)
		return store.Session{}, store.Person{}, err
	}
	if !site.PersonActive(p, person) {
		return store.Session{}, store.Person{}, ErrNotSignedIn
	}
	return s, person, nil
}

// Unavailable answers a page request when the store cannot say who is signed in: a 503 page,
// never a sign-in form that could not work either.
func Unavailable(env *site.Env, w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Retry-After", "5")
	env.Pages.Error(w, http.StatusServiceUnavailable, pages.ErrorData{
		Frame:   pages.Frame{Project: ProjectName(site.Project(r))},
		Heading: "Try again in a moment",
		Message: "This page cannot check who you are right now. Nothing was changed.",
	})
}

// Require returns the signed-in person, or answers the request and returns false: a browser
// signed in as nobody is sent to sign in and back to returnTo; a store that cannot say who is
// signed in gets Unavailable, never a sign-in form (signing in could not work either, and the
// person may well be signed in).
func Require(env *site.Env, st SessionStore, w http.ResponseWriter, r *http.Request, returnTo string) (store.Session, store.Person, bool) {
	s, person, err := Lookup(env, st, r)
	switch {
	case err == nil:
		return s, person, true
	case errors.Is(err, ErrNotSignedIn):
		Redirect(env, w, r, returnTo, false)
	default:
		Unavailable(env, w, r)
	}
	return store.Session{}, store.Person{}, false
}

// Recent reports whether the session's sign-in counts as a recent sign-in in project p: within
// the project's RecentSignIn of now, and with a passkey when the project requires a
// phishing-resistant sign-in (needPasskey then says that is what is missing).
func Recent(p *config.Project, s store.Session, now time.Time) (ok, needPasskey bool) {
	maxAge := p.Lifetimes.RecentSignIn
	if maxAge <= 0 {
		maxAge = config.DefaultLifetimes().RecentSignIn
	}
	if !Fresh(s, maxAge, now) {
		return false, false
	}
	if p.SignIn.RequirePhishingResistant && !PhishingResistant(s.Method) {
		return false, true
	}
	return true, false
}

// PasskeyURL is the sign-in page asking for a passkey, which comes back to returnTo.
func PasskeyURL(p *config.Project, returnTo string) string {
	return URL(p, returnTo, true) + "&passkey=1"
}

// ProviderURL is a sign-in with the project's OpenID provider, asked to make the person sign
// in again, which comes back to returnTo.
func ProviderURL(p *config.Project, returnTo string) string {
	q := url.Values{"prompt": {"login"}}
	if rt, ok := SafeReturn(p, returnTo); ok {
		q.Set("return_to", rt)
	}
	return site.IssuerPath(p) + "/sign-in/oidc?" + q.Encode()
}

// Fresh reports whether the session's sign-in happened within maxAge of now.
func Fresh(s store.Session, maxAge time.Duration, now time.Time) bool {
	return !s.AuthTime.IsZero() && now.Sub(s.AuthTime) <= maxAge
}

// RequireFresh returns the signed-in person when they signed in within maxAge (the project's
// RecentSignIn when maxAge is 0). Otherwise it sends the browser to sign in — again, if someone
// is signed in but not recently — and back to the current URL, and returns false; the caller
// then returns without writing anything. Use it on GET pages only.
func RequireFresh(env *site.Env, st SessionStore, w http.ResponseWriter, r *http.Request, maxAge time.Duration) (store.Session, store.Person, bool) {
	p := site.Project(r)
	if maxAge <= 0 {
		maxAge = p.Lifetimes.RecentSignIn
	}
	s, person, err := Lookup(env, st, r)
	if err != nil && !errors.Is(err, ErrNotSignedIn) {
		Unavailable(env, w, r)
		return store.Session{}, store.Person{}, false
	}
	if err == nil && Fresh(s, maxAge, env.Now()) {
		return s, person, true
	}
	if err == nil {
		Redirect(env, w, r, r.URL.RequestURI(), true)
	} else {
		RedirectRecent(env, w, r, r.URL.RequestURI())
	}
	return store.Session{}, store.Person{}, false
}

// RedirectRecent sends a browser signed in as nobody to sign in for a page that needs a recent
// sign-in (the project's RecentSignIn). A password sign-in always is one; with the project's
// OpenID provider, the provider is asked (max_age) to make the person sign in there again if
// their sign-in there is older, and the ID token's auth_time is checked.
func RedirectRecent(env *site.Env, w http.ResponseWriter, r *http.Request, returnTo string) {
	u := URL(site.Project(r), returnTo, false)
	if strings.Contains(u, "?") {
		u += "&recent=1"
	} else {
		u += "?recent=1"
	}
	http.Redirect(w, r, u, http.StatusSeeOther)
}

// Redirect sends the browser to the project's sign-in page, which comes back to returnTo (a
// path under the issuer; anything else falls back to the account page). With again, the
// person must sign in even if they already are.
func Redirect(env *site.Env, w http.ResponseWriter, r *http.Request, returnTo string, again bool) {
	http.Redirect(w, r, URL(site.Project(r), returnTo, again), http.StatusSeeOther)
}

// URL is the sign-in page's address for returnTo.
func URL(p *config.Project, returnTo string, again bool) string {
	q := url.Values{}
	if rt, ok := SafeReturn(p, returnTo); ok {
		q.Set("return_to", rt)
	}
	if again {
		q.Set("prompt", "login")
	}
	u := site.IssuerPath(p) + "/sign-in"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// CSRFToken is the anti-forgery token for forms shown to the signed-in person: an HMAC of the
// session cookie, so it is stable for the session, unknown to other sites, and not derivable
// from the stored session hash. "" when nobody is signed in.
func CSRFToken(env *site.Env, r *http.Request) string {
	v := ReadCookie(r, env, site.Project(r), sessionCookie)
	if v == "" {
		return ""
	}
	m := hmac.New(sha256.New, []byte(v))
	m.Write([]byte("latchkey csrf"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// CheckCSRF compares a submitted token with the session's, in constant time.
func CheckCSRF(env *site.Env, r *http.Request, submitted string) bool {
	want := CSRFToken(env, r)
	return want != "" && subtle.ConstantTimeCompare([]byte(want), []byte(submitted)) == 1
}

// start signs person in: a new session (never a reused one, against fixation) whose cookie
// holds 32 random bytes and whose row holds their hash and the sign-in time.
//
// authTime is when the person last authenticated: now for a password, the provider's auth_time
// for an ID token (zero when unknown, which never counts as a recent sign-in).
//
// upstreamSID is "issuer|sid" of the provider's session for a sign-in with the project's OpenID
// provider that named one, else "".
func start(ctx context.Context, env *site.Env, st Store, w http.ResponseWriter, r *http.Request, p *config.Project, person store.Person, authTime time.Time, upstreamSID string) error {
	method := MethodPassword
	if person.Source == "oidc" {
		method = MethodOIDC
	}
	return startWith(ctx, env, st, w, r, p, person, authTime, upstreamSID, method)
}

// startWith is start with the sign-in method to record (RFC 8176 amr: MethodPassword, …).
func startWith(ctx context.Context, env *site.Env, st Store, w http.ResponseWriter, r *http.Request, p *config.Project, person store.Person, authTime time.Time, upstreamSID, method string) error {
	now := env.Now()
	if old := ReadCookie(r, env, p, sessionCookie); old != "" && len(old) <= 128 {
		if err := st.DeleteSession(ctx, secret.Hash(old)); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	v := secret.New("")
	err := st.CreateSession(ctx, store.Session{
		IDHash:      secret.Hash(v),
		Project:     p.Key,
		Subject:     person.ID,
		AuthTime:    authTime,
		CreatedAt:   now,
		ExpiresAt:   now.Add(p.Lifetimes.Session),
		UpstreamSID: upstreamSID,
		Method:      method,
	})
	if err != nil {
		return err
	}
	SetCookie(w, env, p, sessionCookie, v, p.Lifetimes.Session)
	env.Record(ctx, store.AuditRecord{
		Project: p.Key, Time: now, Actor: person.ID, Action: events.SignInSucceeded, Target: person.ID,
		Details: map[string]string{"method": person.Source, "amr": method},
	})
	env.Metrics.SignIn(p.Key, person.Source, metrics.SignInOK)
	return nil
}

// end signs the browser out of the project.
func end(ctx context.Context, env *site.Env, st Store, w http.ResponseWriter, r *http.Request, p *config.Project) error {
	v := ReadCookie(r, env, p, sessionCookie)
	SetCookie(w, env, p, sessionCookie, "", -1)
	if v == "" || len(v) > 128 {
		return nil
	}
	if err := st.DeleteSession(ctx, secret.Hash(v)); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return nil
}

// PostedForm runs the checks every state-changing form post of a signed-in page shares: a
// readable form of at most 16 KiB that names no field twice, a signed-in person (otherwise
// sent to sign in, then back to returnTo) and the session's anti-forgery token. It answers the
// request itself when a check fails, and says so with ok false; every answer is no-store.
func PostedForm(env *site.Env, st SessionStore, w http.ResponseWriter, r *http.Request, returnTo string) (s store.Session, person store.Person, form url.Values, ok bool) {
	pages.NoStore(w.Header())
	p := site.Project(r)
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil || repeated(r.PostForm) {
		env.Pages.Error(w, http.StatusBadRequest, pages.ErrorData{Frame: pages.Frame{Project: ProjectName(p)}, Message: "The form could not be read."})
		return store.Session{}, store.Person{}, nil, false
	}
	s, person, ok = Require(env, st, w, r, returnTo)
	if !ok {
		return store.Session{}, store.Person{}, nil, false
	}
	if !CheckCSRF(env, r, r.PostForm.Get("csrf_token")) {
		env.Pages.Error(w, http.StatusForbidden, pages.ErrorData{
			Frame:   pages.Frame{Title: "Form expired", Project: ProjectName(p), SignedInAs: DisplayName(person)},
			Message: "This form has expired. Go back, reload the page and try again. Nothing was changed.",
		})
		return store.Session{}, store.Person{}, nil, false
	}
	return s, person, r.PostForm, true
}

// repeated reports whether a form names a field more than once; no page's form does.
func repeated(form url.Values) bool {
	for _, v := range form {
		if len(v) > 1 {
			return true
		}
	}
	return false
}

package signin

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/metrics"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/tracing"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/webhook/pages"
	"latchkey.dev/latchkey/webhook/site"
)

const (
	oidcCookie   = "signin_oidc"
	oidcLifetime = 10 * time.Minute
	// providerTTL is how long a provider's discovery document is trusted before it is fetched
	// again; its signing keys are fetched when a token needs one the cached set lacks, at most
	// once a minute (providerkeys.go).
	providerTTL     = time.Hour
	upstreamTimeout = 10 * time.Second
)

// oidcState is kept in a sealed, HttpOnly cookie in the browser that started the sign-in, so
// the callback is bound to that browser (state), to that authentication (nonce) and to the
// code (PKCE), without a database row.
type oidcState struct {
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
	ReturnTo string `json:"r"`
	Expires  int64  `json:"e"`
	// Started is when the browser was sent to the provider (Unix seconds).
	Started int64 `json:"t"`
	// Again: the person was asked to sign in again (prompt=login, max_age=0), so the provider
	// must have authenticated them after Started. Recent: the page behind ReturnTo needs a sign-in
	// within the project's RecentSignIn (max_age). Either way the ID token must carry auth_time.
	Again  bool `json:"a,omitempty"`
	Recent bool `json:"f,omitempty"`
}

// authTimeSkew is how far the provider's clock may be from ours when auth_time is compared
// with the time the sign-in started, and how far in the future an auth_time may lie.
const authTimeSkew = time.Minute

type providers struct {
	mu     sync.Mutex
	m      map[string]cachedProvider
	client *http.Client
	now    func() time.Time
}

type cachedProvider struct {
	p       *provider
	fetched time.Time
}

func newProviders(now func() time.Time) *providers {
	// Calls to the provider are traced (discovery and key fetches as traces of their own,
	// the code exchange under the request's span).
	return &providers{m: map[string]cachedProvider{}, now: now, client: &http.Client{
		Timeout: upstreamTimeout, Transport: tracing.Transport("sign-in provider", nil),
	}}
}

func (ps *providers) get(issuer string, now time.Time) (*provider, error) {
	ps.mu.Lock()
	c, ok := ps.m[issuer]
	ps.mu.Unlock()
	if ok && now.Sub(c.fetched) < providerTTL {
		return c.p, nil
	}
	// Not tied to one request: go-oidc keeps this context's HTTP client for later key fetches.
	ctx, cancel := context.WithTimeout(oidc.ClientContext(context.Background(), ps.client), upstreamTimeout)
	defer cancel()
	op, err := oidc.NewProvider(ctx, issuer)
	if err != nil {
		return nil, err
	}
	p, err := newProvider(op, ps.client, ps.now)
	if err != nil {
		return nil, err
	}
	ps.mu.Lock()
	ps.m[issuer] = cachedProvider{p: p, fetched: now}
	ps.mu.Unlock()
	return p, nil
}

func (h *handler) oauth2Config(p *config.Project, prov *provider) *oauth2.Config {
	o := p.SignIn.OIDC
	scopes := []string{oidc.ScopeOpenID, "email", "profile"}
	for _, s := range o.Scopes {
		if !slices.Contains(scopes, s) {
			scopes = append(scopes, s)
		}
	}
	if o.RecheckInterval > 0 && !slices.Contains(scopes, oidc.ScopeOfflineAccess) {
		// Re-checking the person later needs a refresh token at the provider (docs/leavers.md).
		scopes = append(scopes, oidc.ScopeOfflineAccess)
	}
	return &oauth2.Config{
		ClientID:     o.ClientID,
		ClientSecret: o.ClientSecret,
		Endpoint:     endpoint(prov),
		RedirectURL:  p.Issuer + "/sign-in/callback",
		Scopes:       scopes,
	}
}

// endpoint is the provider's token endpoint with the client authentication it announces. Left
// to guess, x/oauth2 retries a refused request with the other method, and a provider's
// invalid_grant for the person would come back as invalid_client for the retry.
func endpoint(prov *provider) oauth2.Endpoint {
	e := prov.Endpoint()
	var md struct {
		Methods []string `json:"token_endpoint_auth_methods_supported"`
	}
	// OpenID Connect Discovery 1.0 §3: client_secret_basic when the provider lists none.
	e.AuthStyle = oauth2.AuthStyleInHeader
	if prov.Claims(&md) == nil && len(md.Methods) > 0 && !slices.Contains(md.Methods, "client_secret_basic") &&
		slices.Contains(md.Methods, "client_secret_post") {
		e.AuthStyle = oauth2.AuthStyleInParams
	}
	return e
}

func (h *handler) oidcStart(w http.ResponseWriter, r *http.Request) {
	p := site.Project(r)
	if p.SignIn.OIDC == nil {
		h.env.Pages.NotFound(w)
		return
	}
	if p.SignIn.OIDC.Unavailable {
		h.oidcUnavailable(w, p)
		return
	}
	q := r.URL.Query()
	returnTo, ok := SafeReturn(p, q.Get("return_to"))
	if !ok {
		returnTo = DefaultReturn(p)
	}
	now := h.env.Now()
	prov, err := h.providers.get(p.SignIn.OIDC.Issuer, now) //nolint:contextcheck // discovery is cached for every request, not tied to this one
	if err != nil {
		h.env.Log(r.Context()).Error(err, "cannot discover the sign-in provider", "project", p.Key, "issuer", p.SignIn.OIDC.Issuer)
		h.env.Pages.Error(w, http.StatusBadGateway, pages.ErrorData{
			Frame:   pages.Frame{Title: "Sign-in unavailable", Project: projectName(p)},
			Message: "Your organisation's sign-in service cannot be reached right now. Please try again in a moment.",
		})
		return
	}
	st := oidcState{
		State:    secret.New(""),
		Nonce:    secret.New(""),
		Verifier: oauth2.GenerateVerifier(),
		ReturnTo: returnTo,
		Expires:  now.Add(oidcLifetime).Unix(),
		Started:  now.Unix(),
		Again:    q.Get("prompt") == "login",
		Recent:   q.Get("recent") == "1",
	}
	b, _ := json.Marshal(st)
	kid, sealed := h.env.Keyring.Seal(oidcPurpose(p), b)
	SetCookie(w, h.env, p, oidcCookie, kid+"."+base64.RawURLEncoding.EncodeToString(sealed), oidcLifetime)
	opts := []oauth2.AuthCodeOption{oidc.Nonce(st.Nonce), oauth2.S256ChallengeOption(st.Verifier)}
	switch {
	case st.Again:
		// A fresh sign-in here must be a fresh sign-in there too: a browser still signed in at
		// the provider would otherwise come straight back.
		opts = append(opts, oauth2.SetAuthURLParam("prompt", "login"), oauth2.SetAuthURLParam("max_age", "0"))
	case st.Recent:
		// OpenID Connect Core §3.1.2.1: the provider makes the person sign in again if their
		// sign-in there is older than this, and must then return auth_time.
		maxAge := int64(p.Lifetimes.RecentSignIn / time.Second)
		opts = append(opts, oauth2.SetAuthURLParam("max_age", strconv.FormatInt(maxAge, 10)))
	}
	http.Redirect(w, r, h.oauth2Config(p, prov).AuthCodeURL(st.State, opts...), http.StatusFound)
}

// oidcUnavailable refuses sign-in with the provider while the project's client secret Secret is
// missing or empty.
func (h *handler) oidcUnavailable(w http.ResponseWriter, p *config.Project) {
	h.env.Pages.Message(w, http.StatusServiceUnavailable, pages.MessageData{
		Frame:      pages.Frame{Title: "Sign-in unavailable", Project: projectName(p)},
		Heading:    "Signing in with your organisation is unavailable right now",
		Paragraphs: []string{"Choose another way to sign in, or try again later. If this lasts, tell the project's administrator."},
		Actions:    []pages.Action{{Label: "Go to sign-in", URL: URL(p, "", false), Primary: true}},
	})
}

func oidcPurpose(p *config.Project) string { return "signin.oidc:" + p.Key }

func (h *handler) readState(r *http.Request, p *config.Project) (oidcState, bool) {
	v := ReadCookie(r, h.env, p, oidcCookie)
	kid, enc, ok := strings.Cut(v, ".")
	if !ok {
		return oidcState{}, false
	}
	sealed, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return oidcState{}, false
	}
	b, err := h.env.Keyring.Open(oidcPurpose(p), kid, sealed)
	if err != nil {
		return oidcState{}, false
	}
	var st oidcState
	if json.Unmarshal(b, &st) != nil || h.env.Now().Unix() > st.Expires {
		return oidcState{}, false
	}
	return st, true
}

//nolint:funlen // the checks of an OpenID Connect sign-in response in the order the spec sets them, each answered with its own page
func (h *handler) oidcCallback(w http.ResponseWriter, r *http.Request) {
	p := site.Project(r)
	o := p.SignIn.OIDC
	if o == nil {
		h.env.Pages.NotFound(w)
		return
	}
	q := r.URL.Query()
	st, ok := h.readState(r, p)
	SetCookie(w, h.env, p, oidcCookie, "", -1)
	if o.Unavailable {
		// Started before the client secret's Secret broke: the code cannot be redeemed.
		h.oidcUnavailable(w, p)
		return
	}
	if !ok || subtle.ConstantTimeCompare([]byte(st.State), []byte(q.Get("state"))) != 1 {
		h.env.Pages.Message(w, http.StatusBadRequest, pages.MessageData{
			Frame:      pages.Frame{Title: "Sign-in expired", Project: projectName(p)},
			Heading:    "This sign-in cannot be finished here",
			Paragraphs: []string{"It has expired, or it was started in another browser. Start again from the sign-in page."},
			Actions:    []pages.Action{{Label: "Go to sign-in", URL: URL(p, "", false), Primary: true}},
		})
		return
	}
	if q.Get("error") != "" || q.Get("code") == "" {
		h.env.Record(r.Context(), store.AuditRecord{
			Project: p.Key, Actor: "anonymous", Action: events.SignInFailed, Reason: "upstream_refused",
			Details: map[string]string{"method": "oidc", "error": upstream.ErrorCode(q.Get("error"))},
		})
		h.form(w, r, p, http.StatusOK, pages.SignInData{ReturnTo: st.ReturnTo, Error: msgUpstream, Again: st.Again, Recent: st.Recent})
		return
	}
	now := h.env.Now()
	prov, err := h.providers.get(o.Issuer, now) //nolint:contextcheck // discovery is cached for every request, not tied to this one
	if err != nil {
		h.upstreamFailed(w, r, p, st, err)
		return
	}
	ctx, cancel := context.WithTimeout(oidc.ClientContext(r.Context(), h.providers.client), upstreamTimeout)
	defer cancel()
	tok, err := h.oauth2Config(p, prov).Exchange(ctx, q.Get("code"), oauth2.VerifierOption(st.Verifier))
	if err != nil {
		h.upstreamFailed(w, r, p, st, err)
		return
	}
	raw, _ := tok.Extra("id_token").(string)
	idt, err := prov.Verifier(&oidc.Config{ClientID: o.ClientID, Now: h.env.Now}).Verify(ctx, raw)
	if err != nil {
		h.upstreamFailed(w, r, p, st, err)
		return
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(st.Nonce)) != 1 {
		h.upstreamFailed(w, r, p, st, errNonce)
		return
	}
	var claims struct {
		Email    string   `json:"email"`
		Name     string   `json:"name"`
		AuthTime *float64 `json:"auth_time"`
		// SID names the provider's session, so a back-channel logout token that names only it
		// finds this sign-in (OpenID Connect Back-Channel Logout 1.0 §2.1).
		SID string `json:"sid"`
	}
	if err := idt.Claims(&claims); err != nil {
		h.upstreamFailed(w, r, p, st, err)
		return
	}
	var all map[string]json.RawMessage
	if err := idt.Claims(&all); err != nil {
		h.upstreamFailed(w, r, p, st, err)
		return
	}
	if ok, reason := admitted(o, all); !ok {
		h.notAllowed(w, r, p, reason)
		return
	}
	authTime, err := sessionAuthTime(p, st, claims.AuthTime, now)
	if errors.Is(err, errNotRecent) {
		h.notRecent(w, p, st, claims.AuthTime != nil)
		return
	}
	if err != nil {
		h.upstreamFailed(w, r, p, st, err)
		return
	}
	person, err := h.store.UpsertPerson(r.Context(), store.Person{
		Project:       p.Key,
		ID:            secret.NewID(),
		Source:        "oidc",
		SourceSubject: idt.Issuer + "|" + idt.Subject,
		Email:         claims.Email,
		Name:          claims.Name,
		CreatedAt:     now,
	})
	if err != nil {
		h.internal(w, p, err)
		return
	}
	if err := h.keepForRecheck(r.Context(), p, person, tok, now); err != nil {
		h.internal(w, p, err)
		return
	}
	var sid string
	if claims.SID != "" && len(claims.SID) <= maxSID {
		sid = idt.Issuer + "|" + claims.SID
	}
	if err := start(r.Context(), h.env, h.store, w, r, p, person, authTime, sid); err != nil {
		h.internal(w, p, err)
		return
	}
	// This navigation came from another site, not from one of our forms, so a redirect is
	// fine here.
	http.Redirect(w, r, st.ReturnTo, http.StatusSeeOther)
}

type constError string

func (e constError) Error() string { return string(e) }

const (
	errNonce       = constError("ID token nonce does not match")
	errAuthFuture  = constError("ID token auth_time lies in the future")
	errNotRecent   = constError("ID token auth_time missing or older than the sign-in asked for")
	errAuthInvalid = constError("ID token auth_time is not a time")
)

// sessionAuthTime is the sign-in time to record for a session started from an ID token: the
// provider's auth_time, never the time the token arrived, so a browser still signed in at the
// provider does not pass as a recent sign-in. Without auth_time it is zero: the session works,
// but never counts as a recent sign-in. When the sign-in was started as a fresh one (Again or
// Recent) a missing or too old auth_time is errNotRecent (OpenID Connect Core §3.1.3.7, 13).
func sessionAuthTime(p *config.Project, st oidcState, claim *float64, now time.Time) (time.Time, error) {
	var at time.Time
	if claim != nil {
		if *claim <= 0 || *claim > float64(1<<40) {
			return time.Time{}, errAuthInvalid
		}
		at = time.Unix(int64(*claim), 0)
		if at.After(now.Add(authTimeSkew)) {
			return time.Time{}, errAuthFuture
		}
		if at.After(now) {
			at = now
		}
	}
	if !st.Again && !st.Recent {
		return at, nil
	}
	if at.IsZero() || now.Sub(at) > p.Lifetimes.RecentSignIn {
		return time.Time{}, errNotRecent
	}
	if st.Again {
		started := time.Unix(st.Started, 0)
		if at.Before(started.Add(-authTimeSkew)) {
			return time.Time{}, errNotRecent
		}
		// Authenticated in answer to this request; within the clocks' skew that is no earlier
		// than the request itself, and a check that asked for a sign-in after some moment
		// before it (prompt=login at /authorize) must see it as such.
		if at.Before(started) {
			at = started
		}
	}
	return at, nil
}

// notRecent refuses a sign-in that was meant to be fresh when the provider's ID token does not
// show a recent enough authentication: no session is started.
func (h *handler) notRecent(w http.ResponseWriter, p *config.Project, st oidcState, hadAuthTime bool) {
	h.env.ResponseLog(w).Info("upstream sign-in not recent enough", "project", p.Key, "auth_time_present", hadAuthTime,
		"again", st.Again)
	first := pages.T(w, "The page you were going to needs you to have signed in within the last %d minutes, and your organisation's sign-in service did not say that you did. You are not signed in here, and nothing was changed.",
		minutes(p.Lifetimes.RecentSignIn))
	if st.Again {
		first = pages.T(w, "The page you were going to needs you to sign in again, and your organisation's sign-in service did not say that you did. You are not signed in here, and nothing was changed.")
	}
	h.env.Pages.Message(w, http.StatusForbidden, pages.MessageData{
		Frame:   pages.Frame{Title: "Sign in again", Project: projectName(p)},
		Heading: "Your organisation did not confirm a recent sign-in",
		Paragraphs: []string{
			first,
			"Sign in again. If you see this page again, tell the project's administrator: the sign-in service must honour prompt=login and max_age, and report auth_time.",
		},
		Actions: []pages.Action{{Label: "Sign in again", URL: URL(p, st.ReturnTo, true), Primary: true}},
	})
}

// notAllowed refuses a person the provider vouched for but whom the project's
// allowedEmailDomains or allowedGroups do not admit: no person is recorded, no session starts.
func (h *handler) notAllowed(w http.ResponseWriter, r *http.Request, p *config.Project, reason string) {
	h.env.Metrics.SignIn(p.Key, metrics.SignInOIDC, metrics.SignInFailed)
	h.env.Record(r.Context(), store.AuditRecord{
		Project: p.Key, Actor: "anonymous", Action: events.SignInFailed, Outcome: store.OutcomeRefused, Reason: reason,
		Details: map[string]string{"method": "oidc"},
	})
	first := "Your organisation's sign-in service signed you in, but this project admits only people with a verified email address in the domains it names. You are not signed in here."
	if reason == reasonGroupNotAllowed {
		first = "Your organisation's sign-in service signed you in, but this project admits only members of the groups it names, and you are not in one of them. You are not signed in here."
	}
	h.env.Pages.Message(w, http.StatusForbidden, pages.MessageData{
		Frame:      pages.Frame{Title: "Not allowed to sign in", Project: projectName(p)},
		Heading:    "You may not sign in to this project",
		Paragraphs: []string{first, "If you think you should have access, ask the project's administrator."},
	})
}

// minutes says a duration in whole minutes, for people.
func minutes(d time.Duration) int {
	return int((d + time.Minute - 1) / time.Minute)
}

func (h *handler) upstreamFailed(w http.ResponseWriter, r *http.Request, p *config.Project, st oidcState, err error) {
	// A token endpoint error carries the provider's response body; log only its error code.
	reason := err.Error()
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		reason = "token endpoint answered " + re.ErrorCode
	}
	h.env.Log(r.Context()).Info("upstream sign-in failed", "project", p.Key, "reason", reason)
	h.env.Metrics.SignIn(p.Key, metrics.SignInOIDC, metrics.SignInFailed)
	h.env.Record(r.Context(), store.AuditRecord{
		Project: p.Key, Actor: "anonymous", Action: events.SignInFailed, Outcome: store.OutcomeFailed, Reason: "upstream_error",
		Details: map[string]string{"method": "oidc"},
	})
	h.form(w, r, p, http.StatusBadGateway, pages.SignInData{ReturnTo: st.ReturnTo, Error: msgUpstream, Again: st.Again, Recent: st.Recent})
}

package signin

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/pages"
	"latchkey.dev/latchkey/webhook/site"
)

const (
	oidcCookie   = "signin_oidc"
	oidcLifetime = 10 * time.Minute
	// providerTTL is how long a provider's discovery document is trusted before it is fetched
	// again; its signing keys are refreshed by go-oidc on their own.
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
}

type providers struct {
	mu     sync.Mutex
	m      map[string]cachedProvider
	client *http.Client
}

type cachedProvider struct {
	p       *oidc.Provider
	fetched time.Time
}

func newProviders() *providers {
	return &providers{m: map[string]cachedProvider{}, client: &http.Client{Timeout: upstreamTimeout}}
}

func (ps *providers) get(issuer string, now time.Time) (*oidc.Provider, error) {
	ps.mu.Lock()
	c, ok := ps.m[issuer]
	ps.mu.Unlock()
	if ok && now.Sub(c.fetched) < providerTTL {
		return c.p, nil
	}
	// Not tied to one request: go-oidc keeps this context's HTTP client for later key fetches.
	ctx, cancel := context.WithTimeout(oidc.ClientContext(context.Background(), ps.client), upstreamTimeout)
	defer cancel()
	p, err := oidc.NewProvider(ctx, issuer)
	if err != nil {
		return nil, err
	}
	ps.mu.Lock()
	ps.m[issuer] = cachedProvider{p: p, fetched: now}
	ps.mu.Unlock()
	return p, nil
}

func (h *handler) oauth2Config(p *config.Project, prov *oidc.Provider) *oauth2.Config {
	o := p.SignIn.OIDC
	scopes := []string{oidc.ScopeOpenID, "email", "profile"}
	for _, s := range o.Scopes {
		if !contains(scopes, s) {
			scopes = append(scopes, s)
		}
	}
	return &oauth2.Config{
		ClientID:     o.ClientID,
		ClientSecret: o.ClientSecret,
		Endpoint:     prov.Endpoint(),
		RedirectURL:  p.Issuer + "/sign-in/callback",
		Scopes:       scopes,
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
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
	prov, err := h.providers.get(p.SignIn.OIDC.Issuer, now)
	if err != nil {
		h.env.Logger.Error(err, "cannot discover the sign-in provider", "project", p.Key, "issuer", p.SignIn.OIDC.Issuer)
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
	}
	b, _ := json.Marshal(st)
	kid, sealed := h.env.Keyring.Seal(oidcPurpose(p), b)
	SetCookie(w, h.env, p, oidcCookie, kid+"."+base64.RawURLEncoding.EncodeToString(sealed), oidcLifetime)
	opts := []oauth2.AuthCodeOption{oidc.Nonce(st.Nonce), oauth2.S256ChallengeOption(st.Verifier)}
	if q.Get("prompt") == "login" {
		// A fresh sign-in here should be a fresh sign-in there too.
		opts = append(opts, oauth2.SetAuthURLParam("prompt", "login"), oauth2.SetAuthURLParam("max_age", "0"))
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
		h.form(w, r, p, http.StatusOK, pages.SignInData{ReturnTo: st.ReturnTo, Error: msgUpstream})
		return
	}
	now := h.env.Now()
	prov, err := h.providers.get(o.Issuer, now)
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
		Email string `json:"email"`
		Name  string `json:"name"`
	}
	if err := idt.Claims(&claims); err != nil {
		h.upstreamFailed(w, r, p, st, err)
		return
	}
	person, err := h.env.Store.UpsertPerson(r.Context(), store.Person{
		Project:       p.Key,
		ID:            newID(),
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
	if err := start(r.Context(), h.env, w, r, p, person); err != nil {
		h.internal(w, p, err)
		return
	}
	// This navigation came from another site, not from one of our forms, so a redirect is
	// fine here.
	http.Redirect(w, r, st.ReturnTo, http.StatusSeeOther)
}

type constError string

func (e constError) Error() string { return string(e) }

const errNonce = constError("ID token nonce does not match")

func (h *handler) upstreamFailed(w http.ResponseWriter, r *http.Request, p *config.Project, st oidcState, err error) {
	// A token endpoint error carries the provider's response body; log only its error code.
	reason := err.Error()
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		reason = "token endpoint answered " + re.ErrorCode
	}
	h.env.Logger.Info("upstream sign-in failed", "project", p.Key, "reason", reason)
	h.form(w, r, p, http.StatusBadGateway, pages.SignInData{ReturnTo: st.ReturnTo, Error: msgUpstream})
}

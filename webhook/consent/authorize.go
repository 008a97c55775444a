// Package consent is the authorization endpoint (authorization code with PKCE, S256 only) and
// the consent page. An unknown client or an unregistered redirect address gets an HTML error
// page, never a redirect; every other answer goes to the verified redirect address with state
// and iss (RFC 9207).
package consent

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"latchkey.dev/latchkey/internal/authzdetails"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/ratelimit"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/oauth"
	"latchkey.dev/latchkey/webhook/pages"
	"latchkey.dev/latchkey/webhook/signin"
	"latchkey.dev/latchkey/webhook/site"
)

const maxFormBytes = 32 << 10

type authorizer struct {
	env   *site.Env
	store Store
	// pushes limits pushed authorization requests per client address: each one stores a row.
	pushes *ratelimit.Limiter
}

// Register mounts /authorize (GET is the authorization request, POST the consent decision) and
// /par, the pushed authorization request endpoint (RFC 9126).
func Register(rt site.Router, env *site.Env, st Store) {
	a := &authorizer{env: env, store: st, pushes: ratelimit.New(PushBurst, PushEvery).Share(env.RateBuckets, "par.address")}
	rt.Page("GET /authorize", http.HandlerFunc(a.authorize))
	rt.Page("POST /authorize", http.HandlerFunc(a.decide))
	rt.API("/par", http.HandlerFunc(a.par))
}

func (a *authorizer) authorize(w http.ResponseWriter, r *http.Request) {
	p := site.Project(r)
	q := r.URL.Query()
	req, ok := a.parse(w, r, p, q)
	if !ok {
		return
	}
	now := a.env.Now()
	sess, person, err := signin.Lookup(a.env, a.store, r)
	if err != nil && !errors.Is(err, signin.ErrNotSignedIn) {
		signin.Unavailable(a.env, w, r)
		return
	}
	ok = err == nil
	if !ok || a.needsSignIn(req, sess, now) {
		if req.has("none") {
			a.fail(w, r, p, req, oauth.Error{Code: "login_required", Description: "the person must sign in"})
			return
		}
		back := req.query()
		if forced(req) {
			back.Set(loginAfterParam, sealLoginAfter(a.env, p, req.values(), now))
		}
		signin.Redirect(a.env, w, r, site.IssuerPath(p)+"/authorize?"+back.Encode(), ok || forced(req))
		return
	}
	if err := a.allowedByPolicy(r, p, req, person); err != nil {
		a.fail(w, r, p, req, err)
		return
	}
	if a.needsConsent(r, p, req, person) {
		if req.has("none") {
			a.fail(w, r, p, req, oauth.Error{Code: "consent_required", Description: "the person must consent"})
			return
		}
		a.consentPage(w, r, p, req, person, http.StatusOK, "")
		return
	}
	a.issue(w, r, p, req, sess, person)
}

// forced: prompt=login, or max_age=0, which OpenID Connect treats the same.
func forced(req *request) bool { return req.has("login") || req.MaxAge == 0 }

// needsSignIn: a forced request is satisfied only by a sign-in at or after the time this
// server sent the browser to sign in for it (LoginAfter, which only this server can set).
func (a *authorizer) needsSignIn(req *request, s store.Session, now time.Time) bool {
	if forced(req) {
		return req.LoginAfter == 0 || s.AuthTime.Unix() < req.LoginAfter
	}
	return req.MaxAge > 0 && now.Sub(s.AuthTime) > time.Duration(req.MaxAge)*time.Second
}

// needsConsent: consent is remembered per person×client and covers the scopes allowed so far;
// new scopes or prompt=consent ask again.
func (a *authorizer) needsConsent(r *http.Request, p *config.Project, req *request, person store.Person) bool {
	// Authorization details are approved one request at a time: they name particular
	// resources and actions, and a remembered grant of scopes says nothing about them.
	if req.has("consent") || len(req.Details) > 0 {
		return true
	}
	// Remembered consent is per person and app, but the tick box vouches for one address: a
	// self-registered app that sends access to an unrecognised website asks every time, or it
	// could be allowed once for an honest address and then send codes elsewhere unseen.
	if req.Client.Registered && a.env.Destination(p, req.To).ConfirmRequired {
		return true
	}
	g, err := a.store.GetGrant(r.Context(), p.Key, person.ID, req.Client.ID)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			a.env.Log(r.Context()).Error(err, "cannot read grant", "project", p.Key)
		}
		return true
	}
	return !oauth.Subset(req.Scopes, g.Scopes)
}

func (a *authorizer) decide(w http.ResponseWriter, r *http.Request) {
	p := site.Project(r)
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		a.page(w, p, &pageError{Status: http.StatusBadRequest, Heading: "This request is not valid", Message: "The form could not be read."})
		return
	}
	form := r.PostForm
	req, ok := a.parse(w, r, p, form)
	if !ok {
		return
	}
	sess, person, ok := signin.Require(a.env, a.store, w, r, site.IssuerPath(p)+"/authorize?"+req.query().Encode())
	if !ok {
		return
	}
	if !signin.CheckCSRF(a.env, r, form.Get("csrf_token")) {
		a.page(w, p, &pageError{Status: http.StatusForbidden, Heading: "This form has expired",
			Message: "Go back to the app and start connecting again."})
		return
	}
	switch form.Get("decision") {
	case "deny":
		a.env.Record(r.Context(), store.AuditRecord{
			Project: p.Key, Actor: person.ID, Action: events.ConsentDenied, Target: req.Client.ID, ClientID: req.Client.ID,
			Reason: "denied_by_person", Details: map[string]string{"redirect_uri": req.To},
		})
		a.fail(w, r, p, req, oauth.ErrAccessDenied.WithDescription("the person denied access"))
		return
	case "allow":
	default:
		a.consentPage(w, r, p, req, person, http.StatusBadRequest, "Choose Allow or Deny.")
		return
	}
	dest := a.env.Destination(p, req.To)
	if dest.ConfirmRequired && form.Get("confirm_destination") != dest.URI {
		a.consentPage(w, r, p, req, person, http.StatusBadRequest,
			"Tick the box to confirm where access goes, or choose Deny.")
		return
	}
	if err := a.allowedByPolicy(r, p, req, person); err != nil {
		a.fail(w, r, p, req, err)
		return
	}
	now := a.env.Now()
	before := a.granted(r, p, person, req.Client.ID)
	// The store adds these scopes to those allowed before: consent to more never withdraws
	// what an app already held.
	if err := a.store.UpsertGrant(r.Context(), store.Grant{
		Project: p.Key, Subject: person.ID, ClientID: req.Client.ID, Scopes: req.Scopes, CreatedAt: now, UpdatedAt: now,
	}); err != nil {
		a.fail(w, r, p, req, oauth.Internal(err))
		return
	}
	details := map[string]string{"redirect_uri": req.To, "scope": strings.Join(req.Scopes, " ")}
	if len(before) > 0 {
		details["added_scope"] = strings.Join(added(req.Scopes, before), " ")
	}
	a.env.Record(r.Context(), store.AuditRecord{
		Project: p.Key, Actor: person.ID, Action: events.ConsentGranted, Target: req.Client.ID, ClientID: req.Client.ID,
		Details: withDetails(details, req.Details),
	})
	a.issue(w, r, p, req, sess, person)
}

// added is what of asked was not in before.
func added(asked, before []string) []string {
	var out []string
	for _, s := range asked {
		if !slices.Contains(before, s) {
			out = append(out, s)
		}
	}
	return out
}

// issue stores a one-time code and sends it to the client.
func (a *authorizer) issue(w http.ResponseWriter, r *http.Request, p *config.Project, req *request, sess store.Session, person store.Person) {
	now := a.env.Now()
	code := secret.New(secret.PrefixCode)
	err := a.store.CreateAuthCode(r.Context(), store.AuthCode{
		Hash:     secret.Hash(code),
		Project:  p.Key,
		ClientID: req.Client.ID,
		Subject:  person.ID,
		// As sent, "" when omitted: the token request must repeat exactly that (RFC 6749 §4.1.3).
		RedirectURI:          req.RedirectURI,
		Scopes:               req.Scopes,
		Resource:             req.Resources,
		CodeChallenge:        req.Challenge,
		CodeChallengeMethod:  "S256",
		Nonce:                req.Nonce,
		DPoPJKT:              req.DPoPJKT,
		AuthorizationDetails: authzdetails.Marshal(req.Details),
		AuthTime:             sess.AuthTime,
		ExpiresAt:            now.Add(p.Lifetimes.AuthCode),
		CreatedAt:            now,
	})
	if err != nil {
		a.fail(w, r, p, req, oauth.Internal(err))
		return
	}
	a.respond(w, r, p, req, url.Values{"code": {code}})
}

// respond sends an authorization response to the verified redirect URI, with state and iss.
func (a *authorizer) respond(w http.ResponseWriter, r *http.Request, p *config.Project, req *request, params url.Values) {
	if req.State != "" {
		params.Set("state", req.State)
	}
	params.Set("iss", p.Issuer)
	status := http.StatusFound
	if r.Method == http.MethodPost {
		status = http.StatusSeeOther
	}
	http.Redirect(w, r, appendQuery(req.To, params), status)
}

// parse reads an authorization request from q (the query of a GET, the form of a POST). When
// it cannot be used it answers the request itself, with a page or a redirect with an error,
// and reports false.
func (a *authorizer) parse(w http.ResponseWriter, r *http.Request, p *config.Project, q url.Values) (*request, bool) {
	req, perr, err := parse(r.Context(), a.env, a.store, p, q, false)
	if perr != nil {
		a.refuse(w, r, p, perr)
		return nil, false
	}
	if err != nil {
		a.fail(w, r, p, req, err)
		return nil, false
	}
	return req, true
}

// fail answers with an error: on the redirect URI once it is verified, as a page otherwise.
func (a *authorizer) fail(w http.ResponseWriter, r *http.Request, p *config.Project, req *request, err error) {
	e := oauth.AsError(err)
	if e.Status >= 500 {
		a.env.Log(r.Context()).Error(err, "authorization failed", "project", p.Key)
	}
	if req == nil || req.To == "" {
		a.page(w, p, &pageError{Status: http.StatusInternalServerError, Heading: "Something went wrong", Message: "Please go back to the app and try again."})
		return
	}
	params := url.Values{"error": {e.Code}}
	if e.Description != "" {
		params.Set("error_description", e.Description)
	}
	a.respond(w, r, p, req, params)
}

// refuse shows a request that goes no further as a page. A refusal by the redirect policy is a
// security event (consent.refused_by_policy, docs/recognised-apps.md): it is recorded, and the
// page says where access would have gone and that nothing was sent there.
func (a *authorizer) refuse(w http.ResponseWriter, r *http.Request, p *config.Project, e *pageError) {
	if e.Refused == nil {
		a.page(w, p, e)
		return
	}
	actor := "client:" + e.Client.ID
	_, person, signedIn := signin.Current(a.env, a.store, r)
	if signedIn {
		actor = person.ID
	}
	details := map[string]string{"client_id": e.Client.ID, "redirect_uri": e.To, "reason": e.Refused.Error()}
	var pr *site.PolicyRefusal
	if errors.As(e.Refused, &pr) {
		details["unrecognised_redirect_uris"] = strings.Join(pr.Refused, " ")
	}
	a.env.Record(r.Context(), store.AuditRecord{
		Project: p.Key, Actor: actor, Action: events.ConsentRefusedByPolicy, Target: e.Client.ID, Details: details,
		Reason: "only_recognised_apps",
	})
	paras := []string{e.Refused.Error() + "."}
	if pr != nil && len(pr.Refused) > 0 {
		paras = append(paras, pages.T(w, "This app can send access to %s, which is not a recognised app or an app on your device. Nothing was allowed and nothing was sent there.",
			strings.Join(pr.Refused, ", ")))
	} else {
		paras = append(paras, pages.T(w, "Nothing was allowed and nothing was sent to the app."))
	}
	paras = append(paras, pages.T(w, "If you need this app, ask an administrator of %s to recognise it.", signin.ProjectName(p)))
	d := pages.MessageData{
		Frame:      pages.Frame{Title: e.Heading, Project: signin.ProjectName(p)},
		Heading:    e.Heading,
		Paragraphs: paras,
	}
	if signedIn {
		d.SignedInAs = signin.DisplayName(person)
	}
	a.env.Pages.Message(w, e.Status, d)
}

func (a *authorizer) page(w http.ResponseWriter, p *config.Project, e *pageError) {
	a.env.Pages.Error(w, e.Status, pages.ErrorData{
		Frame:   pages.Frame{Title: e.Heading, Project: signin.ProjectName(p)},
		Heading: e.Heading,
		Message: pages.T(w, e.Message, e.Args...),
	})
}

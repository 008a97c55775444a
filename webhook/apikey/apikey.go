// Package apikey connects a service that issues API keys or personal access tokens instead of
// OAuth (a Connector with spec.apiKey, docs/api-key-connectors.md): the person pastes the key on
// a Latchkey page, never into an agent; Latchkey checks it with the connector's one check call,
// seals it like an upstream token, and token exchange hands it out as one.
//
// The page is reached as an OAuth Connect is: from the account page
// ({issuer}/account/api-key/{namespace}/{name}) and from a connect link
// ({issuer}/account/services/link/{code}/api-key, served by package links after its own
// checks). Both need the person signed in recently, with a passkey where the project requires a
// phishing-resistant sign-in; the form carries the session's anti-forgery token behind the
// router's cross-origin protection. The key travels only in the POST body: it is never in a URL,
// never logged, never written to an audit record, and never put back on a page.
package apikey

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/webhook/callback"
	"latchkey.dev/latchkey/webhook/pages"
	"latchkey.dev/latchkey/webhook/signin"
	"latchkey.dev/latchkey/webhook/site"
)

// PathPrefix is the account area's key page under the issuer; the connector's namespace and
// name follow it.
const PathPrefix = "/account/api-key/"

// Field is the form field that carries the key.
const Field = "api_key"

// maxFormBytes bounds the form: a key of upstream.MaxAPIKey and a token.
const maxFormBytes = 16 << 10

// errPersonGone: the project no longer lets the person sign in; nothing is saved for them.
var errPersonGone = errors.New("apikey: the person can no longer sign in to the project")

// Keys checks and saves pasted keys.
type Keys struct {
	env   *site.Env
	store Store
	vault *upstream.Vault
	hooks []callback.Hook
	// HTTP is the client for check calls; nil means http.DefaultClient. Its transport is used
	// through each connector's address guard.
	HTTP *http.Client
}

// New returns Keys that run hooks after each saved connection, as the upstream callback does
// (the connect link's hook closes the link and lets its agent use the connection).
func New(env *site.Env, st Store, hooks ...callback.Hook) *Keys {
	return &Keys{env: env, store: st, vault: &upstream.Vault{Store: st, Keyring: env.Keyring, Now: env.Clock}, hooks: hooks}
}

// Register mounts the account area's key page:
//
//	GET  /account/api-key/{connectorNamespace}/{connector}  the form
//	POST /account/api-key/{connectorNamespace}/{connector}  check the key and save it
func Register(rt site.Router, k *Keys) {
	rt.Page("GET "+PathPrefix+"{connectorNamespace}/{connector}", http.HandlerFunc(k.page))
	rt.Page("POST "+PathPrefix+"{connectorNamespace}/{connector}", http.HandlerFunc(k.post))
}

// Path is the account area's key page of c, with purpose reconnect when reconnect is set.
func Path(p *config.Project, c *config.Connector, reconnect bool) string {
	u := site.IssuerPath(p) + PathPrefix + c.Namespace + "/" + c.Name
	if reconnect {
		u += "?purpose=" + callback.PurposeReconnect
	}
	return u
}

func connectorOf(r *http.Request, p *config.Project) *config.Connector {
	c := p.Connectors[r.PathValue("connectorNamespace")+"/"+r.PathValue("connector")]
	if c == nil || c.APIKey == nil {
		return nil
	}
	return c
}

func purposeOf(r *http.Request) string {
	if r.URL.Query().Get("purpose") == callback.PurposeReconnect {
		return callback.PurposeReconnect
	}
	return callback.PurposeConnect
}

// recent answers the request with a sign-in and returns false unless the session's sign-in is
// recent, with the project's passkey policy: the same rule as Connect on the account page and a
// connect link (check 4).
func (k *Keys) recent(w http.ResponseWriter, r *http.Request, p *config.Project, s store.Session, back string) bool {
	ok, needPasskey := signin.Recent(p, s, k.env.Now())
	switch {
	case ok:
		return true
	case needPasskey:
		http.Redirect(w, r, signin.PasskeyURL(p, back), http.StatusSeeOther)
	default:
		http.Redirect(w, r, signin.URL(p, back, true), http.StatusSeeOther)
	}
	return false
}

func (k *Keys) page(w http.ResponseWriter, r *http.Request) {
	pages.NoStore(w.Header())
	p := site.Project(r)
	back := r.URL.RequestURI()
	s, person, ok := signin.Require(k.env, k.store, w, r, back)
	if !ok {
		return
	}
	c := connectorOf(r, p)
	if c == nil {
		k.unknown(w, p, person)
		return
	}
	if !k.recent(w, r, p, s, back) {
		return
	}
	k.Form(w, r, p, c, person, FormOptions{Action: back, Reconnect: purposeOf(r) == callback.PurposeReconnect})
}

func (k *Keys) post(w http.ResponseWriter, r *http.Request) {
	pages.NoStore(w.Header())
	p := site.Project(r)
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	form, ok := k.readForm(w, r, p)
	if !ok {
		return
	}
	back := r.URL.RequestURI()
	s, person, ok := signin.Require(k.env, k.store, w, r, back)
	if !ok {
		return
	}
	if !signin.CheckCSRF(k.env, r, form.Get("csrf_token")) {
		k.env.Pages.Error(w, http.StatusForbidden, pages.ErrorData{
			Frame:   pages.Frame{Title: "Form expired", Project: signin.ProjectName(p), SignedInAs: signin.DisplayName(person)},
			Message: "This form has expired. Go back, reload the page and try again. Nothing was changed.",
		})
		return
	}
	c := connectorOf(r, p)
	if c == nil {
		k.unknown(w, p, person)
		return
	}
	// The key is dropped here: the sign-in page cannot carry it, and must not.
	if !k.recent(w, r, p, s, back) {
		return
	}
	opts := FormOptions{Action: back, Reconnect: purposeOf(r) == callback.PurposeReconnect}
	conn, ok := k.Save(w, r, p, c, person, form.Get(Field), opts)
	if !ok {
		return
	}
	k.env.Pages.Message(w, http.StatusOK, pages.MessageData{
		Frame:   pages.Frame{Title: "Connected", Project: signin.ProjectName(p), SignedInAs: signin.DisplayName(person)},
		Heading: "Connected",
		Paragraphs: []string{
			pages.T(w, "Your %s account %s is now connected.", serviceName(c), conn.AccountName),
			pages.T(w, "Go back to the app — you can close this window."),
		},
		Actions: []pages.Action{{Label: "Your account", URL: site.IssuerPath(p) + "/account"}},
	})
}

// ReadForm reads a key form: one value per field. It answers the request and returns false when
// the form cannot be read.
func (k *Keys) readForm(w http.ResponseWriter, r *http.Request, p *config.Project) (url.Values, bool) {
	if err := r.ParseForm(); err == nil {
		repeated := false
		for _, v := range r.PostForm {
			repeated = repeated || len(v) > 1
		}
		if !repeated {
			return r.PostForm, true
		}
	}
	k.env.Pages.Error(w, http.StatusBadRequest, pages.ErrorData{Frame: pages.Frame{Project: signin.ProjectName(p)}, Message: "The form could not be read."})
	return nil, false
}

// FormOptions say where a key form posts and what it is for.
type FormOptions struct {
	// Action is the path the form posts to; Back where Cancel leads (the account page when
	// empty).
	Action, Back string
	// Reconnect words the page for a broken connection.
	Reconnect bool
	// Agent is the agent a connect link will let use the account; LinkID that link.
	Agent, LinkID string
}

// Form renders the key form for c. The caller has checked who is signed in, and how recently.
func (k *Keys) Form(w http.ResponseWriter, r *http.Request, p *config.Project, c *config.Connector, person store.Person, o FormOptions) {
	k.form(w, r, p, c, person, o, http.StatusOK, "")
}

func (k *Keys) form(w http.ResponseWriter, r *http.Request, p *config.Project, c *config.Connector, person store.Person, o FormOptions, status int, problem string) {
	pages.NoStore(w.Header())
	service := serviceName(c)
	heading := pages.T(w, "Connect your %s account", service)
	if o.Reconnect {
		heading = pages.T(w, "Reconnect your %s account", service)
	}
	back := o.Back
	if back == "" {
		back = site.IssuerPath(p) + "/account"
	}
	k.env.Pages.APIKey(w, status, pages.APIKeyData{
		Frame:   pages.Frame{Project: signin.ProjectName(p), SignedInAs: signin.DisplayName(person)},
		Heading: heading, Service: service, Hint: c.APIKey.Hint, Agent: o.Agent,
		Action: o.Action, Back: back, CSRF: signin.CSRFToken(k.env, r), Error: problem,
	})
}

// Save checks key with c's check call and, if the service accepts it, seals and stores it as
// person's connection, records it as the upstream callback records a connection, and runs the
// hooks (with a state naming o.LinkID, so a connect link's hook closes that link). The caller
// has checked who is signed in, how recently, and the form's anti-forgery token. When the key
// is not saved, Save answers the request with the form again, saying why, and returns false.
func (k *Keys) Save(w http.ResponseWriter, r *http.Request, p *config.Project, c *config.Connector, person store.Person, key string, o FormOptions) (store.Connection, bool) {
	ctx := r.Context()
	now := k.env.Now()
	// What a paste adds around the key is not part of it.
	key = strings.TrimSpace(key)
	purpose := callback.PurposeConnect
	if o.Reconnect {
		purpose = callback.PurposeReconnect
	}
	st := store.CallbackState{Project: p.Key, Subject: person.ID, Connector: c.Key, Purpose: purpose, LinkID: o.LinkID, CreatedAt: now}
	service := serviceName(c)
	if !upstream.ValidAPIKey(key) {
		// Nothing was sent anywhere, so nothing was started.
		k.form(w, r, p, c, person, o, http.StatusBadRequest,
			pages.T(w, "Paste the whole key: one line of letters, digits and symbols, without spaces. Nothing was saved."))
		return store.Connection{}, false
	}
	k.record(ctx, st, events.ConnectionStarted, "connector:"+c.Key, nil)
	acct, err := upstream.CheckAPIKey(ctx, k.HTTP, c, key)
	if err != nil {
		reason, status, problem := "service", http.StatusBadGateway,
			pages.T(w, "%s could not be reached to check the key. Nothing was saved. Try again in a moment.", service)
		switch {
		case errors.Is(err, upstream.ErrKeyRejected):
			reason, status, problem = "bad_key", http.StatusBadRequest,
				pages.T(w, "%s did not accept this key. Check that you copied all of it and that it is still valid, then try again. Nothing was saved.", service)
		case errors.Is(err, upstream.ErrTimeout):
			reason, status = "timeout", http.StatusGatewayTimeout
		case errors.Is(err, upstream.ErrNotAllowed):
			reason, problem = "address_not_allowed",
				pages.T(w, "%s cannot be reached from here, so the key was not checked and nothing was saved. Tell whoever runs this project.", service)
		}
		// The service's HTTP status only: what it sent back may echo the key.
		upstreamStatus, _ := upstream.Status(err)
		k.env.Log(ctx).Info("API key check failed", "project", p.Key, "connector", c.Key, "reason", reason, "upstream_status", upstreamStatus)
		k.record(ctx, st, events.ConnectionFailed, "connector:"+c.Key, map[string]string{"reason": reason})
		k.form(w, r, p, c, person, o, status, problem)
		return store.Connection{}, false
	}
	conn := store.Connection{
		ID: secret.NewID(), Project: p.Key, Subject: person.ID, Connector: c.Key,
		AccountID: acct.ID, AccountName: acct.Name, Status: store.ConnectionActive, CreatedAt: now, UpdatedAt: now,
	}
	k.vault.SealAPIKey(&conn, c, key)
	// As at the callback, the person is checked again where the connection is saved: one whose
	// access ended while the service was being asked does not come back with a connection.
	saved, err := k.store.FinishConnection(ctx, conn, now, func(stored store.Person) error {
		if cur := k.env.Config.Load().Project(p.Key); cur == nil || !site.PersonActive(cur, stored) {
			return errPersonGone
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrAccessEnded) || errors.Is(err, errPersonGone) {
		k.record(ctx, st, events.ConnectionFailed, "connector:"+c.Key, map[string]string{"reason": "access_ended"})
		k.env.Pages.Message(w, http.StatusForbidden, pages.MessageData{
			Frame:      pages.Frame{Title: "This connection was not finished", Project: signin.ProjectName(p)},
			Heading:    "This connection was not finished",
			Paragraphs: []string{"Your access to this project has ended. Nothing was connected."},
		})
		return store.Connection{}, false
	}
	if err != nil {
		k.env.ResponseLog(w).Error(err, "saving an API-key connection failed", "project", p.Key, "connector", c.Key)
		k.env.Pages.Error(w, http.StatusInternalServerError, pages.ErrorData{
			Frame:   pages.Frame{Title: "Something went wrong", Project: signin.ProjectName(p)},
			Message: "This did not work because of a problem on our side. Please try again in a moment.",
		})
		return store.Connection{}, false
	}
	k.record(ctx, st, events.ConnectionSaved, "connection:"+saved.ID, map[string]string{
		"account": saved.AccountName, "account_id": saved.AccountID, "owner": person.ID, "browser": "same",
	})
	for _, hook := range k.hooks {
		if err := hook(ctx, p, st, saved); err != nil {
			k.env.Log(ctx).Error(err, "connection hook failed", "project", p.Key, "connection", saved.ID)
		}
	}
	return saved, true
}

// record writes an audit record of the attempt as the callback does, with details.method
// api_key. Nothing of the key goes in.
func (k *Keys) record(ctx context.Context, st store.CallbackState, action, target string, details map[string]string) {
	if details == nil {
		details = map[string]string{}
	}
	details["connector"], details["purpose"], details["method"] = st.Connector, st.Purpose, "api_key"
	if st.LinkID != "" {
		details["link_id"] = st.LinkID
	}
	k.env.Record(ctx, store.AuditRecord{Project: st.Project, Time: k.env.Now(), Actor: st.Subject, Action: action, Target: target, Details: details})
}

func (k *Keys) unknown(w http.ResponseWriter, p *config.Project, person store.Person) {
	k.env.Pages.Error(w, http.StatusNotFound, pages.ErrorData{
		Frame:   pages.Frame{Title: "Unknown service", Project: signin.ProjectName(p), SignedInAs: signin.DisplayName(person)},
		Message: "This project has no such service. Go back to your account page and try again.",
	})
}

// serviceName names c as pages do.
func serviceName(c *config.Connector) string {
	if c.DisplayName != "" {
		return c.DisplayName
	}
	return c.Name
}

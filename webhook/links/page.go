package links

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/callback"
	"latchkey.dev/latchkey/webhook/pages"
	"latchkey.dev/latchkey/webhook/signin"
	"latchkey.dev/latchkey/webhook/site"
)

// maxCode bounds what is hashed from the path; real codes are 43 characters.
const maxCode = 256

// opened is a link that passed checks 1 to 4, with everything the offer needs.
type opened struct {
	p         *config.Project
	code      string
	link      store.Link
	connector *config.Connector
	agent     *site.Client
	person    store.Person
}

// check runs checks 1 to 4. When it returns false it has answered the request.
func (h *handler) check(w http.ResponseWriter, r *http.Request) (*opened, bool) {
	ctx := r.Context()
	p := site.Project(r)
	now := h.env.Now()
	code := r.PathValue("code")
	if len(code) > maxCode {
		code = ""
	}
	// Check 1. Every code costs one hash and one indexed lookup, found or not, and every code
	// that is not an open link of this project gets the same page.
	link, err := h.store.GetLinkByCode(ctx, secret.Hash(code), now)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		h.internal(w, p, err)
		return nil, false
	}
	if err != nil || link.Project != p.Key {
		h.env.Pages.NotFound(w)
		return nil, false
	}
	// A link outlives neither its connector nor its agent.
	connector := p.Connectors[link.Connector]
	agent, err := h.env.Client(ctx, p, link.ClientID)
	if errors.Is(err, site.ErrUnknownClient) || (err == nil && connector == nil) {
		h.env.Pages.NotFound(w)
		return nil, false
	}
	if err != nil {
		h.internal(w, p, err)
		return nil, false
	}

	// Check 2.
	sess, person, err := signin.Lookup(h.env, h.store, r)
	if err != nil {
		if errors.Is(err, signin.ErrNotSignedIn) {
			// Check 4 follows: ask for a sign-in that will pass it.
			signin.RedirectRecent(h.env, w, r, Path(p, code))
		} else {
			signin.Unavailable(h.env, w, r)
		}
		return nil, false
	}
	// Check 3 comes before freshness, in the order docs/connections-for-agents.md gives: whoever is
	// not the link's person is refused however recently they signed in, and is never asked to
	// sign in again for it.
	if person.ID != link.Subject {
		h.wrongPerson(w, r, p, code, link, person)
		return nil, false
	}
	// Check 4, with the project's passkey policy (docs/passkeys.md).
	if ok, needPasskey := signin.Recent(p, sess, now); !ok {
		if needPasskey {
			h.needPasskey(w, p, code, person)
			return nil, false
		}
		signin.Redirect(h.env, w, r, Path(p, code), true)
		return nil, false
	}
	return &opened{p: p, code: code, link: link, connector: connector, agent: agent, person: person}, true
}

func (h *handler) wrongPerson(w http.ResponseWriter, r *http.Request, p *config.Project, code string, link store.Link, person store.Person) {
	h.env.Record(r.Context(), store.AuditRecord{
		Project: p.Key, Time: h.env.Now(), Actor: person.ID, Action: events.LinkWrongPerson, Target: link.Subject, Reason: "wrong_person",
		Details: map[string]string{
			"link_id": link.ID, "kind": string(link.Kind), "connector": link.Connector, "client_id": link.ClientID,
		},
	})
	// Nothing here may say whose link it is, what it is for, or which agent asked.
	h.env.Pages.Message(w, http.StatusForbidden, pages.MessageData{
		Frame: pages.Frame{
			Title: "This link was made for another account", Project: signin.ProjectName(p),
			SignedInAs: signin.DisplayName(person),
		},
		Heading: "This link was made for another account",
		Paragraphs: []string{
			pages.T(w, "You are signed in as %s, and this link was made for someone else. Nothing has been connected or changed.", signin.DisplayName(person)),
			"If someone sent you this link, do not use it with your own accounts: whoever asked for it would get access to them. You can close this window.",
		},
		Actions: []pages.Action{{Label: "Sign in with another account", URL: signin.URL(p, Path(p, code), true)}},
	})
}

// page is GET: the checks, then what the link was made for.
func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	o, ok := h.check(w, r)
	if !ok {
		return
	}
	// Every check passed: the link's own person, signed in recently, sees what it offers.
	h.env.Record(r.Context(), store.AuditRecord{
		Project: o.p.Key, Actor: o.person.ID, Action: events.LinkOpened, Target: o.person.ID, ClientID: o.link.ClientID,
		Connector: o.link.Connector, Details: map[string]string{"link_id": o.link.ID, "kind": string(o.link.Kind)},
	})
	h.offer(w, r, o, http.StatusOK, "")
}

func (h *handler) offer(w http.ResponseWriter, r *http.Request, o *opened, status int, problem string) {
	service, agent := ServiceName(o.connector), AgentName(o.agent)
	base := Path(o.p, o.code)
	d := pages.LinkData{
		Frame:           pages.Frame{Project: signin.ProjectName(o.p), SignedInAs: signin.DisplayName(o.person)},
		Kind:            string(o.link.Kind),
		Service:         service,
		Agent:           agent,
		AgentRegistered: o.agent.Registered,
		ConnectAction:   base + "/connect",
		AllowAction:     base + "/allow",
		DeclineAction:   base + "/decline",
		CSRF:            signin.CSRFToken(h.env, r),
		Error:           problem,
		APIKey:          o.connector.APIKey != nil,
		Account:         o.link.Account,
	}
	conns, err := h.connections(r, o)
	if err != nil {
		h.internal(w, o.p, err)
		return
	}
	switch o.link.Kind {
	case store.LinkAllow:
		for _, c := range conns {
			// A link made for a named account offers that account only.
			if c.Status.Usable() && AccountMatches(c, o.link.Account) {
				d.Accounts = append(d.Accounts, pages.LinkAccount{ID: c.ID, Name: accountName(c)})
			}
		}
		if len(d.Accounts) == 0 {
			// The account went away or broke since the link was made: connecting is what is left.
			d.Kind = string(store.LinkConnect)
		} else if len(d.Accounts) > 1 {
			d.Accounts[0].Checked = true
		}
	case store.LinkReconnect:
		d.Broken = h.brokenName(r, o, conns)
	}
	switch {
	case store.LinkKind(d.Kind) == store.LinkAllow && o.link.Account != "":
		d.Heading = pages.T(w, "Let %s use your %s account %s?", agent, service, d.Accounts[0].Name)
	case store.LinkKind(d.Kind) == store.LinkAllow:
		d.Heading = pages.T(w, "Let %s use your %s account?", agent, service)
	case store.LinkKind(d.Kind) == store.LinkReconnect:
		d.Heading = pages.T(w, "Reconnect your %s account", service)
	case o.link.Account != "":
		d.Heading = pages.T(w, "Connect your %s account %s", service, o.link.Account)
	default:
		d.Heading = pages.T(w, "Connect your %s account", service)
	}
	// Connect answers its form with a redirect to the service; browsers hold that redirect to
	// the form-action of this page.
	if u, err := url.Parse(o.connector.AuthURL); err == nil && u.Host != "" {
		pages.AllowFormTargets(w, u.Scheme+"://"+u.Host)
	}
	h.env.Pages.Link(w, status, d)
}

// connections are the person's connections to the link's connector, oldest first.
func (h *handler) connections(r *http.Request, o *opened) ([]store.Connection, error) {
	all, err := h.store.ListConnections(r.Context(), o.p.Key, o.person.ID)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(c store.Connection) bool { return c.Connector != o.link.Connector }), nil
}

// AccountMatches reports whether c is the account an agent named: by the service's id for it,
// or by its name, compared without regard to case (service logins and e-mail addresses are
// case-insensitive). An empty name matches every account.
func AccountMatches(c store.Connection, account string) bool {
	return account == "" || c.AccountID == account || (c.AccountName != "" && strings.EqualFold(c.AccountName, account))
}

func accountName(c store.Connection) string {
	if c.AccountName != "" {
		return c.AccountName
	}
	return c.AccountID
}

// brokenName names the account a reconnect link is about: the one the agent named, else the
// one the agent was allowed to use, else any broken one.
func (h *handler) brokenName(r *http.Request, o *opened, conns []store.Connection) string {
	if o.link.Account != "" {
		for _, c := range conns {
			if AccountMatches(c, o.link.Account) {
				return accountName(c)
			}
		}
		return o.link.Account
	}
	perm, err := h.store.FindPermission(r.Context(), o.p.Key, o.person.ID, o.link.Connector, o.link.ClientID)
	if err == nil {
		for _, c := range conns {
			if c.ID == perm.ConnectionID {
				return accountName(c)
			}
		}
	}
	for _, c := range conns {
		if c.Status.NeedsPerson() {
			return accountName(c)
		}
	}
	return ""
}

// form runs checks 1 to 4 for a POST, then reads the form and checks the session's form token.
func (h *handler) form(w http.ResponseWriter, r *http.Request) (*opened, url.Values, bool) {
	o, ok := h.check(w, r)
	if !ok {
		return nil, nil, false
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		h.env.Pages.Error(w, http.StatusBadRequest, pages.ErrorData{
			Frame: pages.Frame{Title: "Form not readable", Project: signin.ProjectName(o.p)}, Message: "The form could not be read.",
		})
		return nil, nil, false
	}
	for _, v := range r.PostForm {
		if len(v) > 1 {
			h.env.Pages.Error(w, http.StatusBadRequest, pages.ErrorData{
				Frame: pages.Frame{Title: "Form not readable", Project: signin.ProjectName(o.p)}, Message: "The form could not be read.",
			})
			return nil, nil, false
		}
	}
	if !signin.CheckCSRF(h.env, r, r.PostForm.Get("csrf_token")) {
		h.env.Pages.Error(w, http.StatusForbidden, pages.ErrorData{
			Frame:   pages.Frame{Title: "Form expired", Project: signin.ProjectName(o.p), SignedInAs: signin.DisplayName(o.person)},
			Message: "This form has expired. Open the link again and try once more.",
		})
		return nil, nil, false
	}
	return o, r.PostForm, true
}

// connect starts the connection at the service, bound to this browser; the callback's hook
// lets the agent use it and closes the link.
func (h *handler) connect(w http.ResponseWriter, r *http.Request) {
	o, _, ok := h.form(w, r)
	if !ok {
		return
	}
	if o.connector.APIKey != nil {
		// The key is pasted on the link's own key page, which runs checks 1 to 4 again.
		http.Redirect(w, r, Path(o.p, o.code)+"/api-key", http.StatusSeeOther)
		return
	}
	purpose := callback.PurposeConnect
	if o.link.Kind == store.LinkReconnect {
		purpose = callback.PurposeReconnect
	}
	// A further account, or one the agent named: ask the service to let the person pick it
	// rather than hand back the account signed in there.
	conns, err := h.connections(r, o)
	if err != nil {
		h.internal(w, o.p, err)
		return
	}
	another := purpose == callback.PurposeConnect && (len(conns) > 0 || o.link.Account != "")
	authURL, err := h.begin(w, r, h.env, h.store, o.p, o.connector, o.person.ID, purpose, o.link.ID,
		callback.AnotherAccount(another, o.link.Account))
	if err != nil {
		h.internal(w, o.p, err)
		return
	}
	http.Redirect(w, r, authURL, http.StatusSeeOther)
}

// allow lets the agent use one of the person's working accounts.
func (h *handler) allow(w http.ResponseWriter, r *http.Request) {
	o, form, ok := h.form(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	conns, err := h.connections(r, o)
	if err != nil {
		h.internal(w, o.p, err)
		return
	}
	chosen := form.Get("connection_id")
	i := slices.IndexFunc(conns, func(c store.Connection) bool {
		return c.ID == chosen && c.Status.Usable() && AccountMatches(c, o.link.Account)
	})
	if i < 0 {
		h.offer(w, r, o, http.StatusBadRequest, pages.T(w, "Choose which %s account %s may use.", ServiceName(o.connector), AgentName(o.agent)))
		return
	}
	now := h.env.Now()
	// Closing first claims the link: of two submissions, or a submission racing a newer link,
	// only one goes on to change anything.
	if err := h.store.CloseLink(ctx, o.link.ID, store.LinkDone, now); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			h.env.Pages.NotFound(w)
			return
		}
		h.internal(w, o.p, err)
		return
	}
	if err := h.store.AllowAgent(ctx, store.AgentPermission{
		Project: o.p.Key, Subject: o.person.ID, Connector: o.link.Connector, ClientID: o.link.ClientID,
		ConnectionID: conns[i].ID, CreatedAt: now,
	}); err != nil {
		h.internal(w, o.p, err)
		return
	}
	h.env.Record(ctx, store.AuditRecord{
		Project: o.p.Key, Time: now, Actor: o.person.ID, Action: events.AgentAllowed, Target: "client:" + o.link.ClientID,
		Details: map[string]string{"connector": o.link.Connector, "connection_id": conns[i].ID, "link_id": o.link.ID,
			"account": conns[i].AccountName, "account_id": conns[i].AccountID},
	})
	h.done(w, o, accountName(conns[i]))
}

func (h *handler) done(w http.ResponseWriter, o *opened, account string) {
	service, agent := ServiceName(o.connector), AgentName(o.agent)
	first := pages.T(w, "%s may now use your %s account.", agent, service)
	if account != "" {
		first = pages.T(w, "%s may now use your %s account %s.", agent, service, account)
	}
	h.env.Pages.Message(w, http.StatusOK, pages.MessageData{
		Frame:      pages.Frame{Title: "Done", Project: signin.ProjectName(o.p), SignedInAs: signin.DisplayName(o.person)},
		Heading:    pages.T(w, "Done: go back to %s", agent),
		Paragraphs: []string{first, pages.T(w, "Go back to %s and ask it to try again. You can close this window.", agent)},
		Actions:    []pages.Action{{Label: "See your connected accounts", URL: site.IssuerPath(o.p) + "/account"}},
	})
}

// decline closes the link; the code then leads to the 404 page.
func (h *handler) decline(w http.ResponseWriter, r *http.Request) {
	o, _, ok := h.form(w, r)
	if !ok {
		return
	}
	now := h.env.Now()
	if err := h.store.CloseLink(r.Context(), o.link.ID, store.LinkDeclined, now); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			h.env.Pages.NotFound(w)
			return
		}
		h.internal(w, o.p, err)
		return
	}
	h.env.Record(r.Context(), store.AuditRecord{
		Project: o.p.Key, Time: now, Actor: o.person.ID, Action: events.LinkDeclined, Target: "client:" + o.link.ClientID, Reason: "declined_by_person",
		Details: map[string]string{"connector": o.link.Connector, "link_id": o.link.ID, "kind": string(o.link.Kind)},
	})
	service, agent := ServiceName(o.connector), AgentName(o.agent)
	h.env.Pages.Message(w, http.StatusOK, pages.MessageData{
		Frame:   pages.Frame{Title: "Declined", Project: signin.ProjectName(o.p), SignedInAs: signin.DisplayName(o.person)},
		Heading: "Declined",
		Paragraphs: []string{
			pages.T(w, "Nothing was connected, and %s cannot use your %s account through this link.", agent, service),
			"You can close this window.",
		},
	})
}

func (h *handler) internal(w http.ResponseWriter, p *config.Project, err error) {
	h.env.ResponseLog(w).Error(err, "connect link failed", "project", p.Key)
	h.env.Pages.Error(w, http.StatusInternalServerError, pages.ErrorData{
		Frame:   pages.Frame{Title: "Something went wrong", Project: signin.ProjectName(p)},
		Message: "This link could not be handled on our side. Please try again in a moment.",
	})
}

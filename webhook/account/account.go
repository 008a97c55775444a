// Package account is the signed-in person's account page: each connected account named as the
// service names it (so a person can spot a wrong account: the connect link's checks prove who the
// person is, not which account they picked at the service), when it was connected, whether it
// still works, which agents may use it, and the apps the person has authorised; with Connect,
// Reconnect, Disconnect, Remove access and Revoke.
//
// Every action is a POST carrying the session's anti-forgery token, behind the router's
// cross-origin protection, answered with a redirect back to the page (or, for Connect, to the
// service).
package account

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/webhook/apikey"
	"latchkey.dev/latchkey/webhook/callback"
	"latchkey.dev/latchkey/webhook/pages"
	"latchkey.dev/latchkey/webhook/signin"
	"latchkey.dev/latchkey/webhook/site"
)

// Paths under the issuer.
const (
	Path           = "/account"
	ConnectPath    = "/account/connect"
	DisconnectPath = "/account/disconnect"
	RemoveAgent    = "/account/agents/remove"
	RevokeApp      = "/account/apps/revoke"
	DefaultPath    = "/account/default"
	// ApprovalsPath is the "Waiting for you" page, served by webhook/ciba (ciba.PagePath).
	ApprovalsPath = "/account/approvals"
)

// notices are the only texts the page shows from its query string, so a crafted link cannot
// put words on it.
var notices = map[string]string{
	"disconnected":    "The account was disconnected. Agents can no longer use it.",
	"removed":         "The agent can no longer use that account.",
	"default":         "That account is now your default: agents allowed to use it get it unless they name another.",
	"revoked":         "The app's access was revoked.",
	"passkey-added":   "The passkey was added. You can sign in with it from now on.",
	"passkey-removed": "The passkey was removed. It can no longer sign you in.",
}

type handler struct {
	env   *site.Env
	store Store
	vault *upstream.Vault
}

// Register mounts the account page and its actions.
func Register(rt site.Router, env *site.Env, st Store) {
	h := &handler{env: env, store: st, vault: &upstream.Vault{Store: st, Keyring: env.Keyring, Now: env.Clock}}
	rt.Page("GET "+Path, http.HandlerFunc(h.page))
	rt.Page("POST "+ConnectPath, http.HandlerFunc(h.connect))
	rt.Page("POST "+DisconnectPath, http.HandlerFunc(h.disconnect))
	rt.Page("POST "+RemoveAgent, http.HandlerFunc(h.removeAgent))
	rt.Page("POST "+DefaultPath, http.HandlerFunc(h.setDefault))
	rt.Page("POST "+RevokeApp, http.HandlerFunc(h.revokeApp))
	h.registerPasskeys(rt)
}

//nolint:funlen // reads the person's connections, permissions, consents and passkeys and lays them out as the one page they make
func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	pages.NoStore(w.Header())
	p := site.Project(r)
	_, person, err := signin.Lookup(h.env, h.store, r)
	if errors.Is(err, signin.ErrNotSignedIn) {
		signin.Redirect(h.env, w, r, r.URL.RequestURI(), false)
		return
	}
	if err != nil {
		signin.Unavailable(h.env, w, r)
		return
	}
	ctx := r.Context()
	conns, err := h.store.ListConnections(ctx, p.Key, person.ID)
	if err != nil {
		h.internal(w, p, err)
		return
	}
	perms, err := h.store.ListPermissions(ctx, p.Key, person.ID)
	if err != nil {
		h.internal(w, p, err)
		return
	}
	grants, err := h.store.ListGrants(ctx, p.Key, person.ID)
	if err != nil {
		h.internal(w, p, err)
		return
	}
	keys, err := h.store.ListPasskeys(ctx, p.Key, person.ID)
	if err != nil {
		h.internal(w, p, err)
		return
	}
	waiting, err := h.store.ListApprovals(ctx, p.Key, person.ID, h.env.Now())
	if err != nil {
		h.internal(w, p, err)
		return
	}
	base := site.IssuerPath(p)
	d := pages.AccountData{
		Frame:             pages.Frame{Title: "Your account", Project: signin.ProjectName(p), SignedInAs: signin.DisplayName(person)},
		CSRF:              signin.CSRFToken(h.env, r),
		Notice:            notices[r.URL.Query().Get("done")],
		ConnectAction:     base + ConnectPath,
		DisconnectAction:  base + DisconnectPath,
		RemoveAgentAction: base + RemoveAgent,
		RevokeAppAction:   base + RevokeApp,
		DefaultAction:     base + DefaultPath,
		SignOut:           base + "/sign-out",
		Approvals:         base + ApprovalsPath,
		Waiting:           len(waiting),
	}
	accounts := map[string]int{}
	for _, c := range conns {
		accounts[c.Connector]++
	}
	names := map[string]string{}
	name := func(id string) string {
		if n, ok := names[id]; ok {
			return n
		}
		n := h.clientName(ctx, p, id)
		names[id] = n
		return n
	}
	connected := map[string]bool{}
	for _, c := range conns {
		connected[c.Connector] = true
		ac := pages.AccountConnection{
			ID:          c.ID,
			Service:     serviceName(p, c.Connector),
			Connector:   c.Connector,
			AccountName: c.AccountName,
			ConnectedAt: day(c.CreatedAt),
			State:       string(c.Status),
			Broken:      c.Status.NeedsPerson(),
			Default:     c.Default,
			// Choosing a default matters with several accounts, or when the person deleted
			// the default and chose none since.
			CanBeDefault: !c.Default && (accounts[c.Connector] > 1 || !hasDefault(conns, c.Connector)),
		}
		for _, perm := range perms {
			if perm.ConnectionID == c.ID {
				ac.Agents = append(ac.Agents, pages.AccountAgent{ClientID: perm.ClientID, Name: name(perm.ClientID)})
			}
		}
		d.Connections = append(d.Connections, ac)
	}
	var targets []string
	for _, c := range sortedConnectors(p) {
		// An Organisation connector's account is the project's, connected by an administrator
		// (docs/shared-connections.md): nobody connects their own.
		switch {
		case c.Shared:
		case !connected[c.Key]:
			d.Available = append(d.Available, pages.AccountConnector{Key: c.Key, Service: serviceName(p, c.Key)})
		default:
			d.Another = append(d.Another, pages.AccountConnector{Key: c.Key, Service: serviceName(p, c.Key)})
		}
		if o := origin(c.AuthURL); o != "" && !slices.Contains(targets, o) {
			targets = append(targets, o)
		}
	}
	for _, g := range grants {
		d.Apps = append(d.Apps, pages.AccountApp{ClientID: g.ClientID, Name: name(g.ClientID), Since: day(g.CreatedAt)})
	}
	// Connect answers its form with a redirect to the service, which browsers check against
	// this page's form-action.
	pages.AllowFormTargets(w, targets...)
	h.passkeyData(p, keys, &d)
	if d.PasskeysOffered {
		pages.AllowScripts(w)
	}
	h.env.Pages.Account(w, http.StatusOK, d)
}

// connect starts a connection from the account page and sends the browser to the service.
// Connecting needs a recent sign-in, as on a connect link (check 4), with the project's
// passkey policy: a browser left signed in on a shared computer is not enough to attach
// someone's account to this person, and where the project requires a phishing-resistant
// sign-in, neither is a password typed into a look-alike page.
func (h *handler) connect(w http.ResponseWriter, r *http.Request) {
	p, person, session, form, ok := h.action(w, r)
	if !ok {
		return
	}
	if ok, needPasskey := signin.Recent(p, session, h.env.Now()); !ok {
		back := site.IssuerPath(p) + Path
		if needPasskey {
			http.Redirect(w, r, signin.PasskeyURL(p, back), http.StatusSeeOther)
		} else {
			http.Redirect(w, r, signin.URL(p, back, true), http.StatusSeeOther)
		}
		return
	}
	c := p.Connectors[form.Get("connector")]
	if c == nil || c.Shared {
		h.env.Pages.Error(w, http.StatusBadRequest, pages.ErrorData{
			Frame:   pages.Frame{Title: "Unknown service", Project: signin.ProjectName(p), SignedInAs: signin.DisplayName(person)},
			Message: "This project has no such service. Go back to your account page and try again.",
		})
		return
	}
	purpose := callback.PurposeConnect
	if form.Get("purpose") == callback.PurposeReconnect {
		purpose = callback.PurposeReconnect
	}
	if c.APIKey != nil {
		// A service that issues keys: the person pastes one on Latchkey's own key page.
		http.Redirect(w, r, apikey.Path(p, c, purpose == callback.PurposeReconnect), http.StatusSeeOther)
		return
	}
	// Connecting a further account: the service is asked to let the person pick one
	// (docs/several-accounts.md); a reconnect is the same account again.
	another := purpose == callback.PurposeConnect && form.Get("another") == "yes"
	authURL, err := callback.Begin(w, r, h.env, h.store, p, c, person.ID, purpose, "", callback.AnotherAccount(another, ""))
	if err != nil {
		h.internal(w, p, err)
		return
	}
	http.Redirect(w, r, authURL, http.StatusSeeOther)
}

// disconnect revokes the connection at the service where it can, then deletes it and every
// agent's permission to use it. The service failing does not keep the person connected.
func (h *handler) disconnect(w http.ResponseWriter, r *http.Request) {
	p, person, _, form, ok := h.action(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	id := form.Get("connection_id")
	conn, err := h.store.GetConnection(ctx, p.Key, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && conn.Subject != person.ID) {
		h.back(w, r, p, "")
		return
	}
	if err != nil {
		h.internal(w, p, err)
		return
	}
	revoked := "not_supported"
	if c := p.Connectors[conn.Connector]; c != nil && c.RevocationURL != "" {
		revoked = "yes"
		if err := h.vault.Revoke(ctx, c, conn); err != nil {
			revoked = "failed"
			h.env.Log(r.Context()).Info("upstream revocation failed", "project", p.Key, "connector", c.Key, "error", err.Error())
		}
	}
	if err := h.store.DeleteConnection(ctx, p.Key, conn.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		h.internal(w, p, err)
		return
	}
	h.env.Record(ctx, store.AuditRecord{
		Project: p.Key, Actor: person.ID, Action: events.ConnectionDisconnected, Target: "connection:" + conn.ID,
		Details: map[string]string{"connector": conn.Connector, "account": conn.AccountName, "revoked": revoked},
	})
	h.back(w, r, p, "disconnected")
}

func (h *handler) removeAgent(w http.ResponseWriter, r *http.Request) {
	p, person, _, form, ok := h.action(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	connector, clientID, connID := form.Get("connector"), form.Get("client_id"), form.Get("connection_id")
	details := map[string]string{"connector": connector}
	var err error
	if connID != "" {
		// One account: the agent keeps the person's other accounts it may use. The store
		// matches the connection to this person, so another person's id removes nothing.
		err = h.store.DisallowAgent(ctx, p.Key, person.ID, connID, clientID)
		details["connection_id"] = connID
		if conn, cerr := h.store.GetConnection(ctx, p.Key, connID); cerr == nil && conn.Subject == person.ID {
			details["connector"], details["account"] = conn.Connector, conn.AccountName
		}
	} else {
		err = h.store.DeletePermission(ctx, p.Key, person.ID, connector, clientID)
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		h.internal(w, p, err)
		return
	}
	if err == nil {
		h.env.Record(ctx, store.AuditRecord{
			Project: p.Key, Actor: person.ID, Action: events.PermissionRemoved, Target: "client:" + clientID,
			Details: details,
		})
	}
	h.back(w, r, p, "removed")
}

// setDefault makes one of the person's accounts their default for its service: the account an
// agent allowed several of them gets when it names none (docs/several-accounts.md).
func (h *handler) setDefault(w http.ResponseWriter, r *http.Request) {
	p, person, _, form, ok := h.action(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	id := form.Get("connection_id")
	// The store changes only a connection of this person: another person's id is not found.
	err := h.store.SetDefaultConnection(ctx, p.Key, person.ID, id)
	if errors.Is(err, store.ErrNotFound) {
		h.back(w, r, p, "")
		return
	}
	if err != nil {
		h.internal(w, p, err)
		return
	}
	details := map[string]string{}
	if conn, err := h.store.GetConnection(ctx, p.Key, id); err == nil {
		details["connector"], details["account"] = conn.Connector, conn.AccountName
	}
	h.env.Record(ctx, store.AuditRecord{
		Project: p.Key, Actor: person.ID, Action: events.ConnectionDefaultSet, Target: "connection:" + id, Details: details,
	})
	h.back(w, r, p, "default")
}

// revokeApp withdraws the person's consent to an app, which ends its tokens, and also every
// permission it had to use the person's connected accounts: an app re-authorised later must be
// allowed again.
func (h *handler) revokeApp(w http.ResponseWriter, r *http.Request) {
	p, person, _, form, ok := h.action(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	clientID := form.Get("client_id")
	// One transaction (store.Apps): a failure leaves the app's access as it was, not half-ended.
	if err := h.store.RevokeApp(ctx, p.Key, person.ID, clientID, h.env.Now()); err != nil && !errors.Is(err, store.ErrNotFound) {
		h.internal(w, p, err)
		return
	}
	h.env.Record(ctx, store.AuditRecord{Project: p.Key, Actor: person.ID, Action: events.GrantRevoked, Target: "client:" + clientID})
	h.back(w, r, p, "revoked")
}

// action runs the checks every POST shares (signin.PostedForm).
func (h *handler) action(w http.ResponseWriter, r *http.Request) (*config.Project, store.Person, store.Session, url.Values, bool) {
	p := site.Project(r)
	session, person, form, ok := signin.PostedForm(h.env, h.store, w, r, site.IssuerPath(p)+Path)
	return p, person, session, form, ok
}

func (h *handler) back(w http.ResponseWriter, r *http.Request, p *config.Project, notice string) {
	u := site.IssuerPath(p) + Path
	if notice != "" {
		u += "?done=" + notice
	}
	http.Redirect(w, r, u, http.StatusSeeOther)
}

func (h *handler) internal(w http.ResponseWriter, p *config.Project, err error) {
	h.env.ResponseLog(w).Error(err, "account page failed", "project", p.Key)
	h.env.Pages.Error(w, http.StatusInternalServerError, pages.ErrorData{
		Frame:   pages.Frame{Title: "Something went wrong", Project: signin.ProjectName(p)},
		Message: "This did not work because of a problem on our side. Please try again in a moment.",
	})
}

// clientName names an agent for the person. Declared clients and registered ones are read
// locally; a client ID metadata document is named by its address, since fetching documents to
// draw a page would let any listed client make the server call out.
func (h *handler) clientName(ctx context.Context, p *config.Project, id string) string {
	if c := p.Clients[id]; c != nil {
		if c.Name != "" {
			return c.Name
		}
		return id
	}
	if strings.HasPrefix(id, "https://") {
		return id
	}
	c, err := h.store.GetClient(ctx, p.Key, id)
	if err != nil || c.Name == "" {
		return id
	}
	return c.Name
}

// hasDefault reports whether one of conns to connector is the default.
func hasDefault(conns []store.Connection, connector string) bool {
	return slices.ContainsFunc(conns, func(c store.Connection) bool { return c.Connector == connector && c.Default })
}

func serviceName(p *config.Project, key string) string {
	c := p.Connectors[key]
	switch {
	case c == nil:
		return key
	case c.DisplayName != "":
		return c.DisplayName
	}
	return c.Name
}

func sortedConnectors(p *config.Project) []*config.Connector {
	out := make([]*config.Connector, 0, len(p.Connectors))
	for _, c := range p.Connectors {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *config.Connector) int {
		if n := strings.Compare(serviceName(p, a.Key), serviceName(p, b.Key)); n != 0 {
			return n
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out
}

func origin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

func day(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2 January 2006")
}

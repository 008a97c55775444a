package ciba

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"latchkey.dev/latchkey/internal/authzdetails"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/pages"
	"latchkey.dev/latchkey/webhook/signin"
	"latchkey.dev/latchkey/webhook/site"
)

// notices are the only texts the page shows from its query string, so a crafted link cannot
// put words on it.
var notices = map[string]string{
	"approved":  "You approved the request. The agent gets access once it asks again.",
	"denied":    "You denied the request.",
	"gone":      "That request is no longer waiting: it was answered, it expired, or it was not yours.",
	"blocked":   "The agent can no longer ask you for approvals. Its waiting requests were denied.",
	"unblocked": "The agent can ask you for approvals again.",
}

// page is "Waiting for you": the person's pending requests, shown only after a recent sign-in
// (with a passkey where the Project requires one), since the page is where they are approved.
func (f *flow) page(w http.ResponseWriter, r *http.Request) {
	pages.NoStore(w.Header())
	p := site.Project(r)
	session, person, err := signin.Lookup(f.env, f.store, r)
	if errors.Is(err, signin.ErrNotSignedIn) {
		signin.RedirectRecent(f.env, w, r, r.URL.RequestURI())
		return
	}
	if err != nil {
		signin.Unavailable(f.env, w, r)
		return
	}
	if !f.recent(w, r, p, session) {
		return
	}
	ctx := r.Context()
	list, err := f.store.ListApprovals(ctx, p.Key, person.ID, f.env.Now())
	if err != nil {
		f.internal(w, p, err)
		return
	}
	blocks, err := f.store.ListBlockedClients(ctx, p.Key, person.ID)
	if err != nil {
		f.internal(w, p, err)
		return
	}
	base := site.IssuerPath(p)
	d := pages.ApprovalsData{
		Frame:  pages.Frame{Title: "Waiting for you", Project: signin.ProjectName(p), SignedInAs: signin.DisplayName(person)},
		CSRF:   signin.CSRFToken(f.env, r),
		Notice: notices[r.URL.Query().Get("done")],
		Decide: base + DecidePath, Block: base + BlockPath, Unblock: base + UnblockPath, Back: base + "/account",
	}
	lang := pages.Printer(pages.LanguageOf(w))
	pr := authzdetails.PrinterFunc(func(k string, args ...any) string { return lang.Sprintf(k, args...) })
	for _, a := range list {
		d.Requests = append(d.Requests, pages.ApprovalRequest{
			ID: a.ID, Agent: f.clientName(ctx, p, a.ClientID), ClientID: a.ClientID, NotifyHost: notifyHost(p, a),
			Message: a.BindingMessage, Scopes: a.Scopes, Details: Describe(p, a.AuthorizationDetails, pr),
			Expires: a.ExpiresAt.UTC().Format("2 January 2006, 15:04 UTC"),
		})
	}
	for _, b := range blocks {
		d.Blocked = append(d.Blocked, pages.ApprovalAgent{ClientID: b.ClientID, Name: f.clientName(ctx, p, b.ClientID)})
	}
	f.env.Pages.Approvals(w, http.StatusOK, d)
}

// decide approves or denies one request. The store changes only a pending, unexpired request
// of the signed-in person, so another person's id changes nothing.
func (f *flow) decide(w http.ResponseWriter, r *http.Request) {
	p, person, session, form, ok := f.action(w, r)
	if !ok || !f.recent(w, r, p, session) {
		return
	}
	status, action, notice := store.ApprovalDenied, events.ApprovalDenied, "denied"
	switch form.Get("decision") {
	case "approve":
		status, action, notice = store.ApprovalApproved, events.ApprovalApproved, "approved"
	case "deny":
	default:
		f.back(w, r, p, "")
		return
	}
	ctx := r.Context()
	a, err := f.store.DecideApproval(ctx, p.Key, person.ID, form.Get("id"), status, f.env.Now())
	if errors.Is(err, store.ErrNotFound) {
		f.back(w, r, p, "gone")
		return
	}
	if err != nil {
		f.internal(w, p, err)
		return
	}
	f.env.Record(ctx, store.AuditRecord{
		Project: p.Key, Actor: person.ID, Action: action, Target: "client:" + a.ClientID, ClientID: a.ClientID,
		Details: map[string]string{"scope": strings.Join(a.Scopes, " ")},
	})
	f.ping(ctx, p, a)
	f.back(w, r, p, notice)
}

// block stops a client from asking the person, and denies what it is waiting for. Blocking
// protects the person, so it asks for no recent sign-in.
func (f *flow) block(w http.ResponseWriter, r *http.Request) {
	p, person, _, form, ok := f.action(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	clientID, now := form.Get("client_id"), f.env.Now()
	if clientID == "" {
		f.back(w, r, p, "")
		return
	}
	if err := f.store.BlockClient(ctx, store.ApprovalBlock{Project: p.Key, Subject: person.ID, ClientID: clientID, CreatedAt: now}); err != nil {
		f.internal(w, p, err)
		return
	}
	list, err := f.store.ListApprovals(ctx, p.Key, person.ID, now)
	if err != nil {
		f.internal(w, p, err)
		return
	}
	for _, a := range list {
		if a.ClientID != clientID {
			continue
		}
		if a, err := f.store.DecideApproval(ctx, p.Key, person.ID, a.ID, store.ApprovalDenied, now); err == nil {
			f.ping(ctx, p, a)
		}
	}
	f.env.Record(ctx, store.AuditRecord{Project: p.Key, Actor: person.ID, Action: events.ApprovalBlocked, Target: "client:" + clientID, ClientID: clientID})
	f.back(w, r, p, "blocked")
}

func (f *flow) unblock(w http.ResponseWriter, r *http.Request) {
	p, person, _, form, ok := f.action(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	clientID := form.Get("client_id")
	err := f.store.UnblockClient(ctx, p.Key, person.ID, clientID)
	if errors.Is(err, store.ErrNotFound) {
		f.back(w, r, p, "")
		return
	}
	if err != nil {
		f.internal(w, p, err)
		return
	}
	f.env.Record(ctx, store.AuditRecord{Project: p.Key, Actor: person.ID, Action: events.ApprovalUnblocked, Target: "client:" + clientID, ClientID: clientID})
	f.back(w, r, p, "unblocked")
}

// recent sends a person whose sign-in is not recent (or not by passkey where the Project
// requires one) to sign in again and back to the page, and reports whether they may go on.
func (f *flow) recent(w http.ResponseWriter, r *http.Request, p *config.Project, s store.Session) bool {
	ok, needPasskey := signin.Recent(p, s, f.env.Now())
	if ok {
		return true
	}
	back := site.IssuerPath(p) + PagePath
	if needPasskey {
		http.Redirect(w, r, signin.PasskeyURL(p, back), http.StatusSeeOther)
	} else {
		http.Redirect(w, r, signin.URL(p, back, true), http.StatusSeeOther)
	}
	return false
}

// action runs the checks every POST shares (signin.PostedForm).
func (f *flow) action(w http.ResponseWriter, r *http.Request) (*config.Project, store.Person, store.Session, url.Values, bool) {
	p := site.Project(r)
	session, person, form, ok := signin.PostedForm(f.env, f.store, w, r, site.IssuerPath(p)+PagePath)
	return p, person, session, form, ok
}

func (f *flow) back(w http.ResponseWriter, r *http.Request, p *config.Project, notice string) {
	u := site.IssuerPath(p) + PagePath
	if notice != "" {
		u += "?done=" + notice
	}
	http.Redirect(w, r, u, http.StatusSeeOther)
}

func (f *flow) internal(w http.ResponseWriter, p *config.Project, err error) {
	f.env.ResponseLog(w).Error(err, "approvals page failed", "project", p.Key)
	f.env.Pages.Error(w, http.StatusInternalServerError, pages.ErrorData{
		Frame:   pages.Frame{Title: "Something went wrong", Project: signin.ProjectName(p)},
		Message: "This did not work because of a problem on our side. Please try again in a moment.",
	})
}

// clientName names an agent: a declared client by its name; anything else (a client since
// removed from the Project) by its id.
func (f *flow) clientName(_ context.Context, p *config.Project, id string) string {
	if c := p.Clients[id]; c != nil {
		return agentName(c)
	}
	return id
}

// notifyHost is the host a ping client is told at, "" for a poll client.
func notifyHost(p *config.Project, a store.Approval) string {
	c := p.Clients[a.ClientID]
	if a.DeliveryMode != modePing || c == nil {
		return ""
	}
	u, err := url.Parse(c.BackchannelNotificationEndpoint)
	if err != nil {
		return ""
	}
	return u.Host
}

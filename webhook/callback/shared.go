package callback

import (
	"errors"
	"net/http"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/pages"
	"latchkey.dev/latchkey/webhook/signin"
	"latchkey.dev/latchkey/webhook/site"
)

// Organisation-shared connections (docs/shared-connections.md). An administrator's create in
// the admin API answers a start URL, {issuer}/shared-connections/start/{code}: single use,
// short-lived, only its hash stored. Opening it shows a page whose button (a POST, so link
// previews and scanners that fetch the URL spend nothing) takes the start and begins the
// connection exactly as a person's begins: a state row, a binding cookie in this browser, the
// service's authorization URL. The callback finishes it only in the browser holding that
// cookie; there is no confirmation page, since no person signs in for it, and a browser signed
// in as a person does not change that (the shared subject is nobody's).

// SharedStartPattern is the start page's route under the issuer.
const SharedStartPattern = "/shared-connections/start/{code}"

// PurposeShared is the purpose of a shared connection's state row.
const PurposeShared = "shared"

func (h *handler) sharedStartPage(w http.ResponseWriter, r *http.Request) {
	headers(w)
	if r.Method == http.MethodHead {
		return
	}
	p := site.Project(r)
	code := r.PathValue("code")
	if !param(code) {
		h.startUnusable(w, r, p, "")
		return
	}
	h.env.Pages.Message(w, http.StatusOK, pages.MessageData{
		Frame:   pages.Frame{Title: "Connect a shared account", Project: signin.ProjectName(p)},
		Heading: "Connect a shared account",
		Paragraphs: []string{
			"An administrator of this project asked to connect the account that the project's agents share. " +
				"The account you sign in with at the service next is used by every agent the project allows, for every person.",
			"Sign in there with the organisation's service account, not your own. This address works once.",
		},
		Actions: []pages.Action{{Label: "Connect the shared account", URL: site.IssuerPath(p) + "/shared-connections/start/" + code,
			Post: true, Primary: true}},
	})
}

func (h *handler) sharedStart(w http.ResponseWriter, r *http.Request) {
	headers(w)
	p := site.Project(r)
	code := r.PathValue("code")
	if !param(code) {
		h.startUnusable(w, r, p, "")
		return
	}
	ctx := r.Context()
	start, err := h.store.TakeSharedStart(ctx, secret.Hash(code), h.env.Now())
	if errors.Is(err, store.ErrNotFound) || (err == nil && start.Project != p.Key) {
		h.startUnusable(w, r, p, start.Connector)
		return
	}
	if err != nil {
		h.internal(w, p, err)
		return
	}
	c := p.Connectors[start.Connector]
	if c == nil || !c.Shared {
		h.startUnusable(w, r, p, start.Connector)
		return
	}
	authURL, err := Begin(w, r, h.env, h.store, p, c, store.SharedSubject(c.Key), PurposeShared, start.ID)
	if err != nil {
		h.internal(w, p, err)
		return
	}
	h.env.Record(ctx, store.AuditRecord{Project: p.Key, Time: h.env.Now(), Actor: start.Actor, Action: events.SharedConnectionOpened,
		Target: "connector:" + c.Key, Details: map[string]string{"connector": c.Key, "start": start.ID}})
	http.Redirect(w, r, authURL, http.StatusSeeOther)
}

// startUnusable answers a start URL that was used, expired, never existed or belongs to
// another project alike.
func (h *handler) startUnusable(w http.ResponseWriter, r *http.Request, p *config.Project, connector string) {
	details := map[string]string{"reason": "start_unusable"}
	target := "project:" + p.Key
	if connector != "" {
		details["connector"], target = connector, "connector:"+connector
	}
	h.env.Record(r.Context(), store.AuditRecord{Project: p.Key, Time: h.env.Now(), Actor: "system", Action: events.SharedConnectionRefused,
		Target: target, Details: details})
	h.page(w, p, http.StatusBadRequest, "This address cannot be used",
		"It has expired or has already been used. Nothing was connected. Ask for a new one with kubectl latchkey shared connect.")
}

// sharedCallback finishes a shared connection's callback: only in the browser that opened the
// start URL. Another browser is refused and the attempt stays, so a stranger holding the
// service's redirect cannot end the administrator's attempt either.
func (h *handler) sharedCallback(w http.ResponseWriter, r *http.Request, p *config.Project, at attempt, code string) {
	binding := readBinding(r, h.env)
	if binding == "" || !secret.HashEqual(binding, at.st.BindingHash) {
		h.record(r.Context(), p, at.st, events.SharedConnectionRefused, "connector:"+at.c.Key, map[string]string{"reason": "other_browser"})
		h.page(w, p, http.StatusForbidden, "This connection was started in another browser",
			"A shared account is connected only in the browser that opened its start address. Nothing was connected.")
		return
	}
	h.finish(w, r, p, at.c, at.stateHash, code, events.SharedConnectionSaved, true, func(s store.CallbackState) error {
		if s.Project != p.Key || s.Subject != at.st.Subject || !secret.HashEqual(binding, s.BindingHash) {
			return errMismatch
		}
		return nil
	})
}

// saveShared stores the shared account in place of any other, and revokes the one it replaced
// at the service where the Connector can.
func (h *handler) saveShared(w http.ResponseWriter, r *http.Request, p *config.Project, c *config.Connector, st store.CallbackState, conn store.Connection, details map[string]string) {
	ctx := r.Context()
	saved, replaced, err := h.store.SaveSharedConnection(ctx, conn)
	if err != nil {
		h.internal(w, p, err)
		return
	}
	for _, old := range replaced {
		revoked := "yes"
		if err := h.vault.Revoke(ctx, c, old); err != nil {
			revoked = "failed"
			h.env.Log(ctx).Info("revoking a replaced shared account failed", "project", p.Key, "connector", c.Key, "error", err.Error())
		} else if c.RevocationURL == "" {
			revoked = "not_supported"
		}
		details["replaced"], details["replaced_revoked"] = old.AccountName, revoked
	}
	details["account"], details["account_id"], details["start"] = saved.AccountName, saved.AccountID, st.LinkID
	delete(details, "owner")
	h.record(ctx, p, st, events.SharedConnectionSaved, "connection:"+saved.ID, details)
	clearBinding(w, h.env, p, c)
	h.env.Pages.Message(w, http.StatusOK, pages.MessageData{
		Frame:   pages.Frame{Title: "Connected", Project: signin.ProjectName(p)},
		Heading: "Connected",
		Paragraphs: []string{
			pages.T(w, "The shared %s account %s is now connected for this project.", serviceName(c), saved.AccountName),
			"The agents the project allows use it from now on. You can close this window.",
		},
	})
}

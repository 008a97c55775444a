package links

import (
	"context"
	"errors"
	"fmt"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/site"
)

// Hook returns the callback hook that finishes a connect link: when a connection started from
// a link (st.LinkID) has been saved, it closes the link as done and lets the link's agent use
// that connection. A link that was declined, replaced or finished meanwhile is left alone: the
// connection stays saved (it is the person's own account, seen on their account page), but no
// agent gets to use it through a link the person no longer stands behind.
func Hook(env *site.Env, links HookStore) HookFunc {
	return func(ctx context.Context, p *config.Project, st store.CallbackState, conn store.Connection) error {
		if st.LinkID == "" {
			return nil
		}
		link, err := links.GetLink(ctx, st.LinkID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("links: reading link %s: %w", st.LinkID, err)
		}
		// The state row and the connection were made for the link's own person and service;
		// anything else is not this link's business.
		if link.Project != p.Key || link.Subject != st.Subject || link.Subject != conn.Subject ||
			link.Connector != conn.Connector || link.State != store.LinkOpen {
			return nil
		}
		// A link made for a named account is finished by that account only: the person may
		// have signed in to another one at the service. The connection stays theirs, the link
		// stays open, and the agent gets no account the page did not name.
		if !AccountMatches(conn, link.Account) {
			return nil
		}
		now := env.Now()
		if err := links.CloseLink(ctx, link.ID, store.LinkDone, now); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return nil
			}
			return fmt.Errorf("links: closing link %s: %w", link.ID, err)
		}
		if err := links.AllowAgent(ctx, store.AgentPermission{
			Project: p.Key, Subject: link.Subject, Connector: link.Connector, ClientID: link.ClientID,
			ConnectionID: conn.ID, CreatedAt: now,
		}); err != nil {
			return fmt.Errorf("links: allowing %s to use connection %s: %w", link.ClientID, conn.ID, err)
		}
		env.Record(ctx, store.AuditRecord{
			Project: p.Key, Time: now, Actor: link.Subject, Action: events.AgentAllowed, Target: "client:" + link.ClientID,
			Details: map[string]string{"connector": link.Connector, "connection_id": conn.ID, "link_id": link.ID, "kind": string(link.Kind),
				"account": conn.AccountName, "account_id": conn.AccountID},
		})
		return nil
	}
}

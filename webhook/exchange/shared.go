package exchange

import (
	"context"
	"errors"
	"slices"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/webhook/links"
	"latchkey.dev/latchkey/webhook/oauth"
	"latchkey.dev/latchkey/webhook/site"
)

// shared answers an exchange for an Organisation connector (docs/shared-connections.md): the
// token of the one account an administrator connected for the project, to a client the
// Project names for it in spec.sharedConnections. By the time it runs, the subject token was
// checked as for any exchange: a live access token of a person who may still sign in, issued
// to or for the requesting client, its DPoP key held, the client permitted for the connector
// and its agent allowed by the redirect policy. There is no connect link: a person cannot
// connect or mend the shared account, so the refusals name an administrator instead.
func (g *Grant) shared(ctx context.Context, req *oauth.TokenRequest, subject store.Token, agent *site.Client, c *config.Connector, requested []string, record bool) (Handout, error) {
	p, client := req.Project, req.Client
	service := links.ServiceName(c)
	if !sharedPermitted(client, p.Clients[client.ID], c) {
		g.record(ctx, req, subject.Subject, c, "shared_not_permitted", map[string]string{"agent": agent.ID})
		return Handout{}, oauth.ErrUnauthorizedClient.WithDescription("the project does not let this client use the shared " + service + " account")
	}
	conns, err := g.store.ListConnections(ctx, p.Key, store.SharedSubject(c.Key))
	if err != nil {
		return Handout{}, oauth.Internal(err)
	}
	i := slices.IndexFunc(conns, func(x store.Connection) bool { return x.Connector == c.Key })
	if i < 0 {
		g.record(ctx, req, subject.Subject, c, "shared_connection_missing", map[string]string{"agent": agent.ID})
		return Handout{}, oauth.ErrInvalidGrant.WithDescription("no shared " + service + " account is connected for this project; an administrator connects it (kubectl latchkey shared connect)")
	}
	conn := conns[i]
	broken := func() error {
		g.record(ctx, req, subject.Subject, c, "shared_connection_broken", map[string]string{"agent": agent.ID, "shared_account": conn.AccountName})
		return oauth.ErrInvalidGrant.WithDescription("the shared " + service + " account stopped working; an administrator connects it again (kubectl latchkey shared connect)")
	}
	if !conn.Status.Usable() {
		return Handout{}, broken()
	}
	tok, err := g.token(ctx, c, conn)
	switch {
	case err == nil:
	case errors.Is(err, upstream.ErrReconnect), errors.Is(err, secret.ErrUnknownKey), errors.Is(err, secret.ErrOpen):
		return Handout{}, broken()
	case errors.Is(err, store.ErrNotFound):
		return Handout{}, oauth.ErrTemporarilyUnavailable.WithDescription("the shared connection changed while it was read; try again")
	case errors.Is(err, upstream.ErrTimeout):
		g.record(ctx, req, subject.Subject, c, "upstream_timeout", nil)
		return Handout{}, oauth.ErrTemporarilyUnavailable.WithDescription(service + " did not answer in time; try again")
	case errors.Is(err, upstream.ErrService):
		g.record(ctx, req, subject.Subject, c, "upstream_error", nil)
		g.env.Log(ctx).Error(err, "connected service refused a refresh of a shared connection", "project", p.Key, "connector", c.Key)
		return Handout{}, oauth.ErrTemporarilyUnavailable.WithDescription(service + " refused Latchkey's request; try again later")
	default:
		return Handout{}, oauth.Internal(err)
	}
	if len(requested) > 0 && len(conn.Scopes) > 0 && !oauth.Subset(requested, conn.Scopes) {
		g.record(ctx, req, subject.Subject, c, "scope_not_granted", map[string]string{"shared_account": conn.AccountName})
		return Handout{}, oauth.ErrInvalidScope.WithDescription("the shared account was not granted the requested scope")
	}
	// The record names both: the person whose agent used the account (the subject) and the
	// shared account (details), stored before the answer as every handout is (decision 0054).
	// The chain was checked before (Grant): here it is only named.
	chain, _, _ := actingChain(subject, client)
	r := auditRecord(req, subject.Subject, c, "", withChain(map[string]string{
		"agent": agent.ID, "connection_id": conn.ID, "shared_account": conn.AccountName, "shared_account_id": conn.AccountID,
	}, chain))
	r.Action = events.SharedTokenExchanged
	if record {
		if err := g.env.RecordHandout(ctx, r); err != nil {
			return Handout{}, oauth.Internal(err)
		}
	}
	return Handout{Token: tok, Connection: conn, Subject: subject.Subject}, nil
}

// sharedPermitted: only a declared OAuthClient the Project names for the connector. A
// dynamically registered client or one described by a metadata document never is, whatever
// it calls itself: its name is its own claim, and a shared account serves every person's
// agents at once.
func sharedPermitted(client *site.Client, declared *config.Client, c *config.Connector) bool {
	if client.Registered || declared == nil || declared.Source == "" {
		return false
	}
	return slices.Contains(c.SharedClients, declared.Source)
}

package sqlstore

import (
	"context"
	"errors"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

const clientCols = `project, id, secret_hash, registration_token_hash, name, uri, logo_uri, redirect_uris,
grant_types, response_types, token_endpoint_auth_method, scope, metadata, created_at, updated_at`

var (
	qCreateClient = sqlText(`INSERT INTO clients (` + clientCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	qGetClient    = sqlText(`SELECT ` + clientCols + ` FROM clients WHERE project = ? AND id = ?`)
	qLockClient   = sqlText(`SELECT ` + clientCols + ` FROM clients WHERE project = ? AND id = ?` + forUpdate)
	qUpdateClient = sqlText(`UPDATE clients SET secret_hash = ?, registration_token_hash = ?, name = ?, uri = ?,
logo_uri = ?, redirect_uris = ?, grant_types = ?, response_types = ?, token_endpoint_auth_method = ?, scope = ?,
metadata = ?, updated_at = ? WHERE project = ? AND id = ?`)
	qDeleteClient      = sqlText(`DELETE FROM clients WHERE project = ? AND id = ?`)
	qDeleteClientGrant = sqlText(`DELETE FROM grants WHERE project = ? AND client_id = ?`)
	qDeleteClientPerm  = sqlText(`DELETE FROM agent_permissions WHERE project = ? AND client_id = ?`)
	qListClients       = sqlText(`SELECT ` + clientCols + ` FROM clients WHERE project = ? ORDER BY created_at, id`)
)

func scanClient(c *store.Client) func(scanner) error {
	return func(r scanner) error {
		var redirects, grants, responses string
		var created, updated int64
		if err := r.Scan(&c.Project, &c.ID, &c.SecretHash, &c.RegistrationTokenHash, &c.Name, &c.URI, &c.LogoURI,
			&redirects, &grants, &responses, &c.TokenEndpointAuthMethod, &c.Scope, &c.Metadata, &created, &updated); err != nil {
			return err
		}
		var err error
		if c.RedirectURIs, err = fromList(redirects); err != nil {
			return err
		}
		if c.GrantTypes, err = fromList(grants); err != nil {
			return err
		}
		if c.ResponseTypes, err = fromList(responses); err != nil {
			return err
		}
		c.CreatedAt, c.UpdatedAt = fromNS(created), fromNS(updated)
		return nil
	}
}

func (s *Store) CreateClient(ctx context.Context, c store.Client) (err error) {
	defer s.observe(ctx, "CreateClient", time.Now(), &err)
	_, err = s.wexec(ctx, qCreateClient, c.Project, c.ID, blob(c.SecretHash), blob(c.RegistrationTokenHash),
		c.Name, c.URI, c.LogoURI, list(c.RedirectURIs), list(c.GrantTypes), list(c.ResponseTypes),
		c.TokenEndpointAuthMethod, c.Scope, blob(c.Metadata), ns(c.CreatedAt), ns(c.UpdatedAt))
	return conflict(err)
}

func (s *Store) GetClient(ctx context.Context, project, id string) (_ store.Client, err error) {
	defer s.observe(ctx, "GetClient", time.Now(), &err)
	var c store.Client
	err = s.reader().row(ctx, scanClient(&c), qGetClient, project, id)
	return c, err
}

// UpdateClient runs fn inside the write transaction, so concurrent updates of one client apply
// one after another. fn must not call the store. Project, ID and CreatedAt cannot be changed.
func (s *Store) UpdateClient(ctx context.Context, project, id string, fn func(store.Client) (store.Client, error)) (_ store.Client, err error) {
	defer s.observe(ctx, "UpdateClient", time.Now(), &err)
	var out store.Client
	err = s.tx(ctx, func(x q) error {
		var cur store.Client
		if err := x.row(ctx, scanClient(&cur), qLockClient, project, id); err != nil {
			return err
		}
		next, err := fn(cur)
		if err != nil {
			return err
		}
		next.Project, next.ID, next.CreatedAt = cur.Project, cur.ID, cur.CreatedAt
		if _, err := x.exec(ctx, qUpdateClient, blob(next.SecretHash), blob(next.RegistrationTokenHash), next.Name,
			next.URI, next.LogoURI, list(next.RedirectURIs), list(next.GrantTypes), list(next.ResponseTypes),
			next.TokenEndpointAuthMethod, next.Scope, blob(next.Metadata), ns(next.UpdatedAt), project, id); err != nil {
			return err
		}
		out = next
		return nil
	})
	return out, err
}

// DeleteClient removes the client with its grants and agent permissions, and revokes every
// token it holds, in one transaction.
func (s *Store) DeleteClient(ctx context.Context, project, id string, now time.Time) (err error) {
	defer s.observe(ctx, "DeleteClient", time.Now(), &err)
	return s.tx(ctx, func(x q) error {
		n, err := x.execN(ctx, qDeleteClient, project, id)
		if err != nil {
			return err
		}
		if n == 0 {
			return store.ErrNotFound
		}
		if _, err := x.exec(ctx, qDeleteClientGrant, project, id); err != nil {
			return err
		}
		if _, err := x.exec(ctx, qDeleteClientPerm, project, id); err != nil {
			return err
		}
		_, err = revoke(ctx, x, qRevokeClient, now, project, id)
		return err
	})
}

func (s *Store) ListClients(ctx context.Context, project string) (_ []store.Client, err error) {
	defer s.observe(ctx, "ListClients", time.Now(), &err)
	return all(ctx, s.reader(), scanClient, qListClients, project)
}

// ---------------------------------------------------------------------------------------------
// Grants

const grantCols = `project, subject, client_id, scopes, created_at, updated_at`

var (
	qGetGrant    = sqlText(`SELECT ` + grantCols + ` FROM grants WHERE project = ? AND subject = ? AND client_id = ?`)
	qLockGrant   = sqlText(`SELECT ` + grantCols + ` FROM grants WHERE project = ? AND subject = ? AND client_id = ?` + forUpdate)
	qInsertGrant = sqlText(`INSERT INTO grants (` + grantCols + `) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (project, subject, client_id) DO NOTHING`)
	qUpdateGrant = sqlText(`UPDATE grants SET scopes = ?, updated_at = ? WHERE project = ? AND subject = ? AND client_id = ?`)
	qListGrants  = sqlText(`SELECT ` + grantCols + ` FROM grants WHERE project = ? AND subject = ? ORDER BY client_id`)
	qDeleteGrant = sqlText(`DELETE FROM grants WHERE project = ? AND subject = ? AND client_id = ?`)
)

func scanGrant(g *store.Grant) func(scanner) error {
	return func(r scanner) error {
		var scopes string
		var created, updated int64
		if err := r.Scan(&g.Project, &g.Subject, &g.ClientID, &scopes, &created, &updated); err != nil {
			return err
		}
		var err error
		g.Scopes, err = fromList(scopes)
		g.CreatedAt, g.UpdatedAt = fromNS(created), fromNS(updated)
		return err
	}
}

// UpsertGrant stores consent. Scopes become the union of the stored and the new ones (stored
// order first); CreatedAt is kept from the first consent.
func (s *Store) UpsertGrant(ctx context.Context, g store.Grant) (err error) {
	defer s.observe(ctx, "UpsertGrant", time.Now(), &err)
	return s.tx(ctx, func(x q) error {
		var cur store.Grant
		err := x.row(ctx, scanGrant(&cur), qLockGrant, g.Project, g.Subject, g.ClientID)
		if errors.Is(err, store.ErrNotFound) {
			n, err := x.execN(ctx, qInsertGrant, g.Project, g.Subject, g.ClientID, list(g.Scopes),
				ns(g.CreatedAt), ns(g.UpdatedAt))
			if err == nil && n == 0 {
				// Two first consents racing on PostgreSQL: this one inserted nothing and
				// runs again, now finding (and locking) the other's row, so neither's scopes
				// are lost.
				return errRace
			}
			return err
		}
		if err != nil {
			return err
		}
		_, err = x.exec(ctx, qUpdateGrant, list(union(cur.Scopes, g.Scopes)), ns(g.UpdatedAt),
			g.Project, g.Subject, g.ClientID)
		return err
	})
}

func union(a, b []string) []string {
	seen := make(map[string]bool, len(a)+len(b))
	out := make([]string, 0, len(a)+len(b))
	for _, v := range append(append([]string(nil), a...), b...) {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

func (s *Store) GetGrant(ctx context.Context, project, subject, clientID string) (_ store.Grant, err error) {
	defer s.observe(ctx, "GetGrant", time.Now(), &err)
	var g store.Grant
	err = s.reader().row(ctx, scanGrant(&g), qGetGrant, project, subject, clientID)
	return g, err
}

func (s *Store) ListGrants(ctx context.Context, project, subject string) (_ []store.Grant, err error) {
	defer s.observe(ctx, "ListGrants", time.Now(), &err)
	return all(ctx, s.reader(), scanGrant, qListGrants, project, subject)
}

// DeleteGrant withdraws consent and revokes the client's tokens for the person in one
// transaction. It reports ErrNotFound only when there was neither a grant nor a live token.
func (s *Store) DeleteGrant(ctx context.Context, project, subject, clientID string, now time.Time) (err error) {
	defer s.observe(ctx, "DeleteGrant", time.Now(), &err)
	return s.tx(ctx, func(x q) error {
		n, err := x.execN(ctx, qDeleteGrant, project, subject, clientID)
		if err != nil {
			return err
		}
		live, err := revoke(ctx, x, qRevokeHolder, now, project, clientID, subject)
		if err != nil {
			return err
		}
		if n == 0 && live[clientID] == 0 {
			return store.ErrNotFound
		}
		return nil
	})
}

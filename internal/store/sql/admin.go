package sqlstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// The admin listings are keyset pages: WHERE (key columns) > (the previous page's last key)
// ORDER BY the key columns LIMIT n, on an index that leads with the same columns. A page reads
// n rows at any depth, and nothing but the page is ever in memory.
//
// Their queries have a variable number of projects (IN (?, …)), so they are built per call and
// run unprepared; the number of distinct texts is bounded by the number of projects.

// pageQuery builds "<sel> WHERE <col> IN (…) [AND <cond>…] [AND (<key>) > (…)] ORDER BY <key> LIMIT ?".
type pageQuery struct {
	sel     string   // SELECT … FROM … (with the table alias the conditions use)
	projCol string   // the project column
	key     []string // key columns, in order; the first is the project column
	conds   []string // further conditions, each with its own placeholders
	args    []any    // the conditions' arguments, in order
}

func (p pageQuery) build(q store.AdminQuery, lead []any) (string, []any, error) {
	var b strings.Builder
	args := append([]any{}, lead...)
	b.WriteString(p.sel)
	b.WriteString(" WHERE ")
	b.WriteString(p.projCol)
	b.WriteString(" IN (")
	for i, pr := range q.Projects {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("?")
		args = append(args, pr)
	}
	b.WriteString(")")
	for _, c := range p.conds {
		b.WriteString(" AND ")
		b.WriteString(c)
	}
	args = append(args, p.args...)
	if q.After != nil {
		if len(q.After) != len(p.key) {
			return "", nil, fmt.Errorf("sqlstore: a page key has %d parts, want %d", len(q.After), len(p.key))
		}
		fmt.Fprintf(&b, " AND (%s) > (%s)", strings.Join(p.key, ", "),
			strings.TrimSuffix(strings.Repeat("?, ", len(p.key)), ", "))
		for _, k := range q.After {
			args = append(args, k)
		}
	}
	// One row more than the page: whether it comes back says whether another page follows,
	// so the last page is never an empty one.
	fmt.Fprintf(&b, " ORDER BY %s LIMIT ?", strings.Join(p.key, ", "))
	args = append(args, int64(q.PageLimit()+1))
	return b.String(), args, nil
}

// listPage runs a page query and returns its rows and the key to continue after (nil on the
// last page).
func listPage[T any](ctx context.Context, s *Store, p pageQuery, q store.AdminQuery, lead []any,
	scan func(*T) func(scanner) error, key func(T) []string) ([]T, []string, error) {
	if len(q.Projects) == 0 {
		return nil, nil, nil
	}
	query, args, err := p.build(q, lead)
	if err != nil {
		return nil, nil, err
	}
	out := make([]T, 0, min(q.PageLimit()+1, 64))
	err = s.reader().each(ctx, func(r scanner) error {
		var v T
		if err := scan(&v)(r); err != nil {
			return err
		}
		out = append(out, v)
		return nil
	}, query, args...)
	if err != nil {
		return nil, nil, err
	}
	if len(out) <= q.PageLimit() {
		return out, nil, nil
	}
	out = out[:q.PageLimit()]
	return out, key(out[len(out)-1]), nil
}

func optional(cond string, v string, p *pageQuery) {
	if v != "" {
		p.conds = append(p.conds, cond)
		p.args = append(p.args, v)
	}
}

// ListPeoplePage lists people with their last sign-in and their unexpired sessions.
func (s *Store) ListPeoplePage(ctx context.Context, q store.AdminQuery, now time.Time) (_ []store.PersonSummary, _ []string, err error) {
	defer s.observe(ctx, "ListPeoplePage", time.Now(), &err)
	p := pageQuery{
		sel: `SELECT p.project, p.id, p.source, p.source_subject, p.email, p.name, p.created_at, p.signed_in_at,
p.access_ended_at, (SELECT COUNT(*) FROM sessions s WHERE s.project = p.project AND s.subject = p.id AND s.expires_at > ?)
FROM people p`,
		projCol: "p.project",
		key:     []string{"p.project", "p.id"},
	}
	optional("p.id = ?", q.Subject, &p)
	optional("p.email = ?", q.Email, &p)
	return listPage(ctx, s, p, q, []any{ns(now)}, func(v *store.PersonSummary) func(scanner) error {
		return func(r scanner) error {
			var created, signedIn, ended int64
			if err := r.Scan(&v.Project, &v.ID, &v.Source, &v.SourceSubject, &v.Email, &v.Name, &created,
				&signedIn, &ended, &v.ActiveSessions); err != nil {
				return err
			}
			v.CreatedAt, v.LastSignIn, v.AccessEndedAt = fromNS(created), fromNS(signedIn), fromNS(ended)
			return nil
		}
	}, func(v store.PersonSummary) []string { return []string{v.Project, v.ID} })
}

// ListGrantsPage lists consents with the live tokens each carries.
func (s *Store) ListGrantsPage(ctx context.Context, q store.AdminQuery, now time.Time) (_ []store.GrantSummary, _ []string, err error) {
	defer s.observe(ctx, "ListGrantsPage", time.Now(), &err)
	p := pageQuery{
		sel: `SELECT g.project, g.subject, g.client_id, g.scopes, g.created_at, g.updated_at,
(SELECT COUNT(*) FROM tokens t WHERE t.project = g.project AND t.client_id = g.client_id AND t.subject = g.subject
 AND t.revoked_at IS NULL AND t.rotated_at IS NULL AND t.expires_at > ?)
FROM grants g`,
		projCol: "g.project",
		key:     []string{"g.project", "g.subject", "g.client_id"},
	}
	optional("g.subject = ?", q.Subject, &p)
	return listPage(ctx, s, p, q, []any{ns(now)}, func(v *store.GrantSummary) func(scanner) error {
		return func(r scanner) error {
			var scopes string
			var created, updated int64
			if err := r.Scan(&v.Project, &v.Subject, &v.ClientID, &scopes, &created, &updated, &v.LiveTokens); err != nil {
				return err
			}
			var err error
			v.Scopes, err = fromList(scopes)
			v.CreatedAt, v.UpdatedAt = fromNS(created), fromNS(updated)
			return err
		}
	}, func(v store.GrantSummary) []string { return []string{v.Project, v.Subject, v.ClientID} })
}

// ListConnectionsPage lists connected accounts, sealed tokens included (callers show none of
// them; they are what a disconnect revokes upstream).
func (s *Store) ListConnectionsPage(ctx context.Context, q store.AdminQuery) (_ []store.Connection, _ []string, err error) {
	defer s.observe(ctx, "ListConnectionsPage", time.Now(), &err)
	p := pageQuery{
		sel:     `SELECT ` + connectionCols + `, version FROM connections`,
		projCol: "project",
		key:     []string{"project", "id"},
	}
	optional("subject = ?", q.Subject, &p)
	return listPage(ctx, s, p, q, nil, func(c *store.Connection) func(scanner) error {
		var version int64
		return scanConnection(c, &version)
	}, func(c store.Connection) []string { return []string{c.Project, c.ID} })
}

// ListOpenLinksPage lists open, unexpired connect links.
func (s *Store) ListOpenLinksPage(ctx context.Context, q store.AdminQuery, now time.Time) (_ []store.Link, _ []string, err error) {
	defer s.observe(ctx, "ListOpenLinksPage", time.Now(), &err)
	p := pageQuery{
		sel:     `SELECT ` + linkCols + ` FROM links`,
		projCol: "project",
		key:     []string{"project", "id"},
		conds:   []string{"state = 'open'", "expires_at > ?"},
		args:    []any{ns(now)},
	}
	optional("subject = ?", q.Subject, &p)
	return listPage(ctx, s, p, q, nil, scanLink, func(l store.Link) []string { return []string{l.Project, l.ID} })
}

// ListClientTokensPage counts live tokens per client, on the live-token index.
func (s *Store) ListClientTokensPage(ctx context.Context, q store.AdminQuery, now time.Time) (_ []store.ClientTokenCount, _ []string, err error) {
	defer s.observe(ctx, "ListClientTokensPage", time.Now(), &err)
	p := pageQuery{
		sel:     `SELECT project, client_id, COUNT(*) FROM tokens`,
		projCol: "project",
		key:     []string{"project", "client_id"},
		conds:   []string{"revoked_at IS NULL", "rotated_at IS NULL", "expires_at > ?"},
		args:    []any{ns(now)},
	}
	optional("subject = ?", q.Subject, &p)
	query, args, err := p.build(q, nil)
	if err != nil || len(q.Projects) == 0 {
		return nil, nil, err
	}
	// GROUP BY goes before ORDER BY: splice it in.
	i := strings.LastIndex(query, " ORDER BY ")
	query = query[:i] + " GROUP BY project, client_id" + query[i:]
	var out []store.ClientTokenCount
	err = s.reader().each(ctx, func(r scanner) error {
		var c store.ClientTokenCount
		if err := r.Scan(&c.Project, &c.ClientID, &c.Live); err != nil {
			return err
		}
		out = append(out, c)
		return nil
	}, query, args...)
	if err != nil || len(out) <= q.PageLimit() {
		return out, nil, err
	}
	out = out[:q.PageLimit()]
	last := out[len(out)-1]
	return out, []string{last.Project, last.ClientID}, nil
}

// ListAuditPage lists audit records of some projects, oldest first.
func (s *Store) ListAuditPage(ctx context.Context, q store.AuditQuery) (_ []store.AuditRecord, err error) {
	defer s.observe(ctx, "ListAuditPage", time.Now(), &err)
	if len(q.Projects) == 0 {
		return nil, nil
	}
	var b strings.Builder
	b.WriteString(`SELECT ` + auditCols + ` FROM audit WHERE project IN (`)
	args := make([]any, 0, len(q.Projects)+6)
	for i, pr := range q.Projects {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("?")
		args = append(args, pr)
	}
	b.WriteString(") AND id > ? AND time >= ?")
	args = append(args, q.AfterID, ns(q.Since))
	for _, f := range []struct{ col, v string }{{"action", q.Action}, {"actor", q.Actor}, {"target", q.Target}} {
		if f.v != "" {
			b.WriteString(" AND " + f.col + " = ?")
			args = append(args, f.v)
		}
	}
	b.WriteString(" ORDER BY id LIMIT ?")
	args = append(args, int64(store.AdminQuery{Limit: q.Limit}.PageLimit()))
	return s.listAudit(ctx, b.String(), args...)
}

var (
	qPersonExists    = sqlText(`SELECT id FROM people WHERE project = ? AND id = ?` + forUpdate)
	qEndGrants       = sqlText(`DELETE FROM grants WHERE project = ? AND subject = ?`)
	qEndPermissions  = sqlText(`DELETE FROM agent_permissions WHERE project = ? AND subject = ?`)
	qEndConnections  = sqlText(`DELETE FROM connections WHERE project = ? AND subject = ? RETURNING ` + connectionCols + `, version`)
	qEndLinks        = sqlText(`UPDATE links SET state = 'declined', closed_at = ? WHERE project = ? AND subject = ? AND state = 'open'`)
	qMarkAccessEnded = sqlText(`UPDATE people SET access_ended_at = ? WHERE project = ? AND id = ?`)
)

// EndPersonAccess removes everything that lets the person, or an agent for them, act, in one
// transaction: a failure part-way leaves it all in place.
func (s *Store) EndPersonAccess(ctx context.Context, project, subject string, now time.Time) (_ store.AccessEnded, err error) {
	defer s.observe(ctx, "EndPersonAccess", time.Now(), &err)
	var out store.AccessEnded
	err = s.tx(ctx, func(x q) error {
		out = store.AccessEnded{}
		// Locking the person's row makes two ends of the same person take turns on PostgreSQL.
		if err := x.row(ctx, func(r scanner) error { var id string; return r.Scan(&id) }, qPersonExists, project, subject); err != nil {
			return err
		}
		var err error
		if out.Passkeys, out.Codes, err = endWaysIn(ctx, x, project, subject, now); err != nil {
			return err
		}
		if out.Sessions, err = x.execN(ctx, qEndSessions, project, subject); err != nil {
			return err
		}
		live, err := revoke(ctx, x, qRevokePerson, now, project, subject)
		if err != nil {
			return err
		}
		out.Tokens = sum(live)
		if out.Grants, err = x.execN(ctx, qEndGrants, project, subject); err != nil {
			return err
		}
		if out.Permissions, err = x.execN(ctx, qEndPermissions, project, subject); err != nil {
			return err
		}
		out.Connections, err = all(ctx, x, func(c *store.Connection) func(scanner) error {
			var version int64
			return scanConnection(c, &version)
		}, qEndConnections, project, subject)
		if err != nil {
			return err
		}
		if out.Links, err = x.execN(ctx, qEndLinks, ns(now), project, subject); err != nil {
			return err
		}
		out.Callbacks, err = x.execN(ctx, qEndCallbacks, project, subject)
		return err
	})
	return out, err
}

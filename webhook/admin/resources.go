package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"

	adminv1 "latchkey.dev/latchkey/api/admin/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
)

func col(name, typ, desc string, priority int32) metav1.TableColumnDefinition {
	format := ""
	if name == "Name" {
		format = "name"
	}
	return metav1.TableColumnDefinition{Name: name, Type: typ, Format: format, Description: desc, Priority: priority}
}

func (s *Server) resources() []resource {
	return []resource{
		{
			name: adminv1.ResourcePeople, singular: "person", kind: "Person", verbs: []string{"get", "list", "watch", "delete"},
			columns: []metav1.TableColumnDefinition{
				col("Name", "string", "the person's subject identifier", 0),
				col("Email", "string", "", 0),
				col("Project", "string", "", 0),
				col("Last Sign-In", "string", "how long ago the person last signed in", 0),
				col("Sessions", "integer", "browser sessions that have not expired", 0),
				col("Access Ended", "string", "how long ago an administrator last ended the person's access", 1),
				col("Source", "string", "how the person signs in", 1),
			},
			fields: []string{"email"},
			list:   s.listPeople, get: s.getPerson, del: s.endPerson,
		},
		{
			name: adminv1.ResourceGrants, singular: "grant", kind: "Grant", verbs: []string{"get", "list", "watch", "delete"},
			columns: []metav1.TableColumnDefinition{
				col("Name", "string", "person.client", 0),
				col("Person", "string", "the person's email", 0),
				col("Client", "string", "the client's name", 0),
				col("Scopes", "string", "", 0),
				col("Tokens", "integer", "live tokens the client holds for the person", 0),
				col("Age", "string", "how long ago the person first consented", 0),
				col("Project", "string", "", 1),
				col("Client ID", "string", "", 1),
			},
			fields: []string{"person"},
			list:   s.listGrants, get: s.getGrant, del: s.revokeGrant,
		},
		{
			name: adminv1.ResourceConnections, singular: "connection", kind: "Connection", verbs: []string{"get", "list", "watch", "delete"},
			columns: []metav1.TableColumnDefinition{
				col("Name", "string", "the connection's id", 0),
				col("Person", "string", "the person's email", 0),
				col("Connector", "string", "", 0),
				col("Account", "string", "how the service names the account", 0),
				col("State", "string", "active, expiring (renewing it fails or is impossible; it still works), needs_reconnect or revoked_upstream (the person must reconnect)", 0),
				col("Age", "string", "", 0),
				col("Project", "string", "", 1),
				col("Scopes", "string", "", 1),
				col("Actors", "string", "the agents that received the account's token for the person, the latest first: \"agent (via caller) 5m\"", 1),
			},
			fields: []string{"person"},
			list:   s.listConnections, get: s.getConnection, del: s.disconnect,
		},
		{
			name: adminv1.ResourcePasskeys, singular: "passkey", kind: "Passkey", verbs: []string{"get", "list", "watch", "delete"},
			columns: []metav1.TableColumnDefinition{
				col("Name", "string", "the credential ID", 0),
				col("Person", "string", "the person's email", 0),
				col("Passkey", "string", "the passkey's name on the person's account page", 0),
				col("Synced", "boolean", "whether the passkey can be copied to the person's other devices", 0),
				col("Last Used", "string", "how long ago it last signed the person in", 0),
				col("Age", "string", "", 0),
				col("Project", "string", "", 1),
				col("AAGUID", "string", "the authenticator's model, when it said", 1),
			},
			fields: []string{"person"},
			list:   s.listPasskeys, get: s.getPasskey, del: s.removePasskey,
		},
		{
			name: adminv1.ResourceLinks, singular: "link", kind: "Link", verbs: []string{"get", "list", "watch"},
			columns: []metav1.TableColumnDefinition{
				col("Name", "string", "the link's connect_id", 0),
				col("Person", "string", "the person's email", 0),
				col("Client", "string", "the agent that was given the link", 0),
				col("Connector", "string", "", 0),
				col("Kind", "string", "connect, allow or reconnect", 0),
				col("Expires In", "string", "", 0),
				col("Project", "string", "", 1),
			},
			fields: []string{"person"},
			list:   s.listLinks, get: s.getLink,
		},
		{
			name: adminv1.ResourceClientTokens, singular: "clienttokens", kind: "ClientTokens", verbs: []string{"get", "list", "watch", "delete"},
			columns: []metav1.TableColumnDefinition{
				col("Name", "string", "the client", 0),
				col("Client", "string", "the client's name", 0),
				col("Tokens", "integer", "live tokens", 0),
				col("Project", "string", "", 0),
			},
			list: s.listClientTokens, get: s.getClientTokens, del: s.revokeClientTokens,
		},
		{
			name: adminv1.ResourceAuditRecords, singular: "auditrecord", kind: "AuditRecord", verbs: []string{"list", "watch"},
			columns: []metav1.TableColumnDefinition{
				col("Name", "string", "the record's id", 0),
				col("Time", "string", "", 0),
				col("Actor", "string", "", 0),
				col("Action", "string", "", 0),
				col("Target", "string", "", 0),
				col("Outcome", "string", "success, refused or failed", 0),
				col("Reason", "string", "why it was refused or failed (docs/audit.md)", 0),
				col("Client", "string", "", 1),
				col("Project", "string", "", 1),
			},
			fields: []string{"action", "actor", "target"},
			list:   s.listAudit,
		},
		sharedResource(s),
	}
}

func since(now, t time.Time) string {
	if t.IsZero() {
		return "<none>"
	}
	return duration.HumanDuration(now.Sub(t))
}

func mtime(t time.Time) metav1.Time { return metav1.NewTime(t) }

func optTime(t time.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	m := metav1.NewTime(t)
	return &m
}

// directory names people and clients for the tables, reading each at most once per request.
type directory struct {
	s       *Server
	ctx     context.Context
	people  map[string]string
	clients map[string]string
}

func (s *Server) directory(ctx context.Context) *directory {
	return &directory{s: s, ctx: ctx, people: map[string]string{}, clients: map[string]string{}}
}

// email of a person: their email, else their id.
func (d *directory) email(project, subject string) string {
	k := project + "\x00" + subject
	if v, ok := d.people[k]; ok {
		return v
	}
	v := subject
	rows, _, err := d.s.o.Store.ListPeoplePage(d.ctx, store.AdminQuery{Projects: []string{project}, Subject: subject, Limit: 1}, d.s.o.Now())
	if err == nil && len(rows) == 1 && rows[0].Email != "" {
		v = rows[0].Email
	}
	d.people[k] = v
	return v
}

// client's display name: the OAuthClient's, else the registered client's, else "".
func (d *directory) client(p *config.Project, id string) string {
	if c := p.Clients[id]; c != nil {
		return c.Name
	}
	k := p.Key + "\x00" + id
	if v, ok := d.clients[k]; ok {
		return v
	}
	v := ""
	if c, err := d.s.o.Store.GetClient(d.ctx, p.Key, id); err == nil {
		v = c.Name
	}
	d.clients[k] = v
	return v
}

func orID(name, id string) string {
	if name != "" {
		return name
	}
	return id
}

// ---------------------------------------------------------------------------------------------
// people

func (s *Server) personItem(sc *scope, v store.PersonSummary) item {
	p := sc.project(v.Project)
	now := s.o.Now()
	// The uid changes when access is ended, so `kubectl delete` (which waits until the object
	// is gone or has another uid) returns once the person's access has ended.
	m := meta(p, v.ID, mtime(v.CreatedAt), v.ID, "person", v.ID, strconv.FormatInt(v.AccessEndedAt.UnixNano(), 10))
	obj := &adminv1.Person{
		TypeMeta:   metav1.TypeMeta{Kind: "Person", APIVersion: adminv1.GroupVersion},
		ObjectMeta: *m,
		Project:    p.Name, Email: v.Email, DisplayName: v.Name, Source: v.Source,
		LastSignIn: optTime(v.LastSignIn), ActiveSessions: v.ActiveSessions, AccessEndedAt: optTime(v.AccessEndedAt),
	}
	return item{obj: obj, meta: m,
		cells:  []any{v.ID, v.Email, p.Name, since(now, v.LastSignIn), v.ActiveSessions, since(now, v.AccessEndedAt), v.Source},
		fields: fields.Set{"metadata.name": v.ID, "metadata.namespace": p.Namespace, "email": v.Email}}
}

func (s *Server) listPeople(ctx context.Context, sc *scope) ([]item, []string, error) {
	q := sc.query()
	if v, ok := sc.fields.RequiresExactMatch("email"); ok {
		q.Email = v
	}
	if v, ok := sc.fields.RequiresExactMatch("metadata.name"); ok {
		if q.Subject != "" && q.Subject != v {
			return nil, nil, nil
		}
		q.Subject = v
	}
	rows, next, err := s.o.Store.ListPeoplePage(ctx, q, s.o.Now())
	if err != nil {
		return nil, nil, err
	}
	out := make([]item, len(rows))
	for i, v := range rows {
		out[i] = s.personItem(sc, v)
	}
	return out, next, nil
}

func (s *Server) findPerson(ctx context.Context, sc *scope, name string) (store.PersonSummary, error) {
	if sc.namespace == "" || strings.Contains(name, ".") {
		return store.PersonSummary{}, notFound(adminv1.ResourcePeople, name)
	}
	rows, _, err := s.o.Store.ListPeoplePage(ctx, store.AdminQuery{Projects: sc.keys(), Subject: name, Limit: 1}, s.o.Now())
	if err != nil {
		return store.PersonSummary{}, err
	}
	if len(rows) == 0 {
		return store.PersonSummary{}, notFound(adminv1.ResourcePeople, name)
	}
	return rows[0], nil
}

func (s *Server) getPerson(ctx context.Context, sc *scope, name string) (item, error) {
	v, err := s.findPerson(ctx, sc, name)
	if err != nil {
		return item{}, err
	}
	return s.personItem(sc, v), nil
}

// endPerson ends a person's access in one transaction, then revokes their connections at the
// services that can (after the commit: a slow service must not hold the store).
func (s *Server) endPerson(ctx context.Context, sc *scope, name string, dryRun bool) (types.UID, string, error) {
	v, err := s.findPerson(ctx, sc, name)
	if err != nil {
		return "", "", err
	}
	before := s.personItem(sc, v).meta.UID
	if dryRun {
		return before, "", nil
	}
	p := sc.project(v.Project)
	ended, err := s.o.Store.EndPersonAccess(ctx, v.Project, v.ID, s.o.Now())
	if errors.Is(err, store.ErrNotFound) {
		return "", "", notFound(adminv1.ResourcePeople, name)
	}
	if err != nil {
		return "", "", err
	}
	upstream := map[string]int{}
	for _, c := range ended.Connections {
		upstream[s.revokeUpstream(ctx, p, c)]++
	}
	details := map[string]string{
		"email":       v.Email,
		"sessions":    strconv.FormatInt(ended.Sessions, 10),
		"tokens":      strconv.FormatInt(ended.Tokens, 10),
		"grants":      strconv.FormatInt(ended.Grants, 10),
		"connections": strconv.Itoa(len(ended.Connections)),
		"links":       strconv.FormatInt(ended.Links, 10),
		"passkeys":    strconv.FormatInt(ended.Passkeys, 10),
		"codes":       strconv.FormatInt(ended.Codes, 10),
	}
	for k, n := range upstream {
		details["upstream_"+k] = strconv.Itoa(n)
	}
	s.record(ctx, store.AuditRecord{Project: v.Project, Action: events.AdminAccessEnded, Target: "person:" + v.ID, Details: details})
	return before, fmt.Sprintf("ended the access of %s: %d sessions, %d tokens, %d grants, %d connections, %d open links",
		orID(v.Email, v.ID), ended.Sessions, ended.Tokens, ended.Grants, len(ended.Connections), ended.Links), nil
}

// revokeUpstream revokes a removed connection at its service, where the Connector declares a
// revocation endpoint, and says how it went: "yes", "failed" or "not_supported".
func (s *Server) revokeUpstream(ctx context.Context, p *config.Project, c store.Connection) string {
	conn := p.Connectors[c.Connector]
	if conn == nil || conn.RevocationURL == "" || s.o.Revoker == nil {
		return "not_supported"
	}
	if err := s.o.Revoker.Revoke(ctx, conn, c); err != nil {
		s.o.Logger.Info("upstream revocation failed", "project", p.Key, "connector", conn.Key, "error", err.Error())
		return "failed"
	}
	return "yes"
}

// ---------------------------------------------------------------------------------------------
// grants

// page turns one page of store rows into items, naming people and clients from one directory.
func page[T any](ctx context.Context, s *Server, sc *scope, rows []T, next []string, err error, toItem func(*scope, *directory, T) item) ([]item, []string, error) {
	if err != nil {
		return nil, nil, err
	}
	d := s.directory(ctx)
	out := make([]item, len(rows))
	for i, r := range rows {
		out[i] = toItem(sc, d, r)
	}
	return out, next, nil
}

func (s *Server) grantItem(sc *scope, d *directory, g store.GrantSummary) item {
	p := sc.project(g.Project)
	name := adminv1.GrantName(g.Subject, g.ClientID)
	m := meta(p, name, mtime(g.CreatedAt), g.Subject, "grant", g.Subject, g.ClientID)
	clientName := d.client(p, g.ClientID)
	obj := &adminv1.Grant{
		TypeMeta:   metav1.TypeMeta{Kind: "Grant", APIVersion: adminv1.GroupVersion},
		ObjectMeta: *m,
		Project:    p.Name, Person: g.Subject, ClientID: g.ClientID, ClientDisplayName: clientName,
		Scopes: g.Scopes, UpdatedAt: mtime(g.UpdatedAt), LiveTokens: g.LiveTokens,
	}
	return item{obj: obj, meta: m,
		cells: []any{name, d.email(g.Project, g.Subject), orID(clientName, g.ClientID), strings.Join(g.Scopes, " "),
			g.LiveTokens, since(s.o.Now(), g.CreatedAt), p.Name, g.ClientID},
		fields: fields.Set{"metadata.name": name, "metadata.namespace": p.Namespace, "person": g.Subject}}
}

func (s *Server) listGrants(ctx context.Context, sc *scope) ([]item, []string, error) {
	rows, next, err := s.o.Store.ListGrantsPage(ctx, sc.query(), s.o.Now())
	return page(ctx, s, sc, rows, next, err, s.grantItem)
}

func (s *Server) findGrant(ctx context.Context, sc *scope, name string) (store.GrantSummary, error) {
	person, clientID, ok := adminv1.ParseGrantName(name)
	if !ok || sc.namespace == "" {
		return store.GrantSummary{}, notFound(adminv1.ResourceGrants, name)
	}
	q := store.AdminQuery{Projects: sc.keys(), Subject: person, Limit: store.MaxPage}
	for {
		rows, next, err := s.o.Store.ListGrantsPage(ctx, q, s.o.Now())
		if err != nil {
			return store.GrantSummary{}, err
		}
		for _, g := range rows {
			if g.ClientID == clientID {
				return g, nil
			}
		}
		if next == nil {
			return store.GrantSummary{}, notFound(adminv1.ResourceGrants, name)
		}
		q.After = next
	}
}

func (s *Server) getGrant(ctx context.Context, sc *scope, name string) (item, error) {
	g, err := s.findGrant(ctx, sc, name)
	if err != nil {
		return item{}, err
	}
	return s.grantItem(sc, s.directory(ctx), g), nil
}

// revokeGrant withdraws a consent with its tokens, and the client's permissions to use the
// person's connected accounts (as the person's own Revoke on the account page does).
func (s *Server) revokeGrant(ctx context.Context, sc *scope, name string, dryRun bool) (types.UID, string, error) {
	g, err := s.findGrant(ctx, sc, name)
	if err != nil {
		return "", "", err
	}
	u := s.grantItem(sc, s.directory(ctx), g).meta.UID
	if dryRun {
		return u, "", nil
	}
	err = s.o.Store.RevokeApp(ctx, g.Project, g.Subject, g.ClientID, s.o.Now())
	if errors.Is(err, store.ErrNotFound) {
		return "", "", notFound(adminv1.ResourceGrants, name)
	}
	if err != nil {
		return "", "", err
	}
	s.record(ctx, store.AuditRecord{Project: g.Project, Action: events.AdminGrantRevoked, Target: "person:" + g.Subject,
		Details: map[string]string{"client_id": g.ClientID, "tokens": strconv.FormatInt(g.LiveTokens, 10)}})
	return u, fmt.Sprintf("revoked the grant and %d live tokens", g.LiveTokens), nil
}

// ---------------------------------------------------------------------------------------------
// connections

// connState is the connection's state (docs/connection-health.md): active, expiring,
// needs_reconnect or revoked_upstream.
func connState(c store.Connection) string {
	if c.Status == "" {
		return string(store.ConnectionActive)
	}
	return string(c.Status)
}

func (s *Server) connectionItem(sc *scope, d *directory, c store.Connection, actors []store.ConnectionActor) item {
	p := sc.project(c.Project)
	m := meta(p, c.ID, mtime(c.CreatedAt), c.Subject, "connection", c.ID)
	obj := &adminv1.Connection{
		TypeMeta:   metav1.TypeMeta{Kind: "Connection", APIVersion: adminv1.GroupVersion},
		ObjectMeta: *m,
		Project:    p.Name, Person: c.Subject, Connector: c.Connector, Account: c.AccountName, AccountID: c.AccountID,
		State: connState(c), Scopes: c.Scopes, UpdatedAt: mtime(c.UpdatedAt),
	}
	cell := make([]string, 0, len(actors))
	for _, a := range actors {
		ca := adminv1.ConnectionActor{ClientID: a.ClientID, ClientDisplayName: d.client(p, a.ClientID),
			Via: strings.Fields(a.Via), LastUsed: mtime(a.LastUsedAt)}
		obj.Actors = append(obj.Actors, ca)
		who := orID(ca.ClientDisplayName, a.ClientID)
		if len(ca.Via) > 0 {
			who += " (via " + strings.Join(ca.Via, ", ") + ")"
		}
		cell = append(cell, who+" "+since(s.o.Now(), a.LastUsedAt))
	}
	return item{obj: obj, meta: m,
		cells: []any{c.ID, d.email(c.Project, c.Subject), c.Connector, c.AccountName, connState(c),
			since(s.o.Now(), c.CreatedAt), p.Name, strings.Join(c.Scopes, " "), strings.Join(cell, ", ")},
		fields: fields.Set{"metadata.name": c.ID, "metadata.namespace": p.Namespace, "person": c.Subject}}
}

func (s *Server) listConnections(ctx context.Context, sc *scope) ([]item, []string, error) {
	rows, next, err := s.o.Store.ListConnectionsPage(ctx, sc.query())
	// Shared accounts are nobody's: they are sharedconnections (docs/shared-connections.md).
	rows = slices.DeleteFunc(rows, func(c store.Connection) bool { return store.IsSharedSubject(c.Subject) })
	if err != nil {
		return nil, nil, err
	}
	actors, err := s.connectionActors(ctx, rows)
	return page(ctx, s, sc, rows, next, err, func(sc *scope, d *directory, c store.Connection) item {
		return s.connectionItem(sc, d, c, actors[c.ID])
	})
}

// connectionActors reads the actors of the connections rows, by connection id: one query per
// project on the page.
func (s *Server) connectionActors(ctx context.Context, rows []store.Connection) (map[string][]store.ConnectionActor, error) {
	ids := map[string][]string{}
	for _, c := range rows {
		ids[c.Project] = append(ids[c.Project], c.ID)
	}
	out := map[string][]store.ConnectionActor{}
	for project, list := range ids {
		as, err := s.o.Store.ListConnectionActors(ctx, project, list)
		if err != nil {
			return nil, err
		}
		for _, a := range as {
			out[a.ConnectionID] = append(out[a.ConnectionID], a)
		}
	}
	return out, nil
}

func (s *Server) findConnection(ctx context.Context, sc *scope, name string) (store.Connection, error) {
	if sc.namespace != "" {
		for _, p := range sc.projects {
			c, err := s.o.Store.GetConnection(ctx, p.Key, name)
			if err == nil && !store.IsSharedSubject(c.Subject) {
				return c, nil
			}
			if err == nil {
				break // a shared account: disconnect it as a sharedconnection, with its record
			}
			if !errors.Is(err, store.ErrNotFound) {
				return store.Connection{}, err
			}
		}
	}
	return store.Connection{}, notFound(adminv1.ResourceConnections, name)
}

func (s *Server) getConnection(ctx context.Context, sc *scope, name string) (item, error) {
	c, err := s.findConnection(ctx, sc, name)
	if err != nil {
		return item{}, err
	}
	actors, err := s.connectionActors(ctx, []store.Connection{c})
	if err != nil {
		return item{}, err
	}
	return s.connectionItem(sc, s.directory(ctx), c, actors[c.ID]), nil
}

// disconnect removes a connected account: revoked at the service first where the Connector
// can (a service that cannot be reached does not keep the account connected), then deleted.
func (s *Server) disconnect(ctx context.Context, sc *scope, name string, dryRun bool) (types.UID, string, error) {
	c, err := s.findConnection(ctx, sc, name)
	if err != nil {
		return "", "", err
	}
	u := s.connectionItem(sc, s.directory(ctx), c, nil).meta.UID
	if dryRun {
		return u, "", nil
	}
	revoked := s.revokeUpstream(ctx, sc.project(c.Project), c)
	if err := s.o.Store.DeleteConnection(ctx, c.Project, c.ID); errors.Is(err, store.ErrNotFound) {
		return "", "", notFound(adminv1.ResourceConnections, name)
	} else if err != nil {
		return "", "", err
	}
	s.record(ctx, store.AuditRecord{Project: c.Project, Action: events.AdminConnectionEnded, Target: "person:" + c.Subject,
		Details: map[string]string{"connection": c.ID, "connector": c.Connector, "account": c.AccountName, "revoked": revoked}})
	return u, "disconnected; revoked at the service: " + revoked, nil
}

// ---------------------------------------------------------------------------------------------
// links

func (s *Server) linkItem(sc *scope, d *directory, l store.Link) item {
	p := sc.project(l.Project)
	m := meta(p, l.ID, mtime(l.CreatedAt), l.Subject, "link", l.ID)
	obj := &adminv1.Link{
		TypeMeta:   metav1.TypeMeta{Kind: "Link", APIVersion: adminv1.GroupVersion},
		ObjectMeta: *m,
		Project:    p.Name, Person: l.Subject, ClientID: l.ClientID, Connector: l.Connector, Kind: string(l.Kind),
		ExpiresAt: mtime(l.ExpiresAt),
	}
	return item{obj: obj, meta: m,
		cells: []any{l.ID, d.email(l.Project, l.Subject), orID(d.client(p, l.ClientID), l.ClientID), l.Connector,
			string(l.Kind), duration.HumanDuration(l.ExpiresAt.Sub(s.o.Now())), p.Name},
		fields: fields.Set{"metadata.name": l.ID, "metadata.namespace": p.Namespace, "person": l.Subject}}
}

func (s *Server) listLinks(ctx context.Context, sc *scope) ([]item, []string, error) {
	rows, next, err := s.o.Store.ListOpenLinksPage(ctx, sc.query(), s.o.Now())
	return page(ctx, s, sc, rows, next, err, s.linkItem)
}

func (s *Server) getLink(ctx context.Context, sc *scope, name string) (item, error) {
	l, err := s.o.Store.GetLink(ctx, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return item{}, notFound(adminv1.ResourceLinks, name)
	case err != nil:
		return item{}, err
	}
	// Only open links of this namespace's Projects: another namespace's link is as absent
	// here as one that never existed.
	if sc.namespace == "" || sc.project(l.Project) == nil || l.State != store.LinkOpen || !s.o.Now().Before(l.ExpiresAt) {
		return item{}, notFound(adminv1.ResourceLinks, name)
	}
	return s.linkItem(sc, s.directory(ctx), l), nil
}

// ---------------------------------------------------------------------------------------------
// clienttokens

func (s *Server) clientTokensItem(sc *scope, d *directory, c store.ClientTokenCount) item {
	p := sc.project(c.Project)
	name := adminv1.ClientName(c.ClientID)
	m := meta(p, name, metav1.Time{}, "", "clienttokens", c.ClientID)
	clientName := d.client(p, c.ClientID)
	obj := &adminv1.ClientTokens{
		TypeMeta:   metav1.TypeMeta{Kind: "ClientTokens", APIVersion: adminv1.GroupVersion},
		ObjectMeta: *m,
		Project:    p.Name, ClientID: c.ClientID, ClientDisplayName: clientName, LiveTokens: c.Live,
	}
	return item{obj: obj, meta: m,
		cells:  []any{name, orID(clientName, c.ClientID), c.Live, p.Name},
		fields: fields.Set{"metadata.name": name, "metadata.namespace": p.Namespace}}
}

func (s *Server) listClientTokens(ctx context.Context, sc *scope) ([]item, []string, error) {
	rows, next, err := s.o.Store.ListClientTokensPage(ctx, sc.query(), s.o.Now())
	return page(ctx, s, sc, rows, next, err, s.clientTokensItem)
}

// findClientTokens counts the client's live tokens in each Project of the namespace that has
// any (a client id names one client within a Project; a client ID metadata document's URL may
// be registered in more than one).
func (s *Server) findClientTokens(ctx context.Context, sc *scope, name string) ([]store.ClientTokenCount, error) {
	clientID, ok := adminv1.ParseClientName(name)
	if !ok || sc.namespace == "" {
		return nil, notFound(adminv1.ResourceClientTokens, name)
	}
	var out []store.ClientTokenCount
	for _, p := range sc.projects {
		live, err := s.o.Store.CountLiveTokens(ctx, p.Key, s.o.Now())
		if err != nil {
			return nil, err
		}
		if n := live[clientID]; n > 0 {
			out = append(out, store.ClientTokenCount{Project: p.Key, ClientID: clientID, Live: n})
		}
	}
	if len(out) == 0 {
		return nil, notFound(adminv1.ResourceClientTokens, name)
	}
	return out, nil
}

func (s *Server) getClientTokens(ctx context.Context, sc *scope, name string) (item, error) {
	found, err := s.findClientTokens(ctx, sc, name)
	if err != nil {
		return item{}, err
	}
	return s.clientTokensItem(sc, s.directory(ctx), found[0]), nil
}

func (s *Server) revokeClientTokens(ctx context.Context, sc *scope, name string, dryRun bool) (types.UID, string, error) {
	found, err := s.findClientTokens(ctx, sc, name)
	if err != nil {
		return "", "", err
	}
	u := s.clientTokensItem(sc, s.directory(ctx), found[0]).meta.UID
	if dryRun {
		return u, "", nil
	}
	// One transaction for every project: a failure leaves all of the client's tokens as they
	// were, never some projects' revoked and others' not.
	projects := make([]string, len(found))
	for i, f := range found {
		projects[i] = f.Project
	}
	clientID := found[0].ClientID
	live, err := s.o.Store.RevokeClientTokensIn(ctx, projects, clientID, s.o.Now())
	if err != nil {
		return "", "", err
	}
	var total int64
	for _, p := range projects {
		total += live[p]
		s.record(ctx, store.AuditRecord{Project: p, Action: events.AdminClientTokensRevoked, Target: "client:" + clientID,
			Details: map[string]string{"tokens": strconv.FormatInt(live[p], 10)}})
	}
	return u, fmt.Sprintf("revoked %d live tokens", total), nil
}

// ---------------------------------------------------------------------------------------------
// auditrecords

func (s *Server) listAudit(ctx context.Context, sc *scope) ([]item, []string, error) {
	q := store.AuditQuery{Projects: sc.keys(), Limit: sc.limit}
	if sc.after != nil {
		id, err := strconv.ParseInt(sc.after[0], 10, 64)
		if err != nil || len(sc.after) != 1 {
			return nil, nil, badRequest("continue: not a token this server handed out")
		}
		q.AfterID = id
	}
	// after and since are this API's own parameters, for following the log (kubectl latchkey
	// audit --follow): records after an id, and records not older than a time.
	if v := sc.raw.Get("after"); v != "" {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil || id < 0 {
			return nil, nil, badRequest("after must be an audit record id")
		}
		q.AfterID = max(q.AfterID, id)
	}
	if v := sc.raw.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return nil, nil, badRequest("since must be an RFC 3339 time")
		}
		q.Since = t
	}
	q.Action, _ = sc.fields.RequiresExactMatch("action")
	q.Actor, _ = sc.fields.RequiresExactMatch("actor")
	q.Target, _ = sc.fields.RequiresExactMatch("target")
	byName := false
	if v, ok := sc.fields.RequiresExactMatch("metadata.name"); ok {
		id, _ := strconv.ParseInt(v, 10, 64)
		if id < 1 {
			return nil, nil, nil // not a record's name: nothing matches
		}
		q.AfterID, q.Limit, byName = max(q.AfterID, id-1), 1, true
	}
	rows, err := s.o.Store.ListAuditPage(ctx, q)
	if err != nil {
		return nil, nil, err
	}
	out := make([]item, len(rows))
	for i, r := range rows {
		p := sc.project(r.Project)
		name := strconv.FormatInt(r.ID, 10)
		m := meta(p, name, mtime(r.Time), "", "audit", name)
		obj := &adminv1.AuditRecord{
			TypeMeta:   metav1.TypeMeta{Kind: "AuditRecord", APIVersion: adminv1.GroupVersion},
			ObjectMeta: *m,
			Project:    p.Name, ID: r.ID, Time: mtime(r.Time), Actor: r.Actor, Action: r.Action, Target: r.Target,
			ClientID: r.ClientID, Connector: r.Connector, Outcome: r.Outcome, Reason: r.Reason, Details: r.Details,
		}
		out[i] = item{obj: obj, meta: m,
			cells: []any{name, r.Time.UTC().Format(time.RFC3339), r.Actor, r.Action, r.Target, r.Outcome, r.Reason, r.ClientID, p.Name},
			fields: fields.Set{"metadata.name": name, "metadata.namespace": p.Namespace, "action": r.Action, "actor": r.Actor,
				"target": r.Target}}
	}
	var next []string
	if !byName && len(rows) == (store.AdminQuery{Limit: q.Limit}).PageLimit() {
		next = []string{strconv.FormatInt(rows[len(rows)-1].ID, 10)}
	}
	return out, next, nil
}

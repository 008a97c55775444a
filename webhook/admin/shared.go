package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	adminv1 "latchkey.dev/latchkey/api/admin/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
)

// SharedStartLifetime is how long a start URL works: long enough to open it and sign in at the
// service, short enough that one pasted into the wrong place is soon worthless.
const SharedStartLifetime = 10 * time.Minute

// SharedStartPath is the path, under the Project's issuer, of the page that takes a start URL's
// code (webhook/callback serves it).
const SharedStartPath = "/shared-connections/start/"

// sharedStore is what shared connections need of the store (part of Store).
type sharedStore interface {
	CreateSharedStart(ctx context.Context, s store.SharedStart) error
	ListSharedConnections(ctx context.Context, project string) ([]store.Connection, error)
}

func sharedResource(s *Server) resource {
	return resource{
		name: adminv1.ResourceSharedConnections, singular: "sharedconnection", kind: "SharedConnection",
		verbs: []string{"get", "list", "watch", "create", "delete"},
		columns: []metav1.TableColumnDefinition{
			col("Name", "string", "the Connector's namespace.name", 0),
			col("Connector", "string", "", 0),
			col("Account", "string", "how the service names the shared account", 0),
			col("State", "string", "live, broken (connect it again) or not-connected", 0),
			col("Clients", "integer", "OAuthClients the Project lets use it", 0),
			col("Age", "string", "", 0),
			col("Project", "string", "", 1),
			col("Start URL", "string", "in the answer to a create only", 1),
		},
		list: s.listShared, get: s.getShared, del: s.disconnectShared, create: s.startShared,
	}
}

// sharedConnectors are the Organisation Connectors of the scope's Projects, by key.
func sharedConnectors(sc *scope) []struct {
	p *config.Project
	c *config.Connector
} {
	var out []struct {
		p *config.Project
		c *config.Connector
	}
	for _, p := range sc.projects {
		keys := make([]string, 0, len(p.Connectors))
		for k, c := range p.Connectors {
			if c.Shared {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			out = append(out, struct {
				p *config.Project
				c *config.Connector
			}{p, p.Connectors[k]})
		}
	}
	return out
}

func (s *Server) sharedItem(p *config.Project, c *config.Connector, conn *store.Connection) item {
	ns, name, _ := strings.Cut(c.Key, "/")
	objName := adminv1.SharedConnectionName(ns, name)
	obj := &adminv1.SharedConnection{
		TypeMeta: metav1.TypeMeta{Kind: "SharedConnection", APIVersion: adminv1.GroupVersion},
		Project:  p.Name, Connector: c.Key, State: "not-connected", Clients: c.SharedClients,
	}
	created := metav1.Time{}
	age := ""
	if conn != nil {
		obj.State, obj.Account, obj.AccountID, obj.Scopes = connState(*conn), conn.AccountName, conn.AccountID, conn.Scopes
		t := mtime(conn.CreatedAt)
		obj.ConnectedAt, created, age = &t, t, since(s.o.Now(), conn.CreatedAt)
	}
	m := meta(p, objName, created, "", "sharedconnection", c.Key)
	obj.ObjectMeta = *m
	return item{obj: obj, meta: m,
		cells:  []any{objName, c.Key, obj.Account, obj.State, int64(len(c.SharedClients)), age, p.Name, ""},
		fields: fields.Set{"metadata.name": objName, "metadata.namespace": p.Namespace}}
}

// current reads the shared connection of c, or nil.
func (s *Server) currentShared(ctx context.Context, p *config.Project, c *config.Connector) (*store.Connection, error) {
	conns, err := s.o.Store.ListSharedConnections(ctx, p.Key)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(conns, func(x store.Connection) bool { return x.Connector == c.Key })
	if i < 0 {
		return nil, nil
	}
	return &conns[i], nil
}

// listShared lists every Organisation Connector of the scope, connected or not: an
// administrator sees which still wait for an account. The list is one page.
func (s *Server) listShared(ctx context.Context, sc *scope) ([]item, []string, error) {
	st := s.o.Store
	var err error
	byProject := map[string][]store.Connection{}
	var out []item
	for _, pc := range sharedConnectors(sc) {
		conns, ok := byProject[pc.p.Key]
		if !ok {
			if conns, err = st.ListSharedConnections(ctx, pc.p.Key); err != nil {
				return nil, nil, err
			}
			byProject[pc.p.Key] = conns
		}
		var conn *store.Connection
		if i := slices.IndexFunc(conns, func(x store.Connection) bool { return x.Connector == pc.c.Key }); i >= 0 {
			conn = &conns[i]
		}
		out = append(out, s.sharedItem(pc.p, pc.c, conn))
	}
	return out, nil, nil
}

// findShared resolves an object name to its Project and Organisation Connector in the scope's
// namespace; anything else is not found.
func findShared(sc *scope, name string) (*config.Project, *config.Connector, error) {
	key, ok := adminv1.ParseSharedConnectionName(name)
	if ok && sc.namespace != "" {
		for _, p := range sc.projects {
			if c := p.Connectors[key]; c != nil && c.Shared {
				return p, c, nil
			}
		}
	}
	return nil, nil, notFound(adminv1.ResourceSharedConnections, name)
}

func (s *Server) getShared(ctx context.Context, sc *scope, name string) (item, error) {
	p, c, err := findShared(sc, name)
	if err != nil {
		return item{}, err
	}
	conn, err := s.currentShared(ctx, p, c)
	if err != nil {
		return item{}, err
	}
	return s.sharedItem(p, c, conn), nil
}

// startShared answers a create with a single-use start URL. The kube-apiserver authorized the
// user to create sharedconnections in this namespace; only the code's hash is stored.
func (s *Server) startShared(ctx context.Context, sc *scope, body []byte, dryRun bool) (item, error) {
	var in adminv1.SharedConnection
	if err := json.Unmarshal(body, &in); err != nil {
		return item{}, badRequest("the request body is not a SharedConnection: " + err.Error())
	}
	if in.Kind != "" && in.Kind != "SharedConnection" {
		return item{}, badRequest("the request body is a " + in.Kind + ", not a SharedConnection")
	}
	if in.Namespace != "" && in.Namespace != sc.namespace {
		return item{}, badRequest("metadata.namespace does not match the request's namespace")
	}
	p, c, err := findShared(sc, in.Name)
	if err != nil {
		return item{}, err
	}
	conn, err := s.currentShared(ctx, p, c)
	if err != nil {
		return item{}, err
	}
	it := s.sharedItem(p, c, conn)
	if dryRun {
		return it, nil
	}
	st := s.o.Store
	now := s.o.Now()
	code := secret.New("")
	start := store.SharedStart{
		CodeHash: secret.Hash(code), ID: secret.NewID(), Project: p.Key, Connector: c.Key,
		Actor: "kubernetes:" + userOf(ctx).name, CreatedAt: now, ExpiresAt: now.Add(SharedStartLifetime),
	}
	if err := st.CreateSharedStart(ctx, start); err != nil {
		return item{}, err
	}
	s.record(ctx, store.AuditRecord{Project: p.Key, Action: events.AdminSharedConnectionStarted, Target: "connector:" + c.Key,
		Details: map[string]string{"connector": c.Key, "start": start.ID, "expires_at": start.ExpiresAt.UTC().Format(time.RFC3339)}})
	obj := it.obj.(*adminv1.SharedConnection)
	obj.StartURL = p.Issuer + SharedStartPath + code
	exp := mtime(start.ExpiresAt)
	obj.StartExpiresAt = &exp
	it.cells[len(it.cells)-1] = obj.StartURL
	return it, nil
}

// disconnectShared removes the shared account: revoked at the service first where the
// Connector can, then deleted. Agents get nothing for the Connector from the next exchange on.
func (s *Server) disconnectShared(ctx context.Context, sc *scope, name string, dryRun bool) (types.UID, string, error) {
	p, c, err := findShared(sc, name)
	if err != nil {
		return "", "", err
	}
	conn, err := s.currentShared(ctx, p, c)
	if err != nil {
		return "", "", err
	}
	if conn == nil {
		return "", "", notFound(adminv1.ResourceSharedConnections, name)
	}
	u := s.sharedItem(p, c, conn).meta.UID
	if dryRun {
		return u, "", nil
	}
	revoked := s.revokeUpstream(ctx, p, *conn)
	if err := s.o.Store.DeleteConnection(ctx, p.Key, conn.ID); errors.Is(err, store.ErrNotFound) {
		return "", "", notFound(adminv1.ResourceSharedConnections, name)
	} else if err != nil {
		return "", "", err
	}
	s.record(ctx, store.AuditRecord{Project: p.Key, Action: events.AdminSharedConnectionDisconnected, Target: "connector:" + c.Key,
		Details: map[string]string{"connector": c.Key, "connection": conn.ID, "account": conn.AccountName, "revoked": revoked}})
	return u, "disconnected the shared account " + conn.AccountName + "; revoked at the service: " + revoked, nil
}

// create answers a POST to a collection that can be created in.
func (s *Server) create(w http.ResponseWriter, r *http.Request, res *resource) {
	if r.PathValue("namespace") == "" {
		writeStatus(w, r, notAllowed("create "+res.name+" in a namespace: the namespace of the Connector's Project"))
		return
	}
	sc, aerr := s.scope(r, res)
	if aerr != nil {
		writeStatus(w, r, aerr)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		writeStatus(w, r, badRequest("the request body could not be read"))
		return
	}
	dry := false
	if v := r.URL.Query()["dryRun"]; len(v) > 0 {
		dry = v[0] == "All"
	}
	it, cerr := res.create(r.Context(), sc, body, dry)
	if cerr != nil {
		s.fail(w, r, cerr)
		return
	}
	writeJSON(w, http.StatusCreated, it.obj)
}

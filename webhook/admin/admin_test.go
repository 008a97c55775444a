package admin_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	adminv1 "latchkey.dev/latchkey/api/admin/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/devcerts"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/events/audittest"
	"latchkey.dev/latchkey/internal/store"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
	"latchkey.dev/latchkey/webhook/admin"
)

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

type harness struct {
	t      *testing.T
	st     *sqlstore.Store
	holder *config.Holder
	url    string
	proxy  *http.Client // presents the front-proxy certificate
	server *httptest.Server
	admin  *admin.Server
	certs  struct {
		proxyCA *devcerts.CA
		other   *devcerts.CA
		serving *devcerts.CA
	}
}

func project(ns, name string) *config.Project {
	return &config.Project{Key: ns + "/" + name, Namespace: ns, Name: name, Clients: map[string]*config.Client{},
		Connectors: map[string]*config.Connector{}}
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	st, err := sqlstore.Open(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	holder := &config.Holder{}
	holder.Store(&config.Snapshot{Projects: map[string]*config.Project{
		"team-a/demo": project("team-a", "demo"), "team-a/other": project("team-a", "other"), "team-b/demo": project("team-b", "demo"),
	}})
	h := startAdmin(t, st, holder, func() time.Time { return now }, nil)
	h.st, h.holder = st, holder
	return h
}

// withSink adds an event sink to every project, as an operator listing one would.
func (h *harness) withSink() *audittest.Sink {
	sink := audittest.NewSink(h.t, func() time.Time { return now })
	for _, p := range h.holder.Load().Projects {
		p.EventSinks = append(p.EventSinks, sink.Config())
	}
	return sink
}

// trail reads each action back from the project's audit log and the sink (internal/events/audittest),
// and checks what every admin record says: the authenticated user as actor, and success.
func (h *harness) trail(sink *audittest.Sink, project string, actions ...string) map[string]store.AuditRecord {
	h.t.Helper()
	recs := audittest.Trail(h.t, h.st, h.holder, func() time.Time { return now }, sink, project, actions...)
	for a, r := range recs {
		if r.Actor != "kubernetes:ada" || r.Outcome != store.OutcomeSuccess || r.Reason != "" {
			h.t.Errorf("%s: actor %q outcome %q reason %q; want kubernetes:ada, success", a, r.Actor, r.Outcome, r.Reason)
		}
	}
	return recs
}

// startAdmin serves the admin API over TLS on loopback for st and holder; proxy presents the
// front-proxy certificate.
func startAdmin(t *testing.T, st admin.Store, holder *config.Holder, clock func() time.Time, revoker admin.Revoker) *harness {
	t.Helper()
	h := &harness{t: t}
	var err error
	if h.certs.proxyCA, err = devcerts.NewCA("front-proxy-ca"); err != nil {
		t.Fatal(err)
	}
	if h.certs.other, err = devcerts.NewCA("someone-else"); err != nil {
		t.Fatal(err)
	}
	srv, err := admin.New(admin.Options{
		Config: holder, Store: st, Logger: testr.New(t), Now: clock, Revoker: revoker,
		Proxy: admin.FrontProxy{ClientCA: h.certs.proxyCA.Pool(), AllowedNames: []string{"front-proxy-client"}},
		// Watches read the store this often: often enough that a test waits little.
		WatchPoll: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	servingCA, _ := devcerts.NewCA("serving")
	serving, _ := servingCA.Server("127.0.0.1")
	sc, _ := serving.TLS()
	ts := httptest.NewUnstartedServer(srv)
	ts.TLS = srv.TLSConfig(func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &sc, nil })
	ts.TLS.Certificates = []tls.Certificate{sc} // else httptest puts its own in
	ts.StartTLS()
	t.Cleanup(ts.Close)
	h.server, h.url, h.admin = ts, ts.URL, srv
	h.certs.serving = servingCA
	h.proxy = h.client(servingCA, h.certs.proxyCA, "front-proxy-client")
	return h
}

// client presents a certificate with common name cn signed by ca (none when ca is nil).
func (h *harness) client(servingCA, ca *devcerts.CA, cn string) *http.Client {
	cfg := &tls.Config{RootCAs: servingCA.Pool(), MinVersion: tls.VersionTLS12}
	if ca != nil {
		leaf, err := ca.Client(cn)
		if err != nil {
			h.t.Fatal(err)
		}
		c, err := leaf.TLS()
		if err != nil {
			h.t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
}

// do sends a request as the front proxy would for user, and decodes the answer into out.
func (h *harness) do(method, path, accept string, out any) int {
	h.t.Helper()
	return h.doWith(h.proxy, method, path, accept, map[string][]string{"X-Remote-User": {"ada"}, "X-Remote-Group": {"admins", "system:authenticated"}}, out)
}

func (h *harness) doWith(c *http.Client, method, path, accept string, hdr map[string][]string, out any) int {
	h.t.Helper()
	req, _ := http.NewRequestWithContext(h.t.Context(), method, h.url+path, nil)
	for k, v := range hdr {
		req.Header[k] = v
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := c.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("Cache-Control") != "no-store" {
		h.t.Errorf("%s %s: Cache-Control %q", method, path, resp.Header.Get("Cache-Control"))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			h.t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode
}

const base = "/apis/admin.latchkey.dev/v1alpha1"

// seed stores alice (team-a/demo) with a session, a grant with tokens and a connection, and
// bob in team-b/demo with the same.
func (h *harness) seed() {
	h.t.Helper()
	ctx := h.t.Context()
	for _, p := range []struct{ project, id, email string }{{"team-a/demo", "alice", "alice@example.com"}, {"team-b/demo", "bob", "bob@example.com"}} {
		must(h.t, upsert(ctx, h.st, p.project, p.id, p.email))
		must(h.t, h.st.CreateSession(ctx, store.Session{IDHash: []byte("s-" + p.id), Project: p.project, Subject: p.id,
			AuthTime: now, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}))
		must(h.t, h.st.UpsertGrant(ctx, store.Grant{Project: p.project, Subject: p.id, ClientID: "repo-helper",
			Scopes: []string{"openid"}, CreatedAt: now, UpdatedAt: now}))
		must(h.t, h.st.CreateTokens(ctx,
			store.Token{Hash: []byte("at-" + p.id), Kind: store.AccessToken, Project: p.project, ClientID: "repo-helper",
				Subject: p.id, FamilyID: "f-" + p.id, IssuedAt: now, ExpiresAt: now.Add(time.Hour)},
			store.Token{Hash: []byte("rt-" + p.id), Kind: store.RefreshToken, Project: p.project, ClientID: "repo-helper",
				Subject: p.id, FamilyID: "f-" + p.id, IssuedAt: now, ExpiresAt: now.Add(24 * time.Hour)}))
		_, err := h.st.SaveConnection(ctx, store.Connection{ID: "conn-" + p.id, Project: p.project, Subject: p.id,
			Connector: strings.Split(p.project, "/")[0] + "/github", AccountID: "1", AccountName: p.id + "-gh", KeyID: "k",
			TokenType: "bearer", CreatedAt: now, UpdatedAt: now})
		must(h.t, err)
	}
}

func upsert(ctx context.Context, st *sqlstore.Store, project, id, email string) error {
	_, err := st.UpsertPerson(ctx, store.Person{Project: project, ID: id, Source: "password", SourceSubject: email,
		Email: email, CreatedAt: now})
	return err
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestDiscovery(t *testing.T) {
	h := newHarness(t)
	var groups metav1.APIGroupList
	if code := h.do("GET", "/apis", "", &groups); code != 200 || groups.Groups[0].Name != adminv1.Group {
		t.Fatalf("/apis: %d %+v", code, groups)
	}
	var list metav1.APIResourceList
	if code := h.do("GET", base, "", &list); code != 200 {
		t.Fatalf("resource list: %d", code)
	}
	verbs := map[string]string{}
	for _, r := range list.APIResources {
		if !r.Namespaced {
			t.Errorf("%s is not namespaced", r.Name)
		}
		verbs[r.Name] = strings.Join(r.Verbs, ",")
	}
	want := map[string]string{"people": "get,list,watch,delete", "grants": "get,list,watch,delete", "connections": "get,list,watch,delete",
		"passkeys": "get,list,watch,delete", "links": "get,list,watch", "clienttokens": "get,list,watch,delete", "auditrecords": "list,watch",
		"sharedconnections": "get,list,watch,create,delete"}
	if fmt.Sprint(verbs) != fmt.Sprint(want) {
		t.Fatalf("verbs = %v, want %v", verbs, want)
	}
}

// TestOnlyTheFrontProxy plays a caller that reaches the admin listener directly, not through
// the kube-apiserver: with no TLS, no client certificate, a certificate from another CA, or the
// right CA's certificate for another name, it claims to be a cluster admin in X-Remote-User.
// Every attempt is refused before any state is read.
func TestOnlyTheFrontProxy(t *testing.T) {
	h := newHarness(t)
	h.seed()
	forged := map[string][]string{"X-Remote-User": {"cluster-admin"}, "X-Remote-Group": {"system:masters"}}
	cases := map[string]*http.Client{}
	// The serving CA is not needed to be refused: skip verification of the server.
	insecure := func(cert *tls.Certificate) *http.Client {
		cfg := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} // the attacker does not care who answers
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	cases["no client certificate"] = insecure(nil)
	otherLeaf, _ := h.certs.other.Client("front-proxy-client")
	oc, _ := otherLeaf.TLS()
	cases["a certificate from another CA"] = insecure(&oc)
	wrongName, _ := h.certs.proxyCA.Client("someone")
	wc, _ := wrongName.TLS()
	cases["the front-proxy CA, another name"] = insecure(&wc)
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, h.url+base+"/namespaces/team-a/connections", nil)
			req.Header = forged
			resp, err := c.Do(req)
			if err != nil {
				return // refused in the handshake
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusUnauthorized || strings.Contains(string(b), "alice") {
				t.Fatalf("got %d %s, want 401", resp.StatusCode, b)
			}
		})
	}
	t.Run("plain HTTP", func(t *testing.T) {
		// The handler itself, reached without TLS (as if served on a plain listener).
		srv := h.server.Config.Handler
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, base+"/namespaces/team-a/connections", nil)
		req.Header = forged
		srv.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized || strings.Contains(rec.Body.String(), "alice") {
			t.Fatalf("got %d %s, want 401", rec.Code, rec.Body)
		}
	})
	t.Run("the front proxy without a user", func(t *testing.T) {
		var st metav1.Status
		if code := h.doWith(h.proxy, "GET", base+"/namespaces/team-a/connections", "", nil, &st); code != 401 || st.Reason != metav1.StatusReasonUnauthorized {
			t.Fatalf("got %d %+v", code, st)
		}
	})
}

func TestListsStayInTheirNamespace(t *testing.T) {
	h := newHarness(t)
	h.seed()
	var conns adminv1.ConnectionList
	if code := h.do("GET", base+"/namespaces/team-a/connections", "", &conns); code != 200 {
		t.Fatalf("list: %d", code)
	}
	if len(conns.Items) != 1 || conns.Items[0].Name != "conn-alice" || conns.Items[0].Namespace != "team-a" ||
		conns.Items[0].Labels[adminv1.ProjectLabel] != "demo" || conns.Items[0].State != "active" || conns.Kind != "ConnectionList" {
		t.Fatalf("team-a connections = %+v", conns)
	}
	// bob's objects are in team-b: not by name from team-a, whatever the resource.
	for _, path := range []string{"/people/bob", "/connections/conn-bob", "/grants/bob.repo-helper", "/clienttokens/repo-helper"} {
		var st metav1.Status
		code := h.do("GET", base+"/namespaces/team-a"+path, "", &st)
		if path == "/clienttokens/repo-helper" {
			// alice's client tokens are in team-a: found, and counting only team-a's.
			var ct adminv1.ClientTokens
			h.do("GET", base+"/namespaces/team-a"+path, "", &ct)
			if code != 200 || ct.LiveTokens != 2 || ct.Project != "demo" {
				t.Fatalf("team-a client tokens: %d %+v", code, ct)
			}
			continue
		}
		if code != 404 || st.Reason != metav1.StatusReasonNotFound {
			t.Errorf("GET team-a%s = %d %+v, want 404", path, code, st)
		}
	}
	// The other project of team-a has nothing; a label selector picks the project.
	var people adminv1.PersonList
	h.do("GET", base+"/namespaces/team-a/people?labelSelector=latchkey.dev/project%3Dother", "", &people)
	if len(people.Items) != 0 {
		t.Fatalf("project=other: %+v", people.Items)
	}
	h.do("GET", base+"/namespaces/team-a/people?labelSelector=latchkey.dev/project%3Ddemo", "", &people)
	if len(people.Items) != 1 || people.Items[0].Email != "alice@example.com" || people.Items[0].ActiveSessions != 1 {
		t.Fatalf("project=demo: %+v", people.Items)
	}
	// Every namespace (cluster-wide RBAC): both.
	h.do("GET", base+"/connections", "", &conns)
	if len(conns.Items) != 2 {
		t.Fatalf("all namespaces: %d", len(conns.Items))
	}
}

func TestPagesAndTables(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	must(t, upsert(ctx, h.st, "team-a/demo", "alice", "alice@example.com"))
	for i := range 5 {
		_, err := h.st.SaveConnection(ctx, store.Connection{ID: fmt.Sprintf("c%d", i), Project: "team-a/demo", Subject: "alice",
			Connector: "team-a/github", AccountID: fmt.Sprint(i), AccountName: fmt.Sprintf("acct%d", i), KeyID: "k",
			TokenType: "bearer", CreatedAt: now, UpdatedAt: now})
		must(t, err)
	}
	var names []string
	cont := ""
	for pages := 0; ; pages++ {
		var l adminv1.ConnectionList
		code := h.do("GET", base+"/namespaces/team-a/connections?limit=2&continue="+cont, "", &l)
		if code != 200 || len(l.Items) > 2 || pages > 3 {
			t.Fatalf("page %d: %d %+v", pages, code, l)
		}
		for _, c := range l.Items {
			names = append(names, c.Name)
		}
		if cont = l.Continue; cont == "" {
			break
		}
	}
	if strings.Join(names, ",") != "c0,c1,c2,c3,c4" {
		t.Fatalf("paged: %v", names)
	}

	var table metav1.Table
	code := h.do("GET", base+"/namespaces/team-a/connections?limit=3", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json", &table)
	if code != 200 || table.Kind != "Table" || len(table.Rows) != 3 || table.Continue == "" {
		t.Fatalf("table: %d %+v", code, table)
	}
	if table.ColumnDefinitions[0].Name != "Name" || table.Rows[0].Cells[1] != "alice@example.com" || table.Rows[0].Cells[4] != "active" {
		t.Fatalf("cells: %+v", table.Rows[0].Cells)
	}
	var pom metav1.PartialObjectMetadata
	must(t, json.Unmarshal(table.Rows[0].Object.Raw, &pom))
	if pom.Namespace != "team-a" || pom.Name != "c0" {
		t.Fatalf("row object: %+v", pom)
	}
}

func TestBadRequests(t *testing.T) {
	h := newHarness(t)
	// A continue token handed out for another resource.
	must(t, upsert(t.Context(), h.st, "team-a/demo", "alice", "alice@example.com"))
	must(t, upsert(t.Context(), h.st, "team-a/demo", "bob", "bob@example.com"))
	var people adminv1.PersonList
	h.do("GET", base+"/namespaces/team-a/people?limit=1", "", &people)
	peopleToken := people.Continue
	if peopleToken == "" {
		t.Fatal("no continue token for people")
	}
	for path, want := range map[string]int{
		"/namespaces/team-a/connections?limit=ten":                                                           400,
		"/namespaces/team-a/connections?continue=not-ours":                                                   400,
		"/namespaces/team-a/connections?fieldSelector=spec.secret%3Dx":                                       400,
		"/namespaces/team-a/connections?labelSelector=%3D%3D%3D":                                             400,
		"/namespaces/team-a/auditrecords?since=yesterday":                                                    400,
		"/namespaces/team-a/connections?watch=true&resourceVersionMatch=Exact":                               400,
		"/namespaces/team-a/connections?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan": 400,
		"/namespaces/team-a/connections?watch=true&timeoutSeconds=soon":                                      400,
		"/namespaces/team-a/auditrecords?watch=true&resourceVersion=yesterday":                               400,
		"/namespaces/team-a/connections?resourceVersionMatch=Sometime&resourceVersion=1":                     400,
		"/namespaces/team-a/connections?continue=" + peopleToken:                                             400,
		"/namespaces/team-a/connections?resourceVersion=12345&resourceVersionMatch=Exact":                    410,
		"/namespaces/team-a/widgets":                                                                         404,
		"/namespaces/team-a/people/nobody":                                                                   404,
		"/namespaces/team-a/grants/no-dot":                                                                   404,
		"/namespaces/team-a/auditrecords/1":                                                                  405,
	} {
		var st metav1.Status
		if code := h.do("GET", base+path, "", &st); code != want || st.Kind != "Status" || st.Code != int32(want) {
			t.Errorf("GET %s = %d %+v, want %d", path, code, st, want)
		}
	}
	var st metav1.Status
	if code := h.do("POST", base+"/namespaces/team-a/connections", "", &st); code != 405 {
		t.Errorf("POST = %d", code)
	}
	if code := h.do("DELETE", base+"/namespaces/team-a/links/x", "", &st); code != 405 {
		t.Errorf("DELETE link = %d", code)
	}
}

func TestEndAccess(t *testing.T) {
	h := newHarness(t)
	sink := h.withSink()
	h.seed()
	ctx := t.Context()
	var before adminv1.Person
	h.do("GET", base+"/namespaces/team-a/people/alice", "", &before)

	// A dry run changes nothing.
	var st metav1.Status
	if code := h.do("DELETE", base+"/namespaces/team-a/people/alice?dryRun=All", "", &st); code != 200 {
		t.Fatalf("dry run: %d %+v", code, st)
	}
	if _, err := h.st.GetSession(ctx, []byte("s-alice"), now); err != nil {
		t.Fatal("the dry run ended a session")
	}

	if code := h.do("DELETE", base+"/namespaces/team-a/people/alice", "", &st); code != 200 || st.Status != metav1.StatusSuccess ||
		st.Details.UID != before.UID {
		t.Fatalf("end access: %d %+v", code, st)
	}
	if _, err := h.st.GetSession(ctx, []byte("s-alice"), now); err == nil {
		t.Fatal("alice's session survived")
	}
	if tok, _ := h.st.GetToken(ctx, []byte("rt-alice")); tok.Active(now) {
		t.Fatal("alice's refresh token survived")
	}
	if tok, _ := h.st.GetToken(ctx, []byte("rt-bob")); !tok.Active(now) {
		t.Fatal("bob's refresh token was revoked")
	}
	var after adminv1.Person
	h.do("GET", base+"/namespaces/team-a/people/alice", "", &after)
	if after.UID == before.UID || after.AccessEndedAt == nil || after.ActiveSessions != 0 {
		t.Fatalf("after: %+v (uid before %s)", after, before.UID)
	}
	// Again: nothing left, still success (the person is there; their access is already ended).
	if code := h.do("DELETE", base+"/namespaces/team-a/people/alice", "", &st); code != 200 {
		t.Fatalf("again: %d", code)
	}
	// From another namespace: not found.
	if code := h.do("DELETE", base+"/namespaces/team-b/people/alice", "", &st); code != 404 {
		t.Fatalf("from team-b: %d", code)
	}

	var audit adminv1.AuditRecordList
	h.do("GET", base+"/namespaces/team-a/auditrecords?fieldSelector=action%3Dadmin.person.access_ended", "", &audit)
	if len(audit.Items) != 2 || audit.Items[0].Actor != "kubernetes:ada" || audit.Items[0].Details["tokens"] != "2" ||
		audit.Items[0].Target != "person:alice" {
		t.Fatalf("audit: %+v", audit.Items)
	}
	if r := h.trail(sink, "team-a/demo", events.AdminAccessEnded)[events.AdminAccessEnded]; r.Target != "person:alice" || r.Details["tokens"] != "0" {
		t.Errorf("the last admin.person.access_ended: %+v", r)
	}
}

func TestRevokeGrantConnectionClientTokens(t *testing.T) {
	h := newHarness(t)
	h.seed()
	sink := h.withSink()
	ctx := t.Context()
	var st metav1.Status
	if code := h.do("DELETE", base+"/namespaces/team-a/grants/alice.repo-helper", "", &st); code != 200 {
		t.Fatalf("revoke grant: %d %+v", code, st)
	}
	if tok, _ := h.st.GetToken(ctx, []byte("at-alice")); tok.Active(now) {
		t.Fatal("the grant's token survived")
	}
	// Gone: kubectl's "not found" (kubectl delete --ignore-not-found makes it quiet).
	if code := h.do("DELETE", base+"/namespaces/team-a/grants/alice.repo-helper", "", &st); code != 404 || st.Reason != metav1.StatusReasonNotFound {
		t.Fatalf("again: %d %+v", code, st)
	}

	if code := h.do("DELETE", base+"/namespaces/team-a/connections/conn-alice", "", &st); code != 200 {
		t.Fatalf("disconnect: %d %+v", code, st)
	}
	if _, err := h.st.GetConnection(ctx, "team-a/demo", "conn-alice"); err == nil {
		t.Fatal("the connection survived")
	}
	if code := h.do("DELETE", base+"/namespaces/team-a/connections/conn-bob", "", &st); code != 404 {
		t.Fatalf("team-b's connection from team-a: %d", code)
	}

	if code := h.do("DELETE", base+"/namespaces/team-b/clienttokens/repo-helper", "", &st); code != 200 {
		t.Fatalf("client tokens: %d %+v", code, st)
	}
	if tok, _ := h.st.GetToken(ctx, []byte("rt-bob")); tok.Active(now) {
		t.Fatal("bob's token survived")
	}
	if code := h.do("DELETE", base+"/namespaces/team-b/clienttokens/repo-helper", "", &st); code != 404 {
		t.Fatalf("client tokens again: %d", code)
	}
	var audit adminv1.AuditRecordList
	if code := h.do("GET", base+"/auditrecords", "", &audit); code != 200 {
		t.Fatalf("audit records: %d", code)
	}
	var actions []string
	for _, r := range audit.Items {
		actions = append(actions, r.Action+"@"+r.Namespace)
	}
	if strings.Join(actions, " ") != "admin.grant.revoked@team-a admin.connection.disconnected@team-a admin.client_tokens.revoked@team-b" {
		t.Fatalf("audit: %v", actions)
	}
	recs := h.trail(sink, "team-a/demo", events.AdminGrantRevoked, events.AdminConnectionEnded)
	if recs[events.AdminGrantRevoked].Target != "person:alice" || recs[events.AdminConnectionEnded].Target != "person:alice" {
		t.Errorf("admin records in team-a: %+v", recs)
	}
	if r := h.trail(sink, "team-b/demo", events.AdminClientTokensRevoked)[events.AdminClientTokensRevoked]; r.Target != "client:repo-helper" || r.ClientID != "repo-helper" {
		t.Errorf("admin.client_tokens.revoked: %+v", r)
	}
}

// revoker records the connections it was asked to revoke upstream.
type revoker struct {
	got []string
	err error
}

func (r *revoker) Revoke(_ context.Context, c *config.Connector, conn store.Connection) error {
	r.got = append(r.got, c.Key+"/"+conn.ID)
	return r.err
}

// Disconnecting revokes at the service when the Connector declares a revocation endpoint, and
// removes the connection even when the service fails; the audit record says which happened.
func TestDisconnectRevokesUpstream(t *testing.T) {
	st, err := sqlstore.Open(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "db"))
	must(t, err)
	t.Cleanup(func() { st.Close() })
	p := project("team-a", "demo")
	p.Connectors["team-a/github"] = &config.Connector{Key: "team-a/github", RevocationURL: "https://github.example/revoke"}
	holder := &config.Holder{}
	holder.Store(&config.Snapshot{Projects: map[string]*config.Project{p.Key: p}})
	rv := &revoker{}
	h := startAdmin(t, st, holder, func() time.Time { return now }, rv)
	h.st = st
	ctx := t.Context()
	must(t, upsert(ctx, st, p.Key, "alice", "alice@example.com"))
	for _, id := range []string{"c1", "c2", "c3"} {
		connector := "team-a/github"
		if id == "c3" {
			connector = "team-a/gitlab" // no revocation endpoint declared
		}
		_, err := st.SaveConnection(ctx, store.Connection{ID: id, Project: p.Key, Subject: "alice", Connector: connector,
			AccountID: id, AccountName: id, KeyID: "k", TokenType: "bearer", CreatedAt: now, UpdatedAt: now})
		must(t, err)
	}
	var s metav1.Status
	if code := h.do("DELETE", base+"/namespaces/team-a/connections/c1", "", &s); code != 200 {
		t.Fatalf("c1: %d %+v", code, s)
	}
	rv.err = fmt.Errorf("service down")
	if code := h.do("DELETE", base+"/namespaces/team-a/connections/c2", "", &s); code != 200 {
		t.Fatalf("c2: %d %+v", code, s)
	}
	if code := h.do("DELETE", base+"/namespaces/team-a/connections/c3", "", &s); code != 200 {
		t.Fatalf("c3: %d %+v", code, s)
	}
	if strings.Join(rv.got, ",") != "team-a/github/c1,team-a/github/c2" {
		t.Fatalf("revoked upstream: %v", rv.got)
	}
	var audit adminv1.AuditRecordList
	h.do("GET", base+"/namespaces/team-a/auditrecords", "", &audit)
	var revoked []string
	for _, r := range audit.Items {
		revoked = append(revoked, r.Details["connection"]+"="+r.Details["revoked"])
	}
	if strings.Join(revoked, " ") != "c1=yes c2=failed c3=not_supported" {
		t.Fatalf("audit: %v", revoked)
	}
	if rest, _, _ := st.ListConnectionsPage(ctx, store.AdminQuery{Projects: []string{p.Key}}); len(rest) != 0 {
		t.Fatalf("left: %+v", rest)
	}
}

// An audit record's outcome, reason, client and Connector reach the admin API's objects and
// its table: `kubectl get auditrecords` says why something was refused.
func TestAuditRecordsShowOutcomeAndReason(t *testing.T) {
	h := newHarness(t)
	h.seed()
	must(t, h.st.AppendAudit(t.Context(), store.AuditRecord{Project: "team-a/demo", Time: now, Actor: "client:web",
		Action: events.ClientAuthFailed, Target: "web", ClientID: "web", Connector: "team-a/github",
		Outcome: store.OutcomeRefused, Reason: "wrong_secret", Details: map[string]string{"method": "client_secret_basic"}}))
	var list adminv1.AuditRecordList
	if code := h.do("GET", base+"/namespaces/team-a/auditrecords?fieldSelector=action%3Dclient.authentication_failed", "", &list); code != 200 || len(list.Items) != 1 {
		t.Fatalf("list: %d %+v", code, list.Items)
	}
	if r := list.Items[0]; r.Outcome != store.OutcomeRefused || r.Reason != "wrong_secret" || r.ClientID != "web" || r.Connector != "team-a/github" {
		t.Fatalf("record: %+v", r)
	}
	var table metav1.Table
	code := h.do("GET", base+"/namespaces/team-a/auditrecords?fieldSelector=action%3Dclient.authentication_failed",
		"application/json;as=Table;v=v1;g=meta.k8s.io,application/json", &table)
	if code != 200 || len(table.Rows) != 1 {
		t.Fatalf("table: %d %+v", code, table)
	}
	cells := map[string]any{}
	for i, c := range table.ColumnDefinitions {
		cells[c.Name] = table.Rows[0].Cells[i]
	}
	if cells["Outcome"] != "refused" || cells["Reason"] != "wrong_secret" || cells["Client"] != "web" {
		t.Fatalf("cells: %v", cells)
	}
}

package admin_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	adminv1 "latchkey.dev/latchkey/api/admin/v1alpha1"
	"latchkey.dev/latchkey/internal/admintest"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
	"latchkey.dev/latchkey/webhook/admin"
)

// sharedProject is team-a/demo with an Organisation GitHub connector and a Personal GitLab one.
func sharedProject(ns string) *config.Project {
	p := project(ns, "demo")
	p.Issuer = "https://latchkey.example/" + ns + "/demo"
	p.Connectors[ns+"/github"] = &config.Connector{Key: ns + "/github", Namespace: ns, Name: "github", Shared: true,
		SharedClients: []string{ns + "/repo-helper"}, RevocationURL: "https://github.example/revoke"}
	p.Connectors[ns+"/gitlab"] = &config.Connector{Key: ns + "/gitlab", Namespace: ns, Name: "gitlab"}
	return p
}

func (h *harness) send(method, path string, body []byte, out any) int {
	h.t.Helper()
	req, _ := http.NewRequestWithContext(h.t.Context(), method, h.url+path, bytes.NewReader(body))
	req.Header.Set("X-Remote-User", "ada")
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.proxy.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			h.t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
	}
	return resp.StatusCode
}

func sharedBody(name string) []byte {
	b, _ := json.Marshal(adminv1.SharedConnection{
		TypeMeta:   metav1.TypeMeta{Kind: "SharedConnection", APIVersion: adminv1.GroupVersion},
		ObjectMeta: metav1.ObjectMeta{Name: name},
	})
	return b
}

// An administrator lists the Organisation connectors, asks for a start URL (only its hash is
// stored, it lives SharedStartLifetime and names who asked), sees the account once connected,
// and disconnects it: revoked at the service, gone from the store, each step audited.
func TestSharedConnections(t *testing.T) {
	st, err := sqlstore.Open(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "db"))
	must(t, err)
	t.Cleanup(func() { st.Close() })
	a, b := sharedProject("team-a"), sharedProject("team-b")
	holder := &config.Holder{}
	holder.Store(&config.Snapshot{Projects: map[string]*config.Project{a.Key: a, b.Key: b}})
	rv := &revoker{}
	h := startAdmin(t, st, holder, func() time.Time { return now }, rv)
	h.st, h.holder = st, holder
	sink := h.withSink()
	ctx := t.Context()

	var list adminv1.SharedConnectionList
	if code := h.do("GET", base+"/namespaces/team-a/sharedconnections", "", &list); code != 200 ||
		len(list.Items) != 1 || list.Items[0].Name != "team-a.github" || list.Items[0].State != "not-connected" {
		t.Fatalf("list: %d %+v", code, list.Items)
	}

	var created adminv1.SharedConnection
	if code := h.send("POST", base+"/namespaces/team-a/sharedconnections", sharedBody("team-a.github"), &created); code != http.StatusCreated {
		t.Fatalf("create: %d %+v", code, created)
	}
	code, ok := strings.CutPrefix(created.StartURL, a.Issuer+admin.SharedStartPath)
	if !ok || len(code) < 40 || created.StartExpiresAt == nil || !created.StartExpiresAt.Time.Equal(now.Add(admin.SharedStartLifetime)) {
		t.Fatalf("start URL %q expires %v", created.StartURL, created.StartExpiresAt)
	}
	start, err := st.TakeSharedStart(ctx, secret.Hash(code), now)
	must(t, err)
	if start.Actor != "kubernetes:ada" || start.Connector != "team-a/github" || start.Project != a.Key {
		t.Fatalf("stored start %+v", start)
	}

	refused := []struct {
		name, path string
		body       []byte
		status     int
	}{
		{"a Personal connector", "/namespaces/team-a/sharedconnections", sharedBody("team-a.gitlab"), 404},
		{"another namespace's connector", "/namespaces/team-b/sharedconnections", sharedBody("team-a.github"), 404},
		{"a name that is no connector's", "/namespaces/team-a/sharedconnections", sharedBody("github"), 404},
		{"no namespace", "/sharedconnections", sharedBody("team-a.github"), 405},
		{"not JSON", "/namespaces/team-a/sharedconnections", []byte("start please"), 400},
		{"another kind", "/namespaces/team-a/sharedconnections", []byte(`{"kind":"Person","metadata":{"name":"team-a.github"}}`), 400},
		{"create on a resource that has none", "/namespaces/team-a/people", sharedBody("team-a.github"), 405},
	}
	for _, r := range refused {
		var st metav1.Status
		if got := h.send("POST", base+r.path, r.body, &st); got != r.status || st.Kind != "Status" {
			t.Errorf("%s: %d %+v, want %d", r.name, got, st, r.status)
		}
	}

	conn := store.Connection{ID: "shared-1", Project: a.Key, Subject: store.SharedSubject("team-a/github"), Connector: "team-a/github",
		AccountID: "42", AccountName: "acme-bot", KeyID: "k", Status: store.ConnectionActive, CreatedAt: now, UpdatedAt: now}
	_, _, err = st.SaveSharedConnection(ctx, conn)
	must(t, err)
	// The shared account is nobody's connection: not listed, got or disconnected as one.
	var conns adminv1.ConnectionList
	if code := h.do("GET", base+"/namespaces/team-a/connections", "", &conns); code != 200 || len(conns.Items) != 0 {
		t.Fatalf("connections: %d %+v", code, conns.Items)
	}
	var status metav1.Status
	for _, m := range []string{"GET", "DELETE"} {
		if code := h.do(m, base+"/namespaces/team-a/connections/shared-1", "", &status); code != 404 {
			t.Fatalf("%s the shared account as a connection: %d", m, code)
		}
	}
	var got adminv1.SharedConnection
	if code := h.do("GET", base+"/namespaces/team-a/sharedconnections/team-a.github", "", &got); code != 200 ||
		got.State != "active" || got.Account != "acme-bot" || got.StartURL != "" {
		t.Fatalf("get: %d %+v", code, got)
	}
	if code := h.do("DELETE", base+"/namespaces/team-b/sharedconnections/team-a.github", "", &status); code != 404 {
		t.Fatalf("delete from team-b: %d", code)
	}
	if code := h.do("DELETE", base+"/namespaces/team-a/sharedconnections/team-a.github", "", &status); code != 200 ||
		!strings.Contains(status.Message, "revoked at the service: yes") {
		t.Fatalf("delete: %d %+v", code, status)
	}
	if len(rv.got) != 1 || rv.got[0] != "team-a/github/shared-1" {
		t.Fatalf("revoked upstream: %v", rv.got)
	}
	if _, err := st.GetConnection(ctx, a.Key, "shared-1"); err == nil {
		t.Fatal("the shared connection survived")
	}
	if code := h.do("DELETE", base+"/namespaces/team-a/sharedconnections/team-a.github", "", &status); code != 404 {
		t.Fatalf("delete again: %d", code)
	}
	recs := h.trail(sink, a.Key, events.AdminSharedConnectionStarted, events.AdminSharedConnectionDisconnected)
	if recs[events.AdminSharedConnectionStarted].Details["start"] != start.ID ||
		recs[events.AdminSharedConnectionDisconnected].Details["account"] != "acme-bot" ||
		recs[events.AdminSharedConnectionDisconnected].Details["revoked"] != "yes" {
		t.Fatalf("records %+v", recs)
	}
}

// kubeSend is kube with a JSON body.
func kubeSend(t *testing.T, cfg *rest.Config, method, path string, body []byte, out any) int {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(t.Context(), method, strings.TrimSuffix(cfg.Host, "/")+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
	}
	return resp.StatusCode
}

// Behind a real kube-apiserver, the tenant admin of team-a plays the tenant in the next
// namespace: she cannot ask for a start URL for team-b's shared account, see it, or disconnect
// it; the kube-apiserver's RBAC refuses each before it reaches Latchkey, and team-b's account
// and starts stay as they were. In team-a she can, and a user without roles cannot.
func TestSharedConnectionsUnderRBAC(t *testing.T) {
	e := admintest.Start(t, []*config.Project{sharedProject("team-a"), sharedProject("team-b")}, func() time.Time { return now })
	ctx := t.Context()
	bobs := store.Connection{ID: "shared-b", Project: "team-b/demo", Subject: store.SharedSubject("team-b/github"), Connector: "team-b/github",
		AccountID: "7", AccountName: "team-b-bot", KeyID: "k", Status: store.ConnectionActive, CreatedAt: now, UpdatedAt: now}
	_, _, err := e.Store.SaveSharedConnection(ctx, bobs)
	must(t, err)
	tina, nora := e.UserConfig("tina"), e.UserConfig("nora")

	refused := []struct {
		who    *rest.Config
		name   string
		method string
		path   string
	}{
		{tina, "tenant admin creates in team-b", "POST", "/namespaces/team-b/sharedconnections"},
		{tina, "tenant admin lists team-b", "GET", "/namespaces/team-b/sharedconnections"},
		{tina, "tenant admin gets team-b's", "GET", "/namespaces/team-b/sharedconnections/team-b.github"},
		{tina, "tenant admin disconnects team-b's", "DELETE", "/namespaces/team-b/sharedconnections/team-b.github"},
		{tina, "tenant admin lists every namespace", "GET", "/sharedconnections"},
		{nora, "user without roles creates in team-a", "POST", "/namespaces/team-a/sharedconnections"},
		{nora, "user without roles lists team-a", "GET", "/namespaces/team-a/sharedconnections"},
	}
	for _, r := range refused {
		var st metav1.Status
		code := kubeSend(t, r.who, r.method, base+r.path, sharedBody("team-b.github"), &st)
		if code != http.StatusForbidden || st.Reason != metav1.StatusReasonForbidden ||
			!strings.Contains(st.Message, `in API group "admin.latchkey.dev"`) {
			t.Errorf("%s: %d %+v, want 403 from RBAC", r.name, code, st)
		}
	}
	if _, err := e.Store.GetConnection(ctx, "team-b/demo", "shared-b"); err != nil {
		t.Fatalf("team-b's shared account after the refused attempts: %v", err)
	}
	if n, err := e.Store.GarbageCollect(ctx, now.Add(time.Hour)); err != nil || n["shared_starts"] != 0 {
		t.Fatalf("start URLs made by refused requests: %v %v", n, err)
	}

	var created adminv1.SharedConnection
	if code := kubeSend(t, tina, "POST", base+"/namespaces/team-a/sharedconnections", sharedBody("team-a.github"), &created); code != http.StatusCreated ||
		!strings.HasPrefix(created.StartURL, "https://latchkey.example/team-a/demo"+admin.SharedStartPath) {
		t.Fatalf("tina in team-a: %d %+v", code, created)
	}
	var list adminv1.SharedConnectionList
	if code := kubeSend(t, tina, "GET", base+"/namespaces/team-a/sharedconnections", nil, &list); code != 200 || len(list.Items) != 1 {
		t.Fatalf("tina lists team-a: %d %+v", code, list)
	}
}

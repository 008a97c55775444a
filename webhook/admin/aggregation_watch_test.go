package admin_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	adminv1 "latchkey.dev/latchkey/api/admin/v1alpha1"
	"latchkey.dev/latchkey/internal/admintest"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/store"
)

var connectionsGVR = schema.GroupVersionResource{Group: adminv1.Group, Version: adminv1.Version, Resource: adminv1.ResourceConnections}

// wait returns the first value from ch that ok accepts, failing the test if none comes within
// two minutes (a bound on a broken watch, not a timing the test depends on).
func wait[T any](t *testing.T, ch <-chan T, what string, ok func(T) bool) T {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		select {
		case v := <-ch:
			if ok(v) {
				return v
			}
		case <-deadline:
			t.Fatalf("%s: not seen within two minutes", what)
		}
	}
}

// TestAggregatedListWatchExplain runs client-go and kubectl against the admin API through a
// real kube-apiserver's aggregator: a list without limit returns every object; an informer
// (client-go's reflector) syncs and sees a new connection, a connection's change and a new
// audit record; `kubectl get -w` prints a new row, and only its namespace's; `kubectl explain`
// describes the fields from the OpenAPI document. RBAC decides who may watch: a user who may
// list but not watch, and a user with no role, are refused with 403 by the kube-apiserver.
func TestAggregatedListWatchExplain(t *testing.T) {
	e := admintest.Start(t, []*config.Project{project("team-a", "demo"), project("team-b", "demo")}, func() time.Time { return now })
	h := &harness{t: t, st: e.Store}
	h.seed()
	ctx := t.Context()
	ada := e.UserConfig("ada")
	const many = 150 // more than the 100 a list without limit used to stop at
	for i := range many {
		_, err := e.Store.SaveConnection(ctx, store.Connection{ID: fmt.Sprintf("c%03d", i), Project: "team-a/demo", Subject: "alice",
			Connector: "team-a/github", AccountID: fmt.Sprint(100 + i), AccountName: fmt.Sprintf("acct%d", i), KeyID: "k",
			TokenType: "bearer", CreatedAt: now, UpdatedAt: now})
		must(t, err)
	}

	// client-go, not paging.
	dyn, err := dynamic.NewForConfig(ada)
	must(t, err)
	l, err := dyn.Resource(connectionsGVR).Namespace("team-a").List(ctx, metav1.ListOptions{})
	must(t, err)
	if len(l.Items) != many+1 || l.GetContinue() != "" || l.GetResourceVersion() == "" {
		t.Fatalf("unpaged list: %d items (want %d), continue %q, rv %q", len(l.Items), many+1, l.GetContinue(), l.GetResourceVersion())
	}

	// An informer on connections and one on audit records.
	type change struct{ verb, name, state string }
	seen := make(chan change, 4096)
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			u := o.(*unstructured.Unstructured)
			s, _, _ := unstructured.NestedString(u.Object, "state")
			seen <- change{"add", u.GetName(), s}
		},
		UpdateFunc: func(_, o any) {
			u := o.(*unstructured.Unstructured)
			s, _, _ := unstructured.NestedString(u.Object, "state")
			seen <- change{"update", u.GetName(), s}
		},
		DeleteFunc: func(o any) {
			if u, ok := o.(*unstructured.Unstructured); ok {
				seen <- change{"delete", u.GetName(), ""}
			}
		},
	}
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, "team-a", nil)
	for _, res := range []string{adminv1.ResourceConnections, adminv1.ResourceAuditRecords} {
		_, err := factory.ForResource(connectionsGVR.GroupVersion().WithResource(res)).Informer().AddEventHandler(handler)
		must(t, err)
	}
	syncCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	informers, stop := context.WithCancel(ctx)
	factory.Start(informers.Done())
	defer factory.Shutdown() // after stop: Shutdown waits for the informers to end
	defer stop()
	for res, ok := range factory.WaitForCacheSync(syncCtx.Done()) {
		if !ok {
			t.Fatalf("informer on %s did not sync", res.Resource)
		}
	}
	_, err = e.Store.SaveConnection(ctx, store.Connection{ID: "conn-new", Project: "team-a/demo", Subject: "alice",
		Connector: "team-a/linear", AccountID: "9", AccountName: "alice-linear", KeyID: "k", TokenType: "bearer", CreatedAt: now, UpdatedAt: now})
	must(t, err)
	wait(t, seen, "the informer's add of conn-new", func(c change) bool { return c == change{"add", "conn-new", "active"} })
	_, err = e.Store.UpdateConnection(ctx, "team-a/demo", "conn-alice", func(c store.Connection) (store.Connection, error) {
		c.Status = store.ConnectionRevokedUpstream
		return c, nil
	})
	must(t, err)
	wait(t, seen, "the informer's update of conn-alice", func(c change) bool { return c == change{"update", "conn-alice", "revoked_upstream"} })
	must(t, e.Store.AppendAudit(ctx, store.AuditRecord{Project: "team-a/demo", Time: now, Actor: "alice", Action: "watched"}))
	var recs adminv1.AuditRecordList
	kube(t, ada, "GET", base+"/namespaces/team-a/auditrecords", &recs)
	last := recs.Items[len(recs.Items)-1]
	wait(t, seen, "the informer's add of the audit record", func(c change) bool { return c.verb == "add" && c.name == last.Name })

	// kubectl get -w as the tenant admin of team-a prints the new row, and nothing of team-b.
	kubectl := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	// getW starts `kubectl get -w`; its lines arrive on the channel, which is closed when kubectl
	// exits. A change that lands between kubectl's list and its watch makes the list's version
	// (a digest of the state) stale, and the watch answers 410 Expired, on which kubectl exits as
	// it does against a compacted etcd; the test then runs it once more, and that list shows the
	// row. Either way no row of team-b may ever be printed.
	getW := func() <-chan string {
		cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", e.Kubeconfig(t, "tina"), "get", "connections.admin.latchkey.dev", "-n", "team-a", "-w")
		out, err := cmd.StdoutPipe()
		must(t, err)
		must(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		lines := make(chan string, 4096)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		return lines
	}
	newRow := func(l string) bool {
		if strings.Contains(l, "conn-bob-watched") {
			t.Fatalf("team-a's watch printed team-b's connection: %q", l)
		}
		return strings.HasPrefix(l, "conn-watched ") && strings.Contains(l, "alice-notion")
	}
	lines := getW()
	wait(t, lines, "kubectl get -w's first rows", func(l string) bool { return strings.HasPrefix(l, "conn-new ") })
	_, err = e.Store.SaveConnection(ctx, store.Connection{ID: "conn-bob-watched", Project: "team-b/demo", Subject: "bob",
		Connector: "team-b/linear", AccountID: "9", AccountName: "bob-linear", KeyID: "k", TokenType: "bearer", CreatedAt: now, UpdatedAt: now})
	must(t, err)
	_, err = e.Store.SaveConnection(ctx, store.Connection{ID: "conn-watched", Project: "team-a/demo", Subject: "alice",
		Connector: "team-a/notion", AccountID: "9", AccountName: "alice-notion", KeyID: "k", TokenType: "bearer", CreatedAt: now, UpdatedAt: now})
	must(t, err)
	seenRow := false
	deadline := time.After(2 * time.Minute)
	for attempt := 0; !seenRow; {
		select {
		case l, open := <-lines:
			switch {
			case open:
				seenRow = newRow(l)
			case attempt == 0:
				attempt++
				lines = getW()
			default:
				t.Fatal("kubectl get -w exited twice without printing the new row")
			}
		case <-deadline:
			t.Fatal("kubectl get -w's new row: not seen within two minutes")
		}
	}

	// RBAC: watching is its own verb.
	lena := userWithRole(t, e, "lena", "team-a", []string{"get", "list"})
	for _, r := range []struct {
		who  string
		path string
	}{
		{"lena", "/namespaces/team-a/connections?watch=true"},
		{"nora", "/namespaces/team-a/connections?watch=true"},
		{"tina", "/namespaces/team-b/connections?watch=true"},
		{"tina", "/connections?watch=true"},
		{"tina", "/namespaces/team-b/auditrecords?watch=true"},
	} {
		cfg := map[string]*envtestUser{"lena": lena, "nora": {e.UserConfig("nora")}, "tina": {e.UserConfig("tina")}}[r.who]
		var st metav1.Status
		if code := kube(t, cfg.cfg, "GET", base+r.path, &st); code != http.StatusForbidden || !strings.Contains(st.Message, `cannot watch resource`) {
			t.Errorf("%s watches %s: %d %+v, want 403 from RBAC", r.who, r.path, code, st)
		}
	}
	var lenaList adminv1.ConnectionList
	if code := kube(t, lena.cfg, "GET", base+"/namespaces/team-a/connections", &lenaList); code != 200 {
		t.Fatalf("lena lists: %d", code)
	}

	// kubectl explain, from the OpenAPI document the aggregator fetched (it refreshes it
	// after the APIService becomes available, so ask until it has).
	var explained string
	for range 120 {
		b, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", e.Kubeconfig(t, "ada"), "explain", "connections.admin.latchkey.dev").CombinedOutput()
		if explained = string(b); err == nil {
			break
		}
		time.Sleep(time.Second)
	}
	for _, want := range []string{"KIND:", "Connection", "VERSION:", "admin.latchkey.dev/v1alpha1", "needs_reconnect", "state", "metadata"} {
		if !strings.Contains(explained, want) {
			t.Fatalf("kubectl explain does not say %q:\n%s", want, explained)
		}
	}
	b, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", e.Kubeconfig(t, "ada"), "explain", "auditrecords.admin.latchkey.dev.outcome").CombinedOutput()
	if err != nil || !strings.Contains(string(b), "success, refused or failed") {
		t.Fatalf("kubectl explain auditrecords.outcome: %v\n%s", err, b)
	}
}

type envtestUser struct{ cfg *rest.Config }

// userWithRole adds a user bound in namespace to a Role allowing verbs on every admin resource.
func userWithRole(t *testing.T, e *admintest.Env, name, namespace string, verbs []string) *envtestUser {
	t.Helper()
	ctx := t.Context()
	must(t, e.Admin.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{adminv1.Group}, Resources: []string{"*"}, Verbs: verbs}}}))
	must(t, e.Admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: name}}}))
	u, err := e.Env.AddUser(envtest.User{Name: name}, e.Env.Config)
	must(t, err)
	return &envtestUser{u.Config()}
}

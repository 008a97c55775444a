package admin_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	adminv1 "latchkey.dev/latchkey/api/admin/v1alpha1"
	"latchkey.dev/latchkey/internal/admintest"
	"latchkey.dev/latchkey/internal/config"
)

// kube sends a request through the kube-apiserver as a user and decodes the answer.
func kube(t *testing.T, cfg *rest.Config, method, path string, out any) int {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(t.Context(), method, strings.TrimSuffix(cfg.Host, "/")+path, nil)
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

// TestAggregatedUnderRBAC runs the admin API behind a real kube-apiserver. The tenant admin of
// team-a plays the tenant in the next namespace: every read and every revocation she attempts
// in team-b, or across namespaces, is refused by the kube-apiserver's RBAC before it reaches
// Latchkey, and nothing of team-b changes. A user without any binding is refused everywhere.
func TestAggregatedUnderRBAC(t *testing.T) {
	e := admintest.Start(t, []*config.Project{project("team-a", "demo"), project("team-b", "demo")}, func() time.Time { return now })
	h := &harness{t: t, st: e.Store}
	h.seed()
	h.seedPasskeys()
	ada, tina, nora := e.UserConfig("ada"), e.UserConfig("tina"), e.UserConfig("nora")

	var conns adminv1.ConnectionList
	if code := kube(t, tina, "GET", base+"/namespaces/team-a/connections", &conns); code != 200 ||
		len(conns.Items) != 1 || conns.Items[0].Person != "alice" {
		t.Fatalf("tina in team-a: %d %+v", code, conns)
	}

	refused := []struct{ user, who, method, path string }{
		{"tina", "tenant admin", "GET", "/namespaces/team-b/connections"},
		{"tina", "tenant admin", "GET", "/namespaces/team-b/people/bob"},
		{"tina", "tenant admin", "DELETE", "/namespaces/team-b/people/bob"},
		{"tina", "tenant admin", "DELETE", "/namespaces/team-b/grants/bob.repo-helper"},
		{"tina", "tenant admin", "DELETE", "/namespaces/team-b/connections/conn-bob"},
		{"tina", "tenant admin", "DELETE", "/namespaces/team-b/clienttokens/repo-helper"},
		{"tina", "tenant admin", "GET", "/namespaces/team-b/passkeys"},
		{"tina", "tenant admin", "GET", "/namespaces/team-b/passkeys/" + b64(bobsPasskey)},
		{"tina", "tenant admin", "DELETE", "/namespaces/team-b/passkeys/" + b64(bobsPasskey)},
		{"tina", "tenant admin", "GET", "/passkeys"},
		{"nora", "user without roles", "DELETE", "/namespaces/team-a/passkeys/" + b64(alicePhone)},
		{"tina", "tenant admin", "GET", "/connections"},
		{"tina", "tenant admin", "GET", "/namespaces/team-b/auditrecords"},
		{"nora", "user without roles", "GET", "/namespaces/team-a/connections"},
		{"nora", "user without roles", "DELETE", "/namespaces/team-a/people/alice"},
	}
	for _, r := range refused {
		cfg := map[string]*rest.Config{"tina": tina, "nora": nora}[r.user]
		var st metav1.Status
		code := kube(t, cfg, r.method, base+r.path, &st)
		if code != http.StatusForbidden || st.Reason != metav1.StatusReasonForbidden ||
			!strings.Contains(st.Message, `in API group "admin.latchkey.dev"`) {
			t.Errorf("%s %s %s: %d %+v, want 403 from RBAC", r.who, r.method, r.path, code, st)
		}
	}
	// Nothing of team-b changed.
	if tok, err := e.Store.GetToken(t.Context(), []byte("rt-bob")); err != nil || !tok.Active(now) {
		t.Fatalf("bob's token after the refused attempts: %+v %v", tok, err)
	}
	if _, err := e.Store.GetConnection(t.Context(), "team-b/demo", "conn-bob"); err != nil {
		t.Fatalf("bob's connection after the refused attempts: %v", err)
	}
	if _, err := e.Store.GetPasskey(t.Context(), "team-b/demo", bobsPasskey); err != nil {
		t.Fatalf("bob's passkey after the refused attempts: %v", err)
	}
	// In her own namespace she lists alice's passkeys and removes one.
	var keys adminv1.PasskeyList
	if code := kube(t, tina, "GET", base+"/namespaces/team-a/passkeys", &keys); code != 200 || len(keys.Items) != 2 {
		t.Fatalf("tina lists team-a's passkeys: %d %+v", code, keys)
	}
	var removed metav1.Status
	if code := kube(t, tina, "DELETE", base+"/namespaces/team-a/passkeys/"+b64(alicePhone), &removed); code != 200 {
		t.Fatalf("tina removes alice's passkey: %d %+v", code, removed)
	}

	// In her own namespace the tenant admin ends alice's access, and is the audit record's actor.
	var st metav1.Status
	if code := kube(t, tina, "DELETE", base+"/namespaces/team-a/people/alice", &st); code != 200 || st.Status != metav1.StatusSuccess {
		t.Fatalf("tina ends alice's access: %d %+v", code, st)
	}
	if tok, _ := e.Store.GetToken(t.Context(), []byte("rt-alice")); tok.Active(now) {
		t.Fatal("alice's refresh token survived")
	}
	var audit adminv1.AuditRecordList
	kube(t, tina, "GET", base+"/namespaces/team-a/auditrecords", &audit)
	if len(audit.Items) != 2 || audit.Items[0].Actor != "kubernetes:tina" || audit.Items[0].Action != "admin.passkey.removed" ||
		audit.Items[1].Actor != "kubernetes:tina" || audit.Items[1].Action != "admin.person.access_ended" {
		t.Fatalf("audit: %+v", audit.Items)
	}

	// The cluster admin sees every namespace.
	if code := kube(t, ada, "GET", base+"/connections", &conns); code != 200 || len(conns.Items) != 1 || conns.Items[0].Namespace != "team-b" {
		t.Fatalf("ada across namespaces: %d %+v", code, conns.Items)
	}
	var people adminv1.PersonList
	if code := kube(t, ada, "GET", base+"/people", &people); code != 200 || len(people.Items) != 2 {
		t.Fatalf("ada's people: %d %+v", code, people.Items)
	}
	var grants adminv1.GrantList
	kube(t, ada, "GET", base+"/namespaces/team-b/grants", &grants)
	if len(grants.Items) != 1 || grants.Items[0].LiveTokens != 2 {
		t.Fatalf("team-b grants: %+v", grants.Items)
	}
}

package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"latchkey.dev/latchkey/internal/admintest"
	"latchkey.dev/latchkey/internal/config"
)

// TestPluginKubeconfigFlags runs the plugin with kubectl's kubeconfig flags against a real
// kube-apiserver aggregating the admin API: --context picks the user, --as impersonates only
// as far as RBAC's impersonate verb allows and then acts with the impersonated user's rights,
// --token authenticates, -l narrows, -o jsonpath prints from the List, and completion offers
// only what the user may list.
func TestPluginKubeconfigFlags(t *testing.T) {
	now := time.Now()
	e := admintest.Start(t, []*config.Project{project("team-a", "demo"), project("team-b", "demo")}, nil)
	seed(t, e.Store, "team-a/demo", "alice", "alice@example.com", now)
	seed(t, e.Store, "team-b/demo", "bob", "bob@example.com", now)
	ctx := t.Context()

	// root may impersonate anyone (system:masters); ada and tina may not impersonate at all.
	rootUser, err := e.Env.AddUser(envtest.User{Name: "root", Groups: []string{"system:masters"}}, e.Env.Config)
	must(t, err)
	e.Users["root"] = rootUser
	root, tina := e.Kubeconfig(t, "root"), e.Kubeconfig(t, "tina")
	both := mergedKubeconfig(t, map[string]string{"tina": tina, "ada": e.Kubeconfig(t, "ada")}, "tina")

	kl := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, args, &out)
		return out.String(), err
	}
	ok := func(t *testing.T, args ...string) string {
		t.Helper()
		out, err := kl(args...)
		if err != nil {
			t.Fatalf("kubectl latchkey %v: %v\n%s", args, err, out)
		}
		return out
	}
	refused := func(t *testing.T, want string, args ...string) {
		t.Helper()
		out, err := kl(args...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("kubectl latchkey %v: want an error with %q, got %v\n%s", args, want, err, out)
		}
		if strings.Contains(out, "bob") {
			t.Fatalf("kubectl latchkey %v printed team-b's data:\n%s", args, out)
		}
	}

	t.Run("--context picks the kubeconfig's user", func(t *testing.T) {
		refused(t, "forbidden", "--kubeconfig", both, "connections", "-n", "team-b")
		out := ok(t, "--kubeconfig", both, "--context", "ada", "connections", "-n", "team-b")
		if !strings.Contains(out, "bob-gh") {
			t.Fatalf("ada's context: no bob-gh in\n%s", out)
		}
	})

	t.Run("--as acts with the impersonated user's rights, and only where impersonating is allowed", func(t *testing.T) {
		// The tenant admin of team-a tries to become the cluster admin, or a member of
		// system:masters, to read team-b's connections and end bob's access.
		for _, args := range [][]string{
			{"--kubeconfig", tina, "--as", "ada", "connections", "-n", "team-b"},
			{"--kubeconfig", tina, "--as", "tina", "--as-group", "system:masters", "connections", "-n", "team-b"},
			{"--kubeconfig", tina, "--as", "ada", "revoke", "person", "bob@example.com", "-n", "team-b"},
		} {
			refused(t, "cannot impersonate", args...)
		}
		// Someone who may impersonate, acting as tina, has tina's rights: team-a, not team-b.
		refused(t, `User "tina" cannot list resource "connections"`, "--kubeconfig", root, "--as", "tina", "connections", "-n", "team-b")
		refused(t, "forbidden", "--kubeconfig", root, "--as", "tina", "revoke", "connection", "conn-bob", "-n", "team-b")
		out := ok(t, "--kubeconfig", root, "--as", "tina", "connections", "-n", "team-a")
		if !strings.Contains(out, "alice-gh") {
			t.Fatalf("root as tina in team-a: no alice-gh in\n%s", out)
		}
		if tok, _ := e.Store.GetToken(ctx, []byte("rt-bob")); !tok.Active(time.Now()) {
			t.Fatal("bob's token was revoked by a refused command")
		}
		if c, err := e.Store.GetConnection(ctx, "team-b/demo", "conn-bob"); err != nil || c.ID != "conn-bob" {
			t.Fatalf("bob's connection after refused commands: %v", err)
		}
	})

	t.Run("--token authenticates a service account with its own RBAC", func(t *testing.T) {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "helpdesk", Namespace: "team-a"}}
		must(t, e.Admin.Create(ctx, sa))
		must(t, e.Admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "helpdesk", Namespace: "team-a"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "latchkey-access-tenant"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "helpdesk", Namespace: "team-a"}}}))
		tr := &authenticationv1.TokenRequest{}
		must(t, e.Admin.SubResource("token").Create(ctx, sa, tr))
		if tr.Status.Token == "" {
			t.Fatal("no token")
		}
		noUser := kubeconfigWithoutCredentials(t, tina)
		refused(t, `User "system:anonymous" cannot list`, "--kubeconfig", noUser, "connections", "-n", "team-a")
		out := ok(t, "--kubeconfig", noUser, "--token", tr.Status.Token, "connections", "-n", "team-a")
		if !strings.Contains(out, "alice-gh") {
			t.Fatalf("--token: no alice-gh in\n%s", out)
		}
		refused(t, "forbidden", "--kubeconfig", noUser, "--token", tr.Status.Token, "connections", "-n", "team-b")
	})

	t.Run("-l narrows by label", func(t *testing.T) {
		ada := []string{"--kubeconfig", both, "--context", "ada"}
		out := ok(t, append(ada, "connections", "-A", "-l", "latchkey.dev/person=alice")...)
		if !strings.Contains(out, "alice-gh") || strings.Contains(out, "bob-gh") {
			t.Fatalf("-l latchkey.dev/person=alice:\n%s", out)
		}
		out = ok(t, append(ada, "people", "-A", "-l", "latchkey.dev/project=other")...)
		if !strings.Contains(out, "No people found") {
			t.Fatalf("-l of another Project:\n%s", out)
		}
		if _, err := kl(append(ada, "people", "-A", "-l", "a b c")...); err == nil || !strings.Contains(err.Error(), "labelSelector") {
			t.Fatalf("a malformed -l: %v", err)
		}
	})

	t.Run("-o jsonpath and go-template print from the List", func(t *testing.T) {
		ada := []string{"--kubeconfig", both, "--context", "ada"}
		if out := ok(t, append(ada, "connections", "-A", "-o", "jsonpath={.items[*].account}")...); out != "alice-gh bob-gh" {
			t.Fatalf("-o jsonpath: %q", out)
		}
		if out := ok(t, append(ada, "people", "-n", "team-b", "-o", `go-template={{range .items}}{{.email}}{{"\n"}}{{end}}`)...); out != "bob@example.com\n" {
			t.Fatalf("-o go-template: %q", out)
		}
		if _, err := kl(append(ada, "people", "-o", "bogus")...); err == nil || !strings.Contains(err.Error(), "jsonpath") {
			t.Fatalf("-o bogus: %v", err)
		}
	})

	t.Run("completion offers only what the user may list", func(t *testing.T) {
		out := ok(t, "__complete", "--kubeconfig", tina, "-n", "team-a", "revoke", "connection", "")
		if !strings.Contains(out, "conn-alice\n") || !strings.HasSuffix(strings.TrimSpace(out), ":4") {
			t.Fatalf("completing a connection in team-a:\n%s", out)
		}
		out = ok(t, "__complete", "--kubeconfig", tina, "-n", "team-b", "revoke", "connection", "")
		if strings.Contains(out, "conn-bob") {
			t.Fatalf("tina was offered team-b's connection:\n%s", out)
		}
		out = ok(t, "__complete", "--kubeconfig", tina, "-n", "team-a", "connections", "--person", "")
		if !strings.Contains(out, "alice@example.com\n") || strings.Contains(out, "bob") {
			t.Fatalf("completing --person:\n%s", out)
		}
		out = ok(t, "__complete", "--kubeconfig", tina, "-n", "team-a", "revoke", "grant", "alice@example.com", "")
		if !strings.Contains(out, "lkc_repohelper\n") {
			t.Fatalf("completing a grant's client:\n%s", out)
		}
		out = ok(t, "__complete", "--kubeconfig", both, "--context", "")
		if !strings.Contains(out, "ada\n") || !strings.Contains(out, "tina\n") {
			t.Fatalf("completing --context:\n%s", out)
		}
		out = ok(t, "__complete", "rev")
		if !strings.Contains(out, "revoke\t") {
			t.Fatalf("completing a command:\n%s", out)
		}
		for shell, want := range map[string]string{"bash": "__start_kubectl-latchkey", "zsh": "#compdef kubectl-latchkey", "fish": "complete -c kubectl-latchkey"} {
			if out := ok(t, "completion", shell); !strings.Contains(out, want) {
				t.Fatalf("completion %s: no %q in\n%.400s", shell, want, out)
			}
		}
	})
}

// mergedKubeconfig writes one kubeconfig holding a context per user, each named after it.
func mergedKubeconfig(t *testing.T, files map[string]string, current string) string {
	t.Helper()
	merged := clientcmdapi.NewConfig()
	for name, path := range files {
		cfg, err := clientcmd.LoadFromFile(path)
		must(t, err)
		cur := cfg.Contexts[cfg.CurrentContext]
		merged.Clusters[name] = cfg.Clusters[cur.Cluster]
		merged.AuthInfos[name] = cfg.AuthInfos[cur.AuthInfo]
		merged.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	}
	merged.CurrentContext = current
	path := t.TempDir() + "/merged.kubeconfig"
	must(t, clientcmd.WriteToFile(*merged, path))
	return path
}

// kubeconfigWithoutCredentials writes a copy of a kubeconfig whose user has no credentials.
func kubeconfigWithoutCredentials(t *testing.T, path string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(path)
	must(t, err)
	for name := range cfg.AuthInfos {
		cfg.AuthInfos[name] = clientcmdapi.NewAuthInfo()
	}
	out := t.TempDir() + "/anonymous.kubeconfig"
	must(t, clientcmd.WriteToFile(*cfg, out))
	return out
}

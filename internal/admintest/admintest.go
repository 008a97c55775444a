// Package admintest runs the admin API the way a cluster does, for end-to-end tests: a real
// kube-apiserver (envtest) configured for API aggregation with test-made certificates, an
// APIService for admin.latchkey.dev/v1alpha1 whose Service (type ExternalName, "localhost")
// leads the aggregator to the admin server on a loopback port, the RBAC roles the chart ships,
// and users with different rights. Nothing leaves loopback.
package admintest

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/devcerts"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
	"latchkey.dev/latchkey/internal/testenv"
	"latchkey.dev/latchkey/webhook/admin"
)

// Env is a control plane aggregating a running admin server.
type Env struct {
	Env    *envtest.Environment
	Store  *sqlstore.Store
	Config *config.Holder
	Admin  client.Client // system:masters
	// Users by name: "ada" may do everything in every namespace (ClusterRole latchkey-access-admin),
	// "tina" everything in team-a only (ClusterRole latchkey-access-tenant bound by a RoleBinding
	// in team-a), "nora" nothing.
	Users map[string]*envtest.AuthenticatedUser
	// AdminURL is the admin server's own address (for tests that bypass the kube-apiserver).
	AdminURL string
}

// UserConfig returns a rest.Config for one of the Users.
func (e *Env) UserConfig(name string) *rest.Config { return e.Users[name].Config() }

// Start starts everything and stops it when t ends. projects are the compiled Projects the
// admin server knows; now is its clock (nil: time.Now).
func Start(t *testing.T, projects []*config.Project, now func() time.Time) *Env {
	t.Helper()
	testenv.SkipShort(t, "a kube-apiserver (envtest)")
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run `make test`, or export KUBEBUILDER_ASSETS=$(hack/control-plane.sh)")
	}
	dir := t.TempDir()
	agg, err := devcerts.NewAggregation(dir)
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{}
	agg.Configure(env)
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	e := &Env{Env: env, Users: map[string]*envtest.AuthenticatedUser{}}
	if e.Admin, err = client.New(cfg, client.Options{}); err != nil {
		t.Fatal(err)
	}

	if e.Store, err = sqlstore.Open(t.Context(), "sqlite:"+filepath.Join(dir, "latchkey.db")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Store.Close() })
	snap := &config.Snapshot{Projects: map[string]*config.Project{}}
	for _, p := range projects {
		snap.Projects[p.Key] = p
	}
	e.Config = &config.Holder{}
	e.Config.Store(snap)
	srv, err := admin.New(admin.Options{Config: e.Config, Store: e.Store, Proxy: admin.FrontProxy{ClientCA: agg.ProxyCA.Pool(), AllowedNames: []string{devcerts.ProxyName}}, Logger: logr.Discard(), Now: now,
		// Watches read the store this often: a test waits little for an event.
		WatchPoll: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := agg.Serving.TLS()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv, TLSConfig: srv.TLSConfig(func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil }),
		ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(tls.NewListener(ln, hs.TLSConfig)) }()
	t.Cleanup(func() { _ = hs.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	e.AdminURL = fmt.Sprintf("https://127.0.0.1:%d", port)

	ctx := t.Context()
	for _, ns := range []string{"team-a", "team-b"} {
		if err := e.Admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range devcerts.Roles {
		r := devcerts.Roles[i]
		if err := e.Admin.Create(ctx, &r); err != nil {
			t.Fatal(err)
		}
	}
	bindings := []client.Object{
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "ada-latchkey-access-admin"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "latchkey-access-admin"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "ada"}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tina-latchkey-access-tenant", Namespace: "team-a"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "latchkey-access-tenant"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "tina"}}},
	}
	for _, b := range bindings {
		if err := e.Admin.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"ada", "tina", "nora"} {
		u, err := env.AddUser(envtest.User{Name: name}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		e.Users[name] = u
	}
	if err := agg.Register(ctx, e.Admin, port); err != nil {
		t.Fatal(err)
	}
	if err := devcerts.Served(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	return e
}

// Kubeconfig writes a kubeconfig for user into a file and returns its path.
func (e *Env) Kubeconfig(t *testing.T, user string) string {
	t.Helper()
	b, err := e.Users[user].KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), user+".kubeconfig")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

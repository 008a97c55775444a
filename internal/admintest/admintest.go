// Package admintest runs the admin API the way a cluster does, for end-to-end tests: a real
// kube-apiserver (envtest) configured for API aggregation with test-made certificates, an
// APIService for admin.latchkey.dev/v1alpha1 whose Service (type ExternalName, "localhost")
// leads the aggregator to the admin server on a loopback port, the RBAC roles the chart ships,
// and users with different rights. Nothing leaves loopback.
package admintest

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	adminv1 "latchkey.dev/latchkey/api/admin/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/devcerts"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
	"latchkey.dev/latchkey/internal/testenv"
	"latchkey.dev/latchkey/webhook/admin"
)

// The Service the APIService names; the aggregator checks the serving certificate against
// <name>.<namespace>.svc.
const (
	ServiceNamespace = "latchkey-system"
	ServiceName      = "latchkey-admin"
	// ProxyName is the front-proxy client certificate's common name.
	ProxyName = "front-proxy-client"
)

// Aggregation is what a kube-apiserver needs to aggregate the admin API, and what the admin
// server needs to recognise it: files under Dir.
type Aggregation struct {
	Dir                    string
	ProxyCA                *devcerts.CA
	ServingCA              *devcerts.CA
	Serving                devcerts.Leaf
	ProxyCert, ProxyKey    string
	ProxyCAFile            string
	ServingCert, ServingKy string
}

// NewAggregation makes the certificates in dir.
func NewAggregation(dir string) (*Aggregation, error) {
	a := &Aggregation{Dir: dir}
	var err error
	if a.ProxyCA, err = devcerts.NewCA("latchkey-front-proxy-ca"); err != nil {
		return nil, err
	}
	if a.ServingCA, err = devcerts.NewCA("latchkey-admin-serving-ca"); err != nil {
		return nil, err
	}
	proxy, err := a.ProxyCA.Client(ProxyName)
	if err != nil {
		return nil, err
	}
	if a.ProxyCert, a.ProxyKey, err = proxy.Write(dir, "front-proxy-client"); err != nil {
		return nil, err
	}
	a.ProxyCAFile = filepath.Join(dir, "front-proxy-ca.crt")
	if err := os.WriteFile(a.ProxyCAFile, a.ProxyCA.PEM, 0o600); err != nil {
		return nil, err
	}
	if a.Serving, err = a.ServingCA.Server(ServiceName+"."+ServiceNamespace+".svc", "localhost", "127.0.0.1"); err != nil {
		return nil, err
	}
	if a.ServingCert, a.ServingKy, err = a.Serving.Write(dir, "admin-serving"); err != nil {
		return nil, err
	}
	return a, nil
}

// Configure sets the kube-apiserver's aggregation flags.
func (a *Aggregation) Configure(env *envtest.Environment) {
	args := env.ControlPlane.GetAPIServer().Configure()
	args.Set("requestheader-client-ca-file", a.ProxyCAFile)
	args.Set("requestheader-allowed-names", ProxyName)
	args.Set("requestheader-username-headers", "X-Remote-User")
	args.Set("requestheader-group-headers", "X-Remote-Group")
	args.Set("requestheader-extra-headers-prefix", "X-Remote-Extra-")
	args.Set("proxy-client-cert-file", a.ProxyCert)
	args.Set("proxy-client-key-file", a.ProxyKey)
}

// FrontProxy is what the admin server is told about the aggregator.
func (a *Aggregation) FrontProxy() admin.FrontProxy {
	return admin.FrontProxy{ClientCA: a.ProxyCA.Pool(), AllowedNames: []string{ProxyName}}
}

// Register creates the Service and APIService that send admin.latchkey.dev/v1alpha1 to port on
// loopback, and waits until the aggregator reports the APIService Available.
func (a *Aggregation) Register(ctx context.Context, cl client.Client, port int) error {
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ServiceNamespace}},
		// ExternalName: the aggregator dials https://<externalName>:<port> without looking for
		// endpoints, so a loopback listener can stand behind it.
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: ServiceName, Namespace: ServiceNamespace},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost",
				Ports: []corev1.ServicePort{{Name: "https", Port: int32(port)}}}, //nolint:gosec // a port number
		},
	} {
		if err := cl.Create(ctx, obj); err != nil {
			return err
		}
	}
	svc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": adminv1.Version + "." + adminv1.Group},
		"spec": map[string]any{
			"group": adminv1.Group, "version": adminv1.Version,
			"groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			"caBundle": a.ServingCA.PEM,
			"service":  map[string]any{"namespace": ServiceNamespace, "name": ServiceName, "port": int64(port)},
		},
	}}
	if err := cl.Create(ctx, svc); err != nil {
		return err
	}
	deadline := time.Now().Add(90 * time.Second)
	last := "no status yet"
	for time.Now().Before(deadline) {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(svc), svc); err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(svc.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Available" {
				if m["status"] == "True" {
					return nil
				}
				last = fmt.Sprintf("%v: %v", m["reason"], m["message"])
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("the APIService did not become Available: %s", last)
}

// Env is a control plane aggregating a running admin server.
type Env struct {
	Env    *envtest.Environment
	Store  *sqlstore.Store
	Config *config.Holder
	Admin  client.Client // system:masters
	// Users by name: "ada" may do everything in every namespace (ClusterRole latchkey-admin),
	// "tina" everything in team-a only (ClusterRole latchkey-tenant-admin bound by a RoleBinding
	// in team-a), "nora" nothing.
	Users map[string]*envtest.AuthenticatedUser
	// AdminURL is the admin server's own address (for tests that bypass the kube-apiserver).
	AdminURL string
}

// Config returns a rest.Config for one of the Users.
func (e *Env) UserConfig(name string) *rest.Config { return e.Users[name].Config() }

// Roles are the RBAC roles the chart ships (charts/latchkey/templates/userroles.yaml), as the
// tests and docs/admin.md use them.
var Roles = []rbacv1.ClusterRole{
	{
		ObjectMeta: metav1.ObjectMeta{Name: "latchkey-admin"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{adminv1.Group}, Resources: []string{"*"},
			Verbs: []string{"get", "list", "delete"}}},
	},
	{
		ObjectMeta: metav1.ObjectMeta{Name: "latchkey-tenant-admin"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{adminv1.Group}, Resources: []string{"*"},
			Verbs: []string{"get", "list", "delete"}}},
	},
}

// Start starts everything and stops it when t ends. projects are the compiled Projects the
// admin server knows; now is its clock (nil: time.Now).
func Start(t *testing.T, projects []*config.Project, now func() time.Time) *Env {
	t.Helper()
	testenv.SkipShort(t, "a kube-apiserver (envtest)")
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run `make test`, or export KUBEBUILDER_ASSETS=$(hack/control-plane.sh)")
	}
	dir := t.TempDir()
	agg, err := NewAggregation(dir)
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
	srv, err := admin.New(admin.Options{Config: e.Config, Store: e.Store, Proxy: agg.FrontProxy(), Logger: logr.Discard(), Now: now})
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
	for i := range Roles {
		r := Roles[i]
		if err := e.Admin.Create(ctx, &r); err != nil {
			t.Fatal(err)
		}
	}
	bindings := []client.Object{
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "ada-latchkey-admin"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "latchkey-admin"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "ada"}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tina-latchkey-tenant-admin", Namespace: "team-a"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "latchkey-tenant-admin"},
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
	if err := Served(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	return e
}

// Served waits until the kube-apiserver proxies the admin API: its handler for the group is
// installed a moment after the APIService turns Available.
func Served(ctx context.Context, cfg *rest.Config) error {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	url := strings.TrimSuffix(cfg.Host, "/") + "/apis/" + adminv1.GroupVersion
	last := ""
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not answer 200 within a minute (last: %s)", url, last)
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

package devcerts

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	adminv1 "latchkey.dev/latchkey/api/admin/v1alpha1"
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
	ProxyCA                *CA
	ServingCA              *CA
	Serving                Leaf
	ProxyCert, ProxyKey    string
	ProxyCAFile            string
	ServingCert, ServingKy string
}

// NewAggregation makes the certificates in dir.
func NewAggregation(dir string) (*Aggregation, error) {
	a := &Aggregation{Dir: dir}
	var err error
	if a.ProxyCA, err = NewCA("latchkey-front-proxy-ca"); err != nil {
		return nil, err
	}
	if a.ServingCA, err = NewCA("latchkey-admin-serving-ca"); err != nil {
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

// sharedRule: creating a shared connection answers a start URL (docs/shared-connections.md).
var sharedRule = rbacv1.PolicyRule{APIGroups: []string{adminv1.Group}, Resources: []string{adminv1.ResourceSharedConnections},
	Verbs: []string{"get", "list", "watch", "create", "delete"}}

// Roles are the admin API's RBAC roles as the chart ships them
// (charts/latchkey/templates/userroles.yaml, named there after the release): latchkey-access-admin for
// a ClusterRoleBinding, latchkey-access-tenant for a RoleBinding in a tenant's namespace. `make
// run` and the tests create them; docs/admin.md shows them.
var Roles = []rbacv1.ClusterRole{
	{
		ObjectMeta: metav1.ObjectMeta{Name: "latchkey-access-admin"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{adminv1.Group}, Resources: []string{"*"},
			Verbs: []string{"get", "list", "watch", "delete"}}, sharedRule},
	},
	{
		ObjectMeta: metav1.ObjectMeta{Name: "latchkey-access-tenant"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{adminv1.Group}, Resources: []string{"*"},
			Verbs: []string{"get", "list", "watch", "delete"}}, sharedRule},
	},
}

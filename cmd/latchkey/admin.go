//go:build !latchkey_local

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	adminv1 "latchkey.dev/latchkey/api/admin/v1alpha1"
	"latchkey.dev/latchkey/internal/admincert"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/webhook/admin"
)

// The kube-apiserver publishes its front-proxy (requestheader) settings here for aggregated
// API servers to read.
const (
	authConfigMapNamespace = "kube-system"
	authConfigMapName      = "extension-apiserver-authentication"
)

// errNoFrontProxy: the cluster publishes no front-proxy CA, so nothing could call the admin
// API; the server runs without it.
var errNoFrontProxy = errors.New("the kube-apiserver publishes no front-proxy CA")

// frontProxy returns how to recognise the kube-apiserver's aggregator: from the flags when
// --admin-requestheader-client-ca-file is set, else from the ConfigMap the kube-apiserver
// publishes, through cl. It is read at start and again every minute (frontProxyReloader), so
// a rotated front-proxy CA takes effect without a restart; the HTTP handlers never call the
// Kubernetes API.
func frontProxy(ctx context.Context, o adminOptions, cl client.Reader) (admin.FrontProxy, error) {
	if o.clientCAFile != "" {
		pemBytes, err := os.ReadFile(o.clientCAFile)
		if err != nil {
			return admin.FrontProxy{}, fmt.Errorf("--admin-requestheader-client-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemBytes) {
			return admin.FrontProxy{}, errors.New("--admin-requestheader-client-ca-file: no PEM certificate in it")
		}
		return admin.FrontProxy{ClientCA: pool, AllowedNames: splitList(o.allowedNames)}, nil
	}
	var cm corev1.ConfigMap
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := cl.Get(ctx, client.ObjectKey{Namespace: authConfigMapNamespace, Name: authConfigMapName}, &cm)
	if apierrors.IsNotFound(err) {
		return admin.FrontProxy{}, fmt.Errorf("%w: no %s/%s", errNoFrontProxy, authConfigMapNamespace, authConfigMapName)
	}
	if err != nil {
		return admin.FrontProxy{}, fmt.Errorf("admin API: reading %s/%s (the kube-apiserver's front-proxy CA; the service account needs the extension-apiserver-authentication-reader Role, or set --admin-requestheader-client-ca-file): %w",
			authConfigMapNamespace, authConfigMapName, err)
	}
	return parseFrontProxy(cm.Data, o.allowedNames)
}

// parseFrontProxy reads the ConfigMap's requestheader-* keys; allowedNames, when set,
// replaces the ConfigMap's allowed names.
func parseFrontProxy(data map[string]string, allowedNames string) (admin.FrontProxy, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(data["requestheader-client-ca-file"])) {
		return admin.FrontProxy{}, fmt.Errorf("%w: %s/%s has no requestheader-client-ca-file: the kube-apiserver is not configured for API aggregation (--requestheader-client-ca-file)",
			errNoFrontProxy, authConfigMapNamespace, authConfigMapName)
	}
	fp := admin.FrontProxy{ClientCA: pool}
	for key, dst := range map[string]*[]string{
		"requestheader-allowed-names":    &fp.AllowedNames,
		"requestheader-username-headers": &fp.UsernameHeaders,
		"requestheader-group-headers":    &fp.GroupHeaders,
	} {
		if v := data[key]; v != "" {
			if err := json.Unmarshal([]byte(v), dst); err != nil {
				return admin.FrontProxy{}, fmt.Errorf("admin API: %s/%s %s: %w", authConfigMapNamespace, authConfigMapName, key, err)
			}
		}
	}
	if allowedNames != "" {
		fp.AllowedNames = splitList(allowedNames)
	}
	return fp, nil
}

func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// adminServer builds the admin API's TLS listener and server, serving with cert.
func adminServer(o adminOptions, srv *admin.Server, cert func(*tls.ClientHelloInfo) (*tls.Certificate, error), log logr.Logger) (net.Listener, *http.Server, error) {
	cfg := srv.TLSConfig(cert)
	ln, err := net.Listen("tcp", o.bind)
	if err != nil {
		return nil, nil, fmt.Errorf("admin API: %w", err)
	}
	hs := newHTTPServer(srv, log)
	hs.TLSConfig = cfg
	return tls.NewListener(ln, cfg), hs, nil
}

// servingCert returns the admin API's certificate: from the files given, or, with
// --admin-tls-secret, from the Secret the operator keeps (docs/decisions/0044): a Loader on
// every replica serves what the Secret holds, and a Keeper on the elected replica creates it,
// renews it and writes its CA bundle into the APIService.
func servingCert(mgr manager.Manager, o adminOptions, log logr.Logger) (func(*tls.ClientHelloInfo) (*tls.Certificate, error), error) {
	if o.tlsSecret == "" {
		if o.certFile == "" || o.keyFile == "" {
			return nil, errors.New("--admin-bind-address needs --admin-tls-secret, or --admin-tls-cert-file and --admin-tls-key-file (the certificate the APIService's caBundle verifies)")
		}
		cert, err := tls.LoadX509KeyPair(o.certFile, o.keyFile)
		if err != nil {
			return nil, fmt.Errorf("admin API serving certificate: %w", err)
		}
		return func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil }, nil
	}
	if o.certFile != "" || o.keyFile != "" {
		return nil, errors.New("--admin-tls-secret excludes --admin-tls-cert-file and --admin-tls-key-file")
	}
	ns, name, ok := strings.Cut(o.tlsSecret, "/")
	if !ok || ns == "" || name == "" {
		return nil, fmt.Errorf("--admin-tls-secret %q: want namespace/name", o.tlsSecret)
	}
	if o.service == "" {
		return nil, errors.New("--admin-tls-secret needs --admin-service, the Service the certificate is for")
	}
	// Read and written straight through the API server: the installation's namespace need not
	// be one the cache watches.
	c, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return nil, err
	}
	key := types.NamespacedName{Namespace: ns, Name: name}
	loader := &admincert.Loader{Reader: mgr.GetAPIReader(), Secret: key, Log: log.WithName("admin-cert")}
	keeper := &admincert.Keeper{
		Client: c, Secret: key, DNSNames: admincert.DNSNames(o.service, ns),
		APIService: adminv1.Version + "." + adminv1.Group, Now: time.Now, Log: log.WithName("admin-cert"),
	}
	if err := mgr.Add(loader); err != nil {
		return nil, err
	}
	if err := mgr.Add(keeper); err != nil {
		return nil, err
	}
	return loader.GetCertificate, nil
}

// addAdminServer starts the admin API's listener with the manager (on every replica). A
// cluster without aggregation gets everything but the admin API, and its APIService reports
// itself unavailable.
func addAdminServer(ctx context.Context, h host, o options, holder *config.Holder,
	st *sqlstore.Store, kr *secret.Keyring, events func(context.Context, store.AuditRecord), log logr.Logger) error {
	mgr, err := managerOf(h)
	if err != nil {
		return err
	}
	cl, err := client.New(mgr.GetConfig(), client.Options{})
	if err != nil {
		return err
	}
	fp, err := frontProxy(ctx, o.admin, cl)
	if errors.Is(err, errNoFrontProxy) {
		log.Error(err, "the admin API is off; OAuth and the pages are served as usual")
		return nil
	}
	if err != nil {
		return err
	}
	asrv, err := admin.New(admin.Options{
		Config: holder, Store: st, Proxy: fp, Logger: log.WithName("admin"), Now: time.Now, Events: events,
		Revoker: &upstream.Vault{Store: st, Keyring: kr, Now: time.Now, Timeout: o.upstreamWait},
	})
	if err != nil {
		return err
	}
	if err := mgr.Add(newFrontProxyReloader(o.admin, cl, asrv, fp, log)); err != nil {
		return err
	}
	cert, err := servingCert(mgr, o.admin, log)
	if err != nil {
		return err
	}
	ln, hs, err := adminServer(o.admin, asrv, cert, log)
	if err != nil {
		return err
	}
	log.Info("admin API", "listen", ln.Addr().String(), "frontProxyNames", fp.AllowedNames)
	return h.Add(serverRunnable("admin", ln, hs, o.shutdownGrace))
}

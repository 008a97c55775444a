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
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/webhook/admin"
)

// adminOptions are the admin API's flags (docs/admin.md).
type adminOptions struct {
	bind         string
	certFile     string
	keyFile      string
	clientCAFile string
	allowedNames string
}

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
// publishes, read once at start (the HTTP handlers never call the Kubernetes API).
func frontProxy(ctx context.Context, o adminOptions, cfg *rest.Config) (admin.FrontProxy, error) {
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
	cl, err := client.New(cfg, client.Options{})
	if err != nil {
		return admin.FrontProxy{}, err
	}
	var cm corev1.ConfigMap
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = cl.Get(ctx, client.ObjectKey{Namespace: authConfigMapNamespace, Name: authConfigMapName}, &cm)
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

// adminServer builds the admin API's TLS listener and server.
func adminServer(o adminOptions, srv *admin.Server, log logr.Logger) (net.Listener, *http.Server, error) {
	if o.certFile == "" || o.keyFile == "" {
		return nil, nil, errors.New("--admin-bind-address needs --admin-tls-cert-file and --admin-tls-key-file (the certificate the APIService's caBundle verifies)")
	}
	cert, err := tls.LoadX509KeyPair(o.certFile, o.keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("admin API serving certificate: %w", err)
	}
	cfg := srv.TLSConfig(func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil })
	ln, err := net.Listen("tcp", o.bind)
	if err != nil {
		return nil, nil, fmt.Errorf("admin API: %w", err)
	}
	hs := newHTTPServer(srv, log)
	hs.TLSConfig = cfg
	return tls.NewListener(ln, cfg), hs, nil
}

// addAdminServer starts the admin API's listener with the manager (on every replica). A
// cluster without aggregation gets everything but the admin API, and its APIService reports
// itself unavailable.
func addAdminServer(ctx context.Context, mgr manager.Manager, o options, cfg *rest.Config, holder *config.Holder,
	st *sqlstore.Store, kr *secret.Keyring, events func(context.Context, store.AuditRecord), log logr.Logger) error {
	fp, err := frontProxy(ctx, o.admin, cfg)
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
	ln, hs, err := adminServer(o.admin, asrv, log)
	if err != nil {
		return err
	}
	log.Info("admin API", "listen", ln.Addr().String(), "frontProxyNames", fp.AllowedNames)
	return mgr.Add(serverRunnable("admin", ln, hs, o.shutdownGrace))
}

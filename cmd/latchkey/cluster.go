//go:build !latchkey_local

package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	latchkeyv1alpha1 "latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/controllers"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/keys"
	"latchkey.dev/latchkey/internal/keys/keysecret"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/workload"
	"latchkey.dev/latchkey/internal/workload/tokenreview"
)

// This file is the cluster mode's wiring: the controller manager, the reconcilers, the keys
// and serving certificate kept in Secrets, TokenReview and the admin API
// (admin.go, frontproxy.go). The build `make build-local` makes leaves it out, and with it
// client-go and controller-runtime's client and manager (cluster_local.go,
// docs/decisions/0085).

// clusterFlags: controller-runtime registers --kubeconfig on flag.CommandLine itself.
func clusterFlags(*flag.FlagSet) {}

// clusterHost is the controller manager as the host of the server's parts.
type clusterHost struct{ manager.Manager }

// Add runs r under the manager; an HTTP server goes with the manager's own servers, which
// start before and stop after everything else.
func (h clusterHost) Add(r runnable) error {
	if s, ok := r.(*serving); ok {
		return h.Manager.Add(&manager.Server{Name: s.name, Server: s.srv, Listener: s.ln, ShutdownTimeout: &s.grace})
	}
	return h.Manager.Add(r)
}

// managerOf returns the controller manager h is; every cluster-mode step runs on one.
func managerOf(h host) (manager.Manager, error) {
	ch, ok := h.(clusterHost)
	if !ok {
		return nil, errors.New("this needs a Kubernetes cluster")
	}
	return ch.Manager, nil
}

// clusterControllers registers the reconcilers and the compiler with the manager; the
// operator's keys, when it keeps them, make the compiler compile again.
func clusterControllers(h host, copts controllers.Options, kept *keptKeys) error {
	mgr, err := managerOf(h)
	if err != nil {
		return err
	}
	compiler, err := controllers.SetupWithCompiler(mgr, copts)
	if err != nil {
		return fmt.Errorf("controllers: %w", err)
	}
	if kept != nil {
		kept.changed(compiler.Kick)
	}
	return nil
}

// clusterSecurityEvents turns security events into aggregated Kubernetes Events on the
// Project, on the leader.
func clusterSecurityEvents(h host, st events.AuditReader) error {
	mgr, err := managerOf(h)
	if err != nil {
		return err
	}
	if err := controllers.SetupSecurityEvents(mgr, st); err != nil {
		return fmt.Errorf("controllers: %w", err)
	}
	return nil
}

// clusterTokenReviewer asks the cluster about workload_identity clients' ServiceAccount
// tokens (TokenReview).
func clusterTokenReviewer(h host, log logr.Logger) workload.Reviewer {
	mgr, err := managerOf(h)
	if err != nil {
		log.Error(err, "no TokenReview client: workload_identity clients with a ServiceAccount cannot authenticate")
		return nil
	}
	c, err := authnclient.NewForConfig(mgr.GetConfig())
	if err != nil {
		log.Error(err, "no TokenReview client: workload_identity clients with a ServiceAccount cannot authenticate")
		return nil
	}
	return &tokenreview.Reviewer{Client: c}
}

// keepKeys keeps the keys in the Secret key (--keys-secret): a keysecret.Loader on every
// replica reads it, and a keysecret.Keeper on the elected replica creates it when missing,
// rotates keys and re-seals stored values.
func keepKeys(h host, o options, key types.NamespacedName, st keys.ResealStore, holder *config.Holder, log logr.Logger) (*secret.Keyring, *keptKeys, error) {
	mgr, err := managerOf(h)
	if err != nil {
		return nil, nil, errors.New("--keys-secret needs a Kubernetes cluster; without one the keys come from --keys-dir, --keys-file or the data directory")
	}
	// The Secret is read and written straight through the API server: it lives in the
	// installation's namespace, which need not be one the cache watches.
	c, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return nil, nil, err
	}
	kr := &secret.Keyring{}
	signing := &keys.Signing{Retire: o.signingRetire}
	loader := keysecret.NewLoader()
	loader.Reader, loader.Secret, loader.Keyring, loader.Signing = mgr.GetAPIReader(), key, kr, signing
	loader.Now, loader.Log = time.Now, log.WithName("keys")
	keeper := &keysecret.Keeper{
		Client: c, Secret: key, Create: o.keysCreate,
		Announce: o.signingAnnounce, Retire: o.signingRetire, RotateEvery: o.signingRotate,
		LongestTokenLifetime: func() time.Duration { return longestTokenLifetime(holder.Load()) },
		Reseal:               &keysecret.Resealer{Store: st, Log: log.WithName("reseal")},
		Now:                  time.Now,
		Log:                  log.WithName("keys"),
	}
	if err := mgr.Add(loader); err != nil {
		return nil, nil, err
	}
	if err := mgr.Add(keeper); err != nil {
		return nil, nil, err
	}
	return kr, &keptKeys{
		signing:    signing,
		waitLoaded: loader.WaitLoaded,
		changed:    func(f func()) { loader.Changed = f },
	}, nil
}

// newManager connects to the Kubernetes API and makes the controller manager.
func newManager(o options, log logr.Logger) (host, error) {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(latchkeyv1alpha1.AddToScheme(scheme))

	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w", err)
	}
	cacheOpts := controllers.CacheOptions()
	watched, err := watchNamespaces(o.watchNS)
	if err != nil {
		return nil, err
	}
	if len(watched) > 0 {
		// Namespaced kinds (the four resources, Secrets) are listed and watched in these
		// namespaces only, so the service account needs no cluster-wide Secret access.
		// Namespaces themselves stay cluster-wide: Projects select them by label.
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range watched {
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
		log.Info("watching only some namespaces", "namespaces", watched)
	}
	grace := o.shutdownGrace + 5*time.Second
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme: scheme,
		Logger: log,
		Cache:  cacheOpts,
		// Metrics are served below from one handler that also carries Latchkey's own
		// collectors, so the manager's server stays off.
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              "latchkey.latchkey.dev",
		LeaderElectionNamespace:       o.leaderNS,
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       &grace,
	})
	if err != nil {
		return nil, fmt.Errorf("controller manager: %w", err)
	}

	return clusterHost{mgr}, nil
}

// metricsGatherer serves controller-runtime's registry (controllers, work queues, client-go,
// Go runtime, process) together with anything registered on Prometheus's default registry.
// Both registries carry Go and process collectors; the default registry's copies are dropped so
// each family appears once.
func metricsGatherer() prometheus.Gatherer {
	own := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := prometheus.DefaultGatherer.Gather()
		kept := mfs[:0]
		for _, mf := range mfs {
			if n := mf.GetName(); strings.HasPrefix(n, "go_") || strings.HasPrefix(n, "process_") {
				continue
			}
			kept = append(kept, mf)
		}
		return kept, err
	})
	return prometheus.Gatherers{ctrlmetrics.Registry, own}
}

//go:build latchkey_local

package main

import (
	"context"
	"errors"
	"flag"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"latchkey.dev/latchkey/controllers"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/keys"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
	"latchkey.dev/latchkey/internal/workload"
)

// The build `make build-local` makes serves `latchkey serve --config-dir` only. The cluster
// mode (cluster.go, admin.go, frontproxy.go) is left out, and with it the controller manager,
// controller-runtime's client and client-go, about half of what a cold build compiles
// (docs/decisions/0085). Started without --config-dir it stops at once and says which build
// has the cluster mode.

// errNoClusterMode is the cluster mode's refusal.
var errNoClusterMode = errors.New("this build of latchkey serves only `latchkey serve --config-dir` (it was built for `make run-local`); " +
	"build with `make build` to run against a Kubernetes cluster")

// clusterFlags registers --kubeconfig, which controller-runtime registers in the full build,
// so a command line written for that build parses here and is refused with a reason.
func clusterFlags(fs *flag.FlagSet) {
	fs.String("kubeconfig", "", "the Kubernetes client configuration: "+notInThisBuild)
}

// newManager refuses the cluster mode.
func newManager(options, logr.Logger) (host, error) { return nil, errNoClusterMode }

// The cluster mode's set-up steps; newManager has refused it before any of them runs.

func clusterControllers(host, controllers.Options, *keptKeys) error { return errNoClusterMode }

func clusterSecurityEvents(host, events.AuditReader) error { return errNoClusterMode }

func clusterTokenReviewer(host, logr.Logger) workload.Reviewer { return nil }

func addAdminServer(context.Context, host, options, *config.Holder, *sqlstore.Store, *secret.Keyring,
	func(context.Context, store.AuditRecord), logr.Logger) error {
	return errNoClusterMode
}

// keepKeys refuses --keys-secret, as the no-cluster mode of every build does.
func keepKeys(host, options, types.NamespacedName, keys.ResealStore, *config.Holder, logr.Logger) (*secret.Keyring, *keptKeys, error) {
	return nil, nil, errors.New("--keys-secret needs a Kubernetes cluster; without one the keys come from --keys-dir, --keys-file or the data directory")
}

// metricsGatherer serves Prometheus's default registry: without controller-runtime there is
// no other.
func metricsGatherer() prometheus.Gatherer { return prometheus.DefaultGatherer }

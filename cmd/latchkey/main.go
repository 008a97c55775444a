// Command latchkey runs the Latchkey operator: the controllers that compile Project,
// OAuthClient, RedirectPolicy and Connector resources into a runtime snapshot, and the HTTP
// server that serves every project's OAuth endpoints and pages from that snapshot.
//
// This file holds flags and wiring only; behaviour lives in the packages it wires.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager/signals"

	"latchkey.dev/latchkey/controllers"
	"latchkey.dev/latchkey/internal/clientaddr"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/keys"
	"latchkey.dev/latchkey/internal/metrics"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
	"latchkey.dev/latchkey/internal/tracing"
	"latchkey.dev/latchkey/internal/trust"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/internal/workload"
	"latchkey.dev/latchkey/webhook"
)

// defaultDatabase is the embedded single-replica store used by `make run`.
const defaultDatabase = "sqlite:.latchkey/latchkey.db"

// version is set at link time (-ldflags "-X main.version=…") by `make build`, `make image` and
// the Dockerfile, so a binary and an image say what they run (`latchkey --version`, or
// -version: the flag package accepts both); a plain `go build` reports "dev".
var version = "dev"

type options struct {
	publicURL     string
	listen        string
	metricsListen string
	database      string
	keysDir       string
	keysFile      string
	primaryKey    string
	// keysSecret ("namespace/name") is the Secret the operator keeps its keys in; see keys.go.
	keysSecret      string
	keysCreate      bool
	signingAnnounce time.Duration
	signingRetire   time.Duration
	signingRotate   time.Duration
	leaderElect     bool
	leaderNS        string
	watchNS         string
	gcInterval      time.Duration
	auditRetention  time.Duration
	shutdownGrace   time.Duration
	upstreamWait    time.Duration
	refresh         refreshOptions
	logLevel        string
	logFormat       string
	caBundle        string
	// otlpEndpoint turns tracing on (docs/operations.md, "Tracing and request ids").
	otlpEndpoint string
	// extAuthz serves Envoy external authorization (docs/token-proxy.md).
	extAuthz extAuthzOptions
	// trustedProxies and clientAddrHeader say where rate limits read the client's address.
	trustedProxies   string
	clientAddrHeader string
	// local: no-cluster mode (serve.go).
	local localOptions
	admin adminOptions
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "check-issuer" {
		os.Exit(checkIssuer(os.Args[2:], os.Stdout, os.Stderr))
	}
	exitIfBackup(os.Args[1:])
	var o options
	fs := flag.CommandLine // controller-runtime registers --kubeconfig here (clusterFlags without it)
	registerFlags(fs, &o)
	clusterFlags(fs)
	printVersion := fs.Bool("version", false, "print the version and exit")
	o.local.register(fs)
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "serve" {
		// `latchkey serve --config-dir DIR`: the no-cluster mode. The same flags apply.
		o.local.serve = true
		args = args[1:]
	}
	if err := fs.Parse(args); err != nil {
		os.Exit(2)
	}
	if *printVersion {
		fmt.Println("latchkey", version)
		return
	}
	if err := fromEnvironment(fs, &o); err != nil {
		fmt.Fprintln(os.Stderr, "latchkey:", err)
		os.Exit(2)
	}

	log, err := newLogger(o.logLevel, o.logFormat)
	if err != nil {
		fmt.Fprintln(os.Stderr, "latchkey:", err)
		os.Exit(2)
	}
	setLoggers(log)
	applyMemoryLimit(log)
	startDebugPprof(log)

	if err := run(signals.SetupSignalHandler(), o, log); err != nil {
		log.Error(err, "latchkey stopped")
		os.Exit(1)
	}
}

// registerFlags registers every flag of the operator on fs, into o.
func registerFlags(fs *flag.FlagSet, o *options) {
	fs.StringVar(&o.publicURL, "public-url", "http://127.0.0.1:8080",
		"URL people and agents reach this server at; every issuer is {public-url}/{namespace}/{project}")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "address the HTTP server listens on")
	fs.StringVar(&o.metricsListen, "metrics-listen", "127.0.0.1:9090",
		`address for Prometheus metrics at /metrics ("0" disables)`)
	fs.StringVar(&o.database, "database", defaultDatabase,
		"runtime state store: sqlite:/path/file.db (one replica) or postgres://… (production, many replicas); env LATCHKEY_DATABASE")
	fs.StringVar(&o.keysDir, "keys-dir", "",
		"directory of AES-256 sealing keys, one file per key named by its id (a mounted Secret)")
	fs.StringVar(&o.keysFile, "keys-file", "",
		`file of AES-256 sealing keys, one "id=key" per line (key as base64 or hex)`)
	fs.StringVar(&o.primaryKey, "primary-key", "",
		"id of the key new values are sealed with (default: the lexically greatest id)")
	fs.StringVar(&o.keysSecret, "keys-secret", "",
		`"namespace/name" of the Secret the operator keeps its sealing and signing keys in, created by the elected replica when missing (the chart sets it); excludes --keys-dir and --keys-file`)
	fs.BoolVar(&o.keysCreate, "keys-create", true,
		"create the --keys-secret Secret when it does not exist (false: wait for an admin to create it)")
	fs.DurationVar(&o.signingAnnounce, "signing-key-announce", keys.DefaultSigningAnnounce,
		"how long a new signing key is published at every jwks.json before it signs")
	fs.DurationVar(&o.signingRetire, "signing-key-retire", keys.DefaultSigningRetire,
		"how long a replaced signing key stays published (at least the longest access token lifetime of any Project)")
	fs.DurationVar(&o.signingRotate, "signing-key-rotate-every", keys.DefaultSigningRotateEvery,
		"how often a new signing key is made (0: only when asked with the latchkey.dev/rotate-signing annotation)")
	fs.BoolVar(&o.leaderElect, "leader-elect", false,
		"elect one replica to run the controllers (the HTTP server runs on every replica)")
	fs.StringVar(&o.leaderNS, "leader-election-namespace", "",
		"namespace of the leader election Lease (default: the pod's own namespace)")
	fs.StringVar(&o.watchNS, "watch-namespaces", "",
		"comma-separated namespaces whose Latchkey resources and Secrets this installation reads (default: every namespace); "+
			"the service account needs the controllers' permissions in each (the chart's watchNamespaces)")
	fs.DurationVar(&o.gcInterval, "gc-interval", 5*time.Minute,
		"how often expired sessions, codes, tokens and links are deleted (0 disables)")
	fs.DurationVar(&o.auditRetention, "audit-retention", 0,
		"how long audit records are kept: older ones the event relay has handed on are deleted at garbage collection (0 keeps every record; docs/audit.md)")
	fs.DurationVar(&o.shutdownGrace, "shutdown-grace", 20*time.Second,
		"how long in-flight requests may take to finish after a stop signal")
	fs.DurationVar(&o.upstreamWait, "upstream-timeout", upstream.DefaultTimeout,
		"how long a call to a connected service (a token refresh during token exchange) may take before the exchange answers temporarily_unavailable")
	o.refresh.register(fs)
	fs.StringVar(&o.trustedProxies, "trusted-proxies", "",
		"comma-separated CIDR prefixes or addresses of the proxies in front of this server (ingress controller, load balancer); "+
			"only from these peers is the client's address read from --client-address-header, for sign-in and registration rate limits (default: none, the peer is the client)")
	fs.StringVar(&o.clientAddrHeader, "client-address-header", "X-Forwarded-For",
		"the header the trusted proxies set to name the client: X-Forwarded-For or Forwarded (RFC 7239)")
	fs.StringVar(&o.caBundle, "ca-bundle", "",
		"PEM file of CA certificates trusted, in addition to the system's, by every outgoing HTTPS call: connected services, OpenID Connect providers, "+
			"client metadata documents, event sinks (not the Kubernetes API); env LATCHKEY_CA_BUNDLE")
	fs.StringVar(&o.admin.bind, "admin-bind-address", "",
		"address of the admin API (admin.latchkey.dev, served through the kube-apiserver as an aggregated API; docs/admin.md); empty: off")
	fs.StringVar(&o.admin.certFile, "admin-tls-cert-file", "", "the admin API's serving certificate (PEM)")
	fs.StringVar(&o.admin.keyFile, "admin-tls-key-file", "", "the admin API's serving key (PEM)")
	fs.StringVar(&o.admin.tlsSecret, "admin-tls-secret", "",
		"namespace/name of the Secret holding the admin API's serving certificate, which Latchkey creates, renews and writes into the APIService's caBundle (excludes --admin-tls-cert-file)")
	fs.StringVar(&o.admin.service, "admin-service", "",
		"name of the admin API's Service, in --admin-tls-secret's namespace: the certificate is for <service>.<namespace>.svc")
	fs.StringVar(&o.admin.clientCAFile, "admin-requestheader-client-ca-file", "",
		"CA of the kube-apiserver's front-proxy client certificate (its --requestheader-client-ca-file); default: read from kube-system/extension-apiserver-authentication at start")
	fs.StringVar(&o.admin.allowedNames, "admin-requestheader-allowed-names", "",
		"comma-separated common names the front-proxy certificate may carry (its --requestheader-allowed-names); default: the ConfigMap's, empty there allows any name the CA signed")
	fs.StringVar(&o.otlpEndpoint, "otlp-traces-endpoint", "",
		"OTLP/HTTP URL to send traces to, used as written (https://collector:4318/v1/traces); tracing is off unless this or "+
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT is set")
	o.extAuthz.flags(fs)
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "json", "json or text")
}

// fromEnvironment completes o after parsing: LATCHKEY_DATABASE and LATCHKEY_CA_BUNDLE where
// the flag was not given, then the no-cluster mode's own checks. The environment is read
// after parsing, not used as the flag's default, so that -h never prints a DSN with its
// password.
func fromEnvironment(fs *flag.FlagSet, o *options) error {
	if env := os.Getenv("LATCHKEY_DATABASE"); env != "" && !flagSet(fs, "database") {
		o.database = env
	}
	if env := os.Getenv("LATCHKEY_CA_BUNDLE"); env != "" && !flagSet(fs, "ca-bundle") {
		o.caBundle = env
	}
	return o.local.check(fs, o)
}

// run wires Latchkey in named steps, each a method of parts, in the order they depend on one
// another, and runs it until ctx ends.
func run(ctx context.Context, o options, log logr.Logger) error {
	p := &parts{o: o, log: log}
	traceOpts, err := p.checkOptions()
	if err != nil {
		return err
	}
	stopTracing, err := tracing.Install(ctx, traceOpts)
	if err != nil {
		return err
	}
	defer func() {
		// Spans still in the batch are sent, for as long as the shutdown grace allows.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.shutdownGrace)
		defer cancel()
		if err := stopTracing(sctx); err != nil {
			log.Error(err, "sending the last traces failed")
		}
	}()
	if err := p.openRuntime(ctx); err != nil {
		return err
	}
	defer p.store.Close()
	steps := []func(context.Context) error{
		p.setupKeysAndControllers, p.setupEvents, p.setupVault, p.addHTTPServer,
		p.addMetricsServer, p.addAdminAPI, p.addCollector,
	}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	log.Info("starting", "publicURL", p.publicURL, "listen", p.listening,
		"metrics", o.metricsListen, "database", redactDSN(o.database), "leaderElect", o.leaderElect,
		"configDir", o.local.configDir, "tracing", tracing.Configured(traceOpts))
	return p.mgr.Start(ctx)
}

// parts are what run's set-up steps make and share, each made by one step for the later ones.
type parts struct {
	o   options
	log logr.Logger

	publicURL      string
	trustedProxies []netip.Prefix
	mgr            host
	metrics        *metrics.Metrics
	store          *sqlstore.Store
	config         *config.Holder
	keyring        *secret.Keyring
	emitter        *events.Emitter
	vault          *upstream.Vault
	listening      string // the HTTP server's address, for the start-up line
}

// checkOptions checks what the flags say before anything starts: the public URL, the CA
// bundle and the trusted proxies. It returns the tracing options.
func (p *parts) checkOptions() (tracing.Options, error) {
	p.publicURL = strings.TrimSuffix(p.o.publicURL, "/")
	if err := checkPublicURL(p.publicURL); err != nil {
		return tracing.Options{}, err
	}
	if err := useCABundle(p.o.caBundle, p.log); err != nil {
		return tracing.Options{}, err
	}
	var err error
	if p.trustedProxies, err = clientaddr.ParsePrefixes(p.o.trustedProxies); err != nil {
		return tracing.Options{}, fmt.Errorf("--trusted-proxies: %w", err)
	}
	return tracing.Options{Endpoint: p.o.otlpEndpoint, Version: version, Logger: p.log.WithName("tracing")}, nil
}

// openRuntime makes the manager (or, without a cluster, a group of runnables), the metrics and
// the store.
func (p *parts) openRuntime(ctx context.Context) error {
	var err error
	if p.o.local.enabled() {
		p.mgr = &group{}
	} else if p.mgr, err = newManager(p.o, p.log); err != nil {
		return err
	}
	if p.metrics, err = metrics.New(prometheus.DefaultRegisterer); err != nil {
		return err
	}
	// The store times every operation itself, so store latency covers the controllers, the
	// event deliverer and the HTTP server alike.
	p.store, err = openStore(ctx, p.o.database, sqlstore.Observe(p.metrics.StoreOperation), sqlstore.AuditRetention(p.o.auditRetention))
	return err
}

// setupKeysAndControllers loads the keys (or starts keeping them in their Secret) and adds the
// controllers that compile the configuration snapshot.
func (p *parts) setupKeysAndControllers(context.Context) error {
	p.config = &config.Holder{}
	kr, kept, err := setupKeys(p.mgr, p.o, p.store, p.config, p.log)
	if err != nil {
		return err
	}
	p.keyring = kr
	copts := controllers.Options{
		PublicURL: p.publicURL,
		Config:    p.config,
		Store:     p.store,
		Clock:     time.Now,
	}
	return setupControllers(p.mgr, p.o, copts, kept, p.log) //nolint:contextcheck // set-up before the manager starts; no context to pass yet
}

// setupEvents: the emitter counts security events; the deliverer (every replica) relays every
// audit record, whoever wrote it, into the outbox for the project's sinks and sends them
// (leased claims); the leader turns security events into aggregated Kubernetes Events on the
// Project.
func (p *parts) setupEvents(context.Context) error {
	var err error
	p.emitter, err = events.NewEmitter(events.EmitterOptions{Store: p.store, Config: p.config, Logger: p.log.WithName("events")})
	if err != nil {
		return err
	}
	if err := p.mgr.Add(&events.Deliverer{Store: p.store, Config: p.config, Logger: p.log.WithName("sinks")}); err != nil {
		return err
	}
	if p.o.local.enabled() {
		// Kubernetes Events on the Project need a cluster; without one the records stay in the
		// store and reach the event sinks.
		return nil
	}
	return clusterSecurityEvents(p.mgr, p.store)
}

// setupVault makes the vault that hands out people's upstream tokens for token exchange, and
// the refresher (every replica) that renews those in use before they expire
// (docs/connection-health.md).
func (p *parts) setupVault(context.Context) error {
	p.vault = &upstream.Vault{
		Store: p.store, Keyring: p.keyring, Now: time.Now, Timeout: p.o.upstreamWait, OnRefresh: p.metrics.UpstreamRefresh,
		Record: auditRecorder(p.store, p.log.WithName("connections")), TrackUses: p.o.refresh.every > 0,
	}
	return setupRefresher(p.mgr, p.o.refresh, p.vault, p.store, p.config, p.log.WithName("refresher"))
}

// addHTTPServer builds the HTTP server (webhook) and listens on --listen.
func (p *parts) addHTTPServer(context.Context) error {
	handler, err := webhook.New(webhook.Options{
		Events:    p.emitter.Recorded,
		Config:    p.config,
		Store:     p.store,
		Keyring:   p.keyring,
		Logger:    p.log.WithName("http"),
		Now:       time.Now,
		PublicURL: p.publicURL,
		Metrics:   p.metrics,
		// Rate limits count clients by address; behind an ingress, the address it names.
		TrustedProxies:      p.trustedProxies,
		RateBuckets:         p.store.RateBuckets(),
		ClientAddressHeader: p.o.clientAddrHeader,
		Vault:               p.vault,
		Workloads:           p.workloadReviewer(),
		// Not ready until the first snapshot is published: before that every issuer would
		// answer 404, and a load balancer must not send people there.
		Ready: func(context.Context) error {
			if p.config.Load() == nil {
				return errors.New("no configuration compiled yet")
			}
			return nil
		},
	})
	if err != nil {
		return fmt.Errorf("http server: %w", err)
	}
	// Listening before the manager starts turns a busy port into an immediate, clear error.
	ln, err := net.Listen("tcp", p.o.listen)
	if err != nil {
		return fmt.Errorf("http server: %w", err)
	}
	p.listening = ln.Addr().String()
	if err := addExtAuthz(p.mgr, p.o.extAuthz, p.config, handler, p.metrics, p.log); err != nil {
		return err
	}
	if err := p.mgr.Add(tallyFlusher{server: handler}); err != nil {
		return err
	}
	return p.mgr.Add(serverRunnable("http", ln, newHTTPServer(handler, p.log), p.o.shutdownGrace))
}

// workloadReviewer asks the cluster about workload_identity clients' ServiceAccount tokens
// (TokenReview); without a cluster there is none, and such clients are refused with a message
// saying so (docs/no-cluster.md).
func (p *parts) workloadReviewer() workload.Reviewer {
	if p.o.local.enabled() {
		p.log.Info("no cluster: workload_identity clients with a ServiceAccount cannot authenticate")
		return nil
	}
	return clusterTokenReviewer(p.mgr, p.log)
}

// addMetricsServer serves Prometheus metrics on --metrics-listen, unless it is "0".
func (p *parts) addMetricsServer(context.Context) error {
	if p.o.metricsListen == "" || p.o.metricsListen == "0" {
		return nil
	}
	mln, err := net.Listen("tcp", p.o.metricsListen)
	if err != nil {
		return fmt.Errorf("metrics server: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(metricsGatherer(), promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
	}))
	return p.mgr.Add(serverRunnable("metrics", mln, &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}, p.o.shutdownGrace))
}

// addAdminAPI serves the admin API on --admin-bind-address, when set.
func (p *parts) addAdminAPI(ctx context.Context) error {
	if p.o.admin.bind == "" {
		return nil
	}
	if p.o.local.enabled() {
		return errors.New("--admin-bind-address needs a Kubernetes cluster: the admin API is served through its kube-apiserver")
	}
	return addAdminServer(ctx, p.mgr, p.o, p.config, p.store, p.keyring, p.emitter.Recorded, p.log)
}

// addCollector deletes expired rows every --gc-interval, unless it is 0.
func (p *parts) addCollector(context.Context) error {
	if p.o.gcInterval <= 0 {
		return nil
	}
	return p.mgr.Add(&collector{store: p.store, every: p.o.gcInterval, log: p.log.WithName("gc")})
}

// useCABundle adds the PEM file's CA certificates to the roots every outgoing HTTPS client
// trusts (--ca-bundle); an empty name changes nothing.
func useCABundle(file string, log logr.Logger) error {
	if file == "" {
		return nil
	}
	pool, err := trust.Load(file)
	if err != nil {
		return fmt.Errorf("--ca-bundle: %w", err)
	}
	trust.Use(pool)
	log.Info("trusting the CA bundle in addition to the system's roots", "file", file)
	return nil
}

// setupControllers runs the reconcilers and the compiler under the manager, or, without a
// cluster, the configuration directory's reader (serve.go); the operator's keys, when it keeps
// them, feed the compiler.
func setupControllers(mgr host, o options, copts controllers.Options, kept *keptKeys, log logr.Logger) error {
	if kept != nil {
		copts.SigningKeys, copts.WaitFor = kept.signing, kept.waitLoaded
	}
	if o.local.enabled() {
		return o.local.setup(mgr, copts, log)
	}
	return clusterControllers(mgr, copts, kept)
}

// adminOptions are the admin API's flags (docs/admin.md).
type adminOptions struct {
	bind         string
	certFile     string
	keyFile      string
	clientCAFile string
	allowedNames string
	// tlsSecret and service: the operator keeps the serving certificate (internal/admincert).
	tlsSecret string
	service   string
}

// host runs the server's parts: a controller manager with a cluster, a plain group without one
// (serve.go).
type host interface {
	Add(runnable) error
	Start(context.Context) error
}

// runnable is one part host runs until its context ends (controller-runtime's
// manager.Runnable by another name, so the build without a cluster needs no manager).
type runnable interface {
	Start(context.Context) error
}

// newHTTPServer bounds what one client can make the server hold: headers (64 KiB, answered
// 431 beyond), the time to send them and the body, and idle connections. Bodies are bounded by
// each endpoint (64 KiB for OAuth forms and registrations).
func newHTTPServer(handler http.Handler, log logr.Logger) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logr.ToSlogHandler(log.WithName("http")), slog.LevelWarn),
	}
}

// checkPublicURL refuses a public URL that would produce issuers clients reject.
func checkPublicURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("--public-url: %w", err)
	}
	if u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("--public-url %q: want scheme://host[:port][/path] without query or fragment", raw)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		// Plain HTTP is fine on loopback (development); OAuth 2.1 forbids it elsewhere.
		h := u.Hostname()
		if ip := net.ParseIP(h); h == "localhost" || (ip != nil && ip.IsLoopback()) {
			return nil
		}
	}
	return fmt.Errorf("--public-url %q: must be https:// (or http:// on a loopback address)", raw)
}

func openStore(ctx context.Context, dsn string, opts ...sqlstore.Option) (*sqlstore.Store, error) {
	if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		if dir := filepath.Dir(path); dir != "." {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, fmt.Errorf("database directory: %w", err)
			}
		}
	}
	st, err := sqlstore.Open(ctx, dsn, opts...)
	if err != nil {
		return nil, fmt.Errorf("database %s: %w", redactDSN(dsn), err)
	}
	return st, nil
}

// redactDSN hides the password of a PostgreSQL DSN (URL or keyword/value form) so the address
// can be logged.
func redactDSN(dsn string) string {
	dsn = dsnPassword.ReplaceAllString(dsn, "${1}***")
	scheme, rest, ok := strings.Cut(dsn, "://")
	if !ok {
		return dsn
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return dsn
	}
	user, _, _ := strings.Cut(rest[:at], ":")
	return scheme + "://" + user + ":***" + rest[at:]
}

var dsnPassword = regexp.MustCompile(`(?i)(password=)('[^']*'|[^&\s]*)`)

// serverRunnable serves srv on ln on every replica, not only the leader (every replica answers
// requests; docs/decisions/0004-every-replica-serves.md). When the manager stops, the listener
// closes and requests already running get up to grace to finish; the manager's own
// GracefulShutdownTimeout is longer, so it waits for them.
func serverRunnable(name string, ln net.Listener, srv *http.Server, grace time.Duration) *serving {
	return &serving{name: name, srv: srv, ln: ln, grace: grace}
}

// serving is an HTTP server as a runnable (serverRunnable). In a cluster the manager runs it
// as one of its own servers (clusterHost.Add); without one the group runs Start.
type serving struct {
	name  string
	srv   *http.Server
	ln    net.Listener
	grace time.Duration
}

// NeedLeaderElection: every replica serves.
func (s *serving) NeedLeaderElection() bool { return false }

// Start serves until ctx ends, then gives requests already running up to grace to finish.
func (s *serving) Start(ctx context.Context) error {
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.grace)
		defer cancel()
		_ = s.srv.Shutdown(sctx)
	}()
	if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("%s server: %w", s.name, err)
	}
	<-stopped
	return nil
}

// collector deletes expired runtime state periodically. It runs on every replica: on PostgreSQL
// the store lets one replica at a time collect, and SQLite has only one replica.
type collector struct {
	store interface {
		GarbageCollect(ctx context.Context, now time.Time) (store.GCResult, error)
	}
	every time.Duration
	log   logr.Logger
}

func (c *collector) NeedLeaderElection() bool { return false }

func (c *collector) Start(ctx context.Context) error {
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		removed, err := c.store.GarbageCollect(ctx, time.Now())
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			c.log.Error(err, "garbage collection failed; retrying at the next interval")
			continue
		}
		var total int64
		for _, n := range removed {
			total += n
		}
		if total > 0 {
			c.log.Info("deleted expired rows", "removed", removed)
		}
	}
}

func newLogger(level, format string) (logr.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return logr.Logger{}, fmt.Errorf("--log-level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	var h slog.Handler
	switch format {
	case "json":
		h = slog.NewJSONHandler(os.Stderr, opts)
	case "text":
		h = slog.NewTextHandler(os.Stderr, opts)
	default:
		return logr.Logger{}, fmt.Errorf("--log-format %q: want json or text", format)
	}
	return logr.FromSlogHandler(h), nil
}

// setLoggers routes controller-runtime's and client-go's logs through log. It runs before
// anything else can log: controller-runtime buffers nothing, and a first log line more than 30
// seconds after start without a logger prints a "log.SetLogger(...) was never called" stack
// trace instead of the line.
func setLoggers(log logr.Logger) {
	ctrllog.SetLogger(log)
	klog.SetLogger(log.WithName("client-go"))
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

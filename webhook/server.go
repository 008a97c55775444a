// Package webhook is Latchkey's bundled HTTP server: the OAuth endpoints, the sign-in,
// consent and account pages of every project, and the server-wide health and static paths.
//
// Each flow lives in its own package under webhook/ and New mounts it through site.Router
// (Register(rt, env, st), st being the flow's own Store interface); the routes are fixed from then on. Further grant types plug into the
// token endpoint (Server.Grant). The server itself only routes: it resolves the project from
// the first two path segments under the public URL, sets the security headers, and recovers
// from panics.
package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"latchkey.dev/latchkey/internal/clientaddr"
	"latchkey.dev/latchkey/internal/clientdoc"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/jwks"
	"latchkey.dev/latchkey/internal/metrics"
	"latchkey.dev/latchkey/internal/policy"
	"latchkey.dev/latchkey/internal/ratelimit"
	"latchkey.dev/latchkey/internal/requestid"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/tracing"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/internal/workload"
	"latchkey.dev/latchkey/webhook/account"
	"latchkey.dev/latchkey/webhook/apikey"
	"latchkey.dev/latchkey/webhook/callback"
	"latchkey.dev/latchkey/webhook/ciba"
	"latchkey.dev/latchkey/webhook/consent"
	"latchkey.dev/latchkey/webhook/exchange"
	"latchkey.dev/latchkey/webhook/idjag"
	"latchkey.dev/latchkey/webhook/links"
	"latchkey.dev/latchkey/webhook/oauth"
	"latchkey.dev/latchkey/webhook/pages"
	"latchkey.dev/latchkey/webhook/proxy"
	"latchkey.dev/latchkey/webhook/register"
	"latchkey.dev/latchkey/webhook/signin"
	"latchkey.dev/latchkey/webhook/site"
)

// Store is the runtime state the server uses: the sum of what each flow declares as its own
// Store (New hands each flow only its part, so the compiler keeps a flow to it), what Env's own
// methods use, and Ping for /-/readyz. Garbage collection, the event outbox, the audit tail and
// token counts belong to other parts of Latchkey.
type Store interface {
	site.EnvStore
	oauth.Store
	signin.Store
	consent.Store
	register.Store
	account.Store
	apikey.Store
	links.Store
	callback.Store
	callback.SignOutStore
	exchange.Store
	idjag.Store
	ciba.Store
	proxy.Store
	Ping(ctx context.Context) error
}

// Options configure the server.
type Options struct {
	Config    *config.Holder // compiled snapshot; handlers Load() it once per request
	Store     Store
	Keyring   *secret.Keyring // seals values at rest
	Logger    logr.Logger
	Now       func() time.Time // injected clock; time.Now when nil
	PublicURL string           // e.g. http://127.0.0.1:8080; issuer = PublicURL/{ns}/{project}
	// Ready is an extra readiness check (the first snapshot is published); may be nil.
	Ready func(context.Context) error
	// ClientKeys fetches private_key_jwt clients' key sets from their jwks_uri; nil makes one
	// for production (public addresses only).
	ClientKeys *jwks.Fetcher
	// Workloads reviews Kubernetes ServiceAccount tokens of workload_identity clients
	// (tokenreview.Reviewer in a cluster); nil refuses them, saying the server runs without a
	// cluster.
	Workloads workload.Reviewer
	// ClientDocuments fetches client ID metadata documents for projects that accept them;
	// nil means a clientdoc.Fetcher with its production defaults (public https hosts only).
	ClientDocuments *clientdoc.Fetcher
	// Events receives every audit record after it is stored, so security events are counted
	// (internal/events.Emitter.Recorded); may be nil. Sinks get every record from the store.
	Events func(context.Context, store.AuditRecord)
	// RateBuckets keeps the sign-in, registration and pushed-request rate limits where every
	// replica sees them (the store, on PostgreSQL); nil keeps them in this process, which is
	// right for one replica (SQLite) and gives each of several replicas a limit of its own.
	RateBuckets ratelimit.Shared
	// Vault hands out people's upstream tokens for token exchange; nil means an
	// upstream.Vault over Store and Keyring that reports its refreshes to Metrics.
	Vault exchange.Vault
	// Metrics counts requests by route, token issuance and exchange outcomes; nil counts
	// nothing. Requests are logged at V(1) either way.
	Metrics *metrics.Metrics
	// TrustedProxies are the peers (ingress controllers, load balancers) whose forwarding
	// header names the client, for rate limits; none by default: the peer is the client.
	TrustedProxies []netip.Prefix
	// ClientAddressHeader is the header those proxies set: X-Forwarded-For (when empty) or
	// Forwarded.
	ClientAddressHeader string
	// ConnectionHooks run after each saved connection, after the one that finishes the connect
	// link the connection was made for; may be nil.
	ConnectionHooks []callback.Hook
	// BackchannelNotify posts CIBA ping notifications (docs/approvals.md); nil reaches public
	// addresses only (internal/netguard).
	BackchannelNotify *http.Client
}

// Server is the HTTP handler.
type Server struct {
	env      *site.Env
	ping     func(context.Context) error // the store's
	ready    func(context.Context) error
	base     string
	sys      *http.ServeMux // server-wide: /-/…
	wellKnwn *http.ServeMux // RFC 8414 path-insertion metadata at the host root
	router   *router
	oauth    *oauth.Endpoints
	cop      *http.CrossOriginProtection
	metrics  *metrics.Metrics
	handler  http.Handler // ServeHTTP's outer layer: metrics and the access log
	proxy    *proxy.Handler
}

// New builds the server with every core flow mounted.
func New(o Options) (*Server, error) {
	if o.Config == nil || o.Store == nil || o.Keyring == nil {
		return nil, errors.New("webhook: Config, Store and Keyring are required")
	}
	pub, err := url.Parse(o.PublicURL)
	if err != nil || (pub.Scheme != "http" && pub.Scheme != "https") || pub.Host == "" {
		return nil, fmt.Errorf("webhook: PublicURL %q must be an absolute http(s) URL", o.PublicURL)
	}
	base := strings.TrimSuffix(pub.Path, "/")
	pg, err := pages.New(base + "/-/static/")
	if err != nil {
		return nil, err
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	addresses, err := clientaddr.New(o.TrustedProxies, o.ClientAddressHeader)
	if err != nil {
		return nil, err
	}
	documents := o.ClientDocuments
	if documents == nil {
		documents = clientdoc.New(clientdoc.Options{Now: now})
	}
	clientKeys := o.ClientKeys
	if clientKeys == nil {
		clientKeys = jwks.New(jwks.Options{Now: now})
	}
	env := site.NewEnv(o.Store, &site.Env{
		Config:         o.Config,
		Keyring:        o.Keyring,
		Logger:         o.Logger,
		Pages:          pg,
		Clock:          now,
		PublicURL:      pub,
		Destination:    consent.Destination,
		RedirectPolicy: site.RedirectPolicy,
		ClientDocument: register.ClientDocument(documents),
		Events:         o.Events,
		Addresses:      addresses,
		ClientKeys:     clientKeys,
		Workloads:      o.Workloads,
		Metrics:        o.Metrics,
		RateBuckets:    o.RateBuckets,
		Policy:         policy.NewEngine(now, o.Logger.WithName("policy"), 0, 0),
	})
	// Metrics label by project only for Projects in the configuration (bounded series).
	o.Metrics.Projects(o.Config)
	s := &Server{
		env:      env,
		ping:     o.Store.Ping,
		ready:    o.Ready,
		base:     base,
		sys:      http.NewServeMux(),
		wellKnwn: http.NewServeMux(),
		cop:      http.NewCrossOriginProtection(),
		metrics:  o.Metrics,
	}
	// Outermost the server span (tracing on), then the request id (the trace id when there is
	// a span), then metrics and the access log, then routing.
	s.handler = tracing.Handler(
		requestid.Middleware(o.Metrics.Instrument(http.HandlerFunc(s.serve), s.done), func() logr.Logger { return env.Logger }, addresses.FromTrustedProxy),
		spanName)
	s.router = newRouter(s, base)

	s.sys.HandleFunc("GET "+base+"/-/healthz", s.healthz)
	s.sys.HandleFunc("GET "+base+"/-/readyz", s.readyz)
	s.sys.Handle("GET "+base+"/-/static/", http.StripPrefix(base+"/-/static/", pg.Static()))

	s.router.Page("GET /{$}", http.HandlerFunc(s.projectHome))
	s.router.Page("GET "+pages.BrandingPath+"{file}", http.HandlerFunc(pg.BrandingAsset))
	// The language switcher: the cookie holds for every Project under this server's path.
	s.router.Page("GET "+pages.SwitchPath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pages.SwitchLanguage(site.IssuerPath(site.Project(r)), base+"/", pub.Scheme == "https").ServeHTTP(w, r)
	}))

	s.mountFlows(o, env, now)

	md := s.wellKnownProject(s.oauth.Metadata)
	s.wellKnwn.Handle("/.well-known/oauth-authorization-server"+base+"/{ns}/{project}", md)
	s.wellKnwn.Handle("/.well-known/openid-configuration"+base+"/{ns}/{project}", md)
	return s, nil
}

// mountFlows registers every core flow on the server's router and token endpoint. Each is
// given o.Store as the flow's own Store interface: the part it declares, and nothing more.
func (s *Server) mountFlows(o Options, env *site.Env, now func() time.Time) {
	s.oauth = oauth.Register(s.router, env, o.Store)
	// The core grants are counted here; those registered later through Grant are counted there.
	for _, gt := range s.oauth.Token.GrantTypes() {
		s.oauth.Token.Handle(gt, countedGrant{grantType: gt, next: s.oauth.Token.Handler(gt), m: s.metrics})
	}
	env.CheckPerson = signin.Register(s.router, env, o.Store, callback.EndOnSignOut(env, o.Store))
	consent.Register(s.router, env, o.Store)
	register.Register(s.router, env, o.Store)
	account.Register(s.router, env, o.Store)
	hooks := append([]callback.Hook{links.Hook(env, o.Store)}, o.ConnectionHooks...)
	// A pasted API key is saved with the same hooks as a connection made through a callback.
	keys := apikey.New(env, o.Store, hooks...)
	apikey.Register(s.router, keys)
	links.Mount(s.router, env, o.Store, links.Options{Keys: keys})
	callback.Register(s.router, env, o.Store, hooks...)
	vault := o.Vault
	if vault == nil {
		vault = &upstream.Vault{Store: o.Store, Keyring: o.Keyring, Now: now, OnRefresh: o.Metrics.UpstreamRefresh}
	}
	// Token exchange for an ID-JAG is answered by idjag, every other one by exchange.
	// An exchange refused for authorization_details may start an approval, through the same
	// rate limit, block list and store as the backchannel endpoint.
	approvals := ciba.NewApprovals(env, o.Store)
	ex := exchange.New(env, o.Store, vault).WithApprovals(approvals)
	idjag.Register(s.Grant, env, o.Store, ex)
	ciba.Register(s.router, s.Grant, env, o.Store, ciba.Options{Notify: o.BackchannelNotify, Approvals: approvals})
	// The token proxy decides every call as token exchange would (docs/token-proxy.md).
	s.proxy = proxy.New(env, o.Store, ex, proxy.Options{})
	proxy.Register(s.router, s.proxy)
}

// Proxy is the token proxy, whose decision Envoy external authorization shares.
func (s *Server) Proxy() *proxy.Handler { return s.proxy }

// Env is the environment flows are registered with.
func (s *Server) Env() *site.Env { return s.env }

// Grant registers a grant type at every project's token endpoint.
func (s *Server) Grant(grantType string, h oauth.GrantHandler) {
	s.oauth.Token.Handle(grantType, countedGrant{grantType: grantType, next: h, m: s.metrics})
}

// ServeHTTP counts and logs the request (by its route pattern) and routes it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// serve routes a request: server-wide routes, then root metadata, then projects.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	defer s.recover(w, r)
	if _, pattern := s.sys.Handler(r); pattern != "" {
		pages.Headers(false, s.sys).ServeHTTP(w, r)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/.well-known/") {
		if _, pattern := s.wellKnwn.Handler(r); pattern != "" {
			pages.Headers(false, s.wellKnwn).ServeHTTP(w, r)
			return
		}
	}
	if proxy.NotCanonical(s.base, r) {
		// ServeMux would redirect to the cleaned path; the proxy refuses it instead.
		pages.Headers(true, http.HandlerFunc(proxy.RefusePath)).ServeHTTP(w, r)
		return
	}
	pages.Headers(true, s.router.mux).ServeHTTP(w, r)
}

func (s *Server) recover(w http.ResponseWriter, r *http.Request) {
	v := recover() //nolint:revive // recover is called in a deferred function: ServeHTTP defers s.recover
	if v == nil {
		return
	}
	if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
		panic(v)
	}
	// The route pattern, not the path: a connect link's code is part of its path.
	s.env.Log(r.Context()).Error(fmt.Errorf("panic: %v", v), "handler panicked", "method", r.Method, "route", metrics.Route(r.Pattern))
	http.Error(w, "internal error; if you ask for help, quote this id: "+requestid.FromContext(r.Context()), http.StatusInternalServerError)
}

// project resolves {ns}/{project} against the current snapshot.
func (s *Server) project(r *http.Request) *config.Project {
	ns, name := r.PathValue("ns"), r.PathValue("project")
	if ns == "" || name == "" {
		return nil
	}
	return s.env.Config.Load().Project(ns + "/" + name)
}

func (s *Server) wellKnownProject(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		p := s.project(r)
		if p == nil {
			oauth.WriteError(w, oauth.ErrNotFound)
			return
		}
		h.ServeHTTP(w, site.WithProject(r, p))
	})
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("ok\n"))
}

// readyz is ready when the database answers, a configuration snapshot is published and the
// caller's own check passes. The reason is plain text without detail from the error.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	fail := func(reason string, err error) {
		s.env.Log(ctx).V(1).Info("not ready", "reason", reason, "error", err)
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(reason + "\n"))
	}
	if err := s.ping(ctx); err != nil {
		fail("store unavailable", err)
		return
	}
	if s.env.Config.Load() == nil {
		fail("no configuration yet", nil)
		return
	}
	if s.ready != nil {
		if err := s.ready(ctx); err != nil {
			fail("not ready", err)
			return
		}
	}
	w.Write([]byte("ok\n"))
}

// Package admin serves the admin API, admin.latchkey.dev/v1alpha1: people, consents, connected
// accounts, passkeys, open links, live tokens per client and audit records of every Project, as an
// aggregated Kubernetes API behind the kube-apiserver (docs/admin.md,
// docs/decisions/0029-admin-api-is-an-aggregated-api.md).
//
// The kube-apiserver authenticates the user and authorizes every request against the
// cluster's RBAC before it proxies it here; this server authenticates the proxy alone (a TLS
// client certificate from the front-proxy CA with an allowed common name) and takes the user's
// name and groups from the headers the proxy sets, only for the audit record. It never calls
// the Kubernetes API: the front-proxy CA and names come in as configuration, the Projects from
// the compiled snapshot, the state from the store.
package admin

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
)

// Store is what the admin API reads and ends (docs/decisions/0024).
type Store interface {
	store.Admin
	GetConnection(ctx context.Context, project, id string) (store.Connection, error)
	ListConnectionActors(ctx context.Context, project string, ids []string) ([]store.ConnectionActor, error)
	DeleteConnection(ctx context.Context, project, id string) error
	GetPasskey(ctx context.Context, project string, credentialID []byte) (store.Passkey, error)
	DeletePasskey(ctx context.Context, project, subject string, credentialID []byte) error
	GetLink(ctx context.Context, id string) (store.Link, error)
	GetClient(ctx context.Context, project, id string) (store.Client, error)
	RevokeApp(ctx context.Context, project, subject, clientID string, now time.Time) error
	RevokeClientTokensIn(ctx context.Context, projects []string, clientID string, now time.Time) (map[string]int64, error)
	CountLiveTokens(ctx context.Context, project string, now time.Time) (map[string]int64, error)
	AppendAudit(ctx context.Context, r store.AuditRecord) error
	store.AdminWatch
	sharedStore
}

// Revoker revokes a connection at its service (upstream.Vault); nil skips upstream revocation.
type Revoker interface {
	Revoke(ctx context.Context, c *config.Connector, conn store.Connection) error
}

// FrontProxy is how the kube-apiserver's aggregator proves itself: the requestheader options
// of the kube-apiserver (kube-system/extension-apiserver-authentication holds them).
type FrontProxy struct {
	// ClientCA verifies the aggregator's client certificate (--requestheader-client-ca-file).
	ClientCA *x509.CertPool
	// AllowedNames are the common names the certificate may carry
	// (--requestheader-allowed-names); empty allows any certificate ClientCA verifies, as the
	// kube-apiserver itself does.
	AllowedNames []string
	// UsernameHeaders and GroupHeaders name the headers carrying the user
	// (--requestheader-username-headers, --requestheader-group-headers); empty means
	// X-Remote-User and X-Remote-Group.
	UsernameHeaders []string
	GroupHeaders    []string
}

// Options configure the admin API server.
type Options struct {
	Config  *config.Holder
	Store   Store
	Revoker Revoker
	Proxy   FrontProxy
	Logger  logr.Logger
	Now     func() time.Time
	// Events, when set, is told of every audit record written (the security event sinks).
	Events func(ctx context.Context, r store.AuditRecord)
	// WatchPoll is how often a watch reads the store (2s when zero); WatchBookmark how often
	// it sends a bookmark to a client that allows them (a minute); WatchTimeout the longest a
	// watch runs (30 minutes; a client's shorter timeoutSeconds wins).
	WatchPoll, WatchBookmark, WatchTimeout time.Duration
}

// Server is the admin API's HTTP handler.
type Server struct {
	o     Options
	mux   *http.ServeMux
	proxy atomic.Pointer[FrontProxy]
}

// New returns the admin API handler. Serve it over TLS with TLSConfig, which asks for the
// aggregator's client certificate; the handler refuses any request without one.
func New(o Options) (*Server, error) {
	if o.Config == nil || o.Store == nil {
		return nil, errors.New("admin: Config and Store are required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.WatchPoll <= 0 {
		o.WatchPoll = defaultWatchPoll
	}
	if o.WatchBookmark <= 0 {
		o.WatchBookmark = defaultWatchBookmark
	}
	if o.WatchTimeout <= 0 {
		o.WatchTimeout = defaultWatchTimeout
	}
	s := &Server{o: o, mux: http.NewServeMux()}
	if err := s.SetFrontProxy(o.Proxy); err != nil {
		return nil, err
	}
	s.routes()
	return s, nil
}

// SetFrontProxy replaces how the server recognises the aggregator, as when the front-proxy CA
// rotates. It applies to new connections and, because every request's certificate is checked
// again, to the requests of connections already open.
func (s *Server) SetFrontProxy(fp FrontProxy) error {
	if fp.ClientCA == nil {
		return errors.New("admin: the front proxy's ClientCA is required")
	}
	if len(fp.UsernameHeaders) == 0 {
		fp.UsernameHeaders = []string{"X-Remote-User"}
	}
	if len(fp.GroupHeaders) == 0 {
		fp.GroupHeaders = []string{"X-Remote-Group"}
	}
	s.proxy.Store(&fp)
	return nil
}

// TLSConfig returns the listener's TLS configuration: cert is the serving certificate, and a
// client certificate is verified against the front-proxy CA when one is presented. Requests
// without one reach ServeHTTP, which refuses them with a Kubernetes Status (a TLS handshake
// failure would tell a caller less).
func (s *Server) TLSConfig(cert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *tls.Config {
	base := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: cert,
		ClientAuth:     tls.VerifyClientCertIfGiven,
		NextProtos:     []string{"h2", "http/1.1"},
	}
	// The CA a handshake verifies against is the one current at that handshake.
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := base.Clone()
		c.GetConfigForClient = nil
		c.ClientCAs = s.proxy.Load().ClientCA
		return c, nil
	}
	return base
}

// user is the Kubernetes user a request comes from, as the front proxy names them.
type user struct {
	name   string
	groups []string
}

type userKey struct{}

// ServeHTTP authenticates the front proxy, then serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	u, ok := s.authenticate(r)
	if !ok {
		writeStatus(w, r, errUnauthorized)
		return
	}
	s.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, u)))
}

// authenticate accepts a request only over TLS with a client certificate that chains to the
// front-proxy CA and carries an allowed common name; only then are the user headers believed.
func (s *Server) authenticate(r *http.Request) (user, bool) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return user{}, false
	}
	// VerifiedChains is set only when the certificate verified against ClientCAs for client
	// authentication (crypto/tls checks the extended key usage), at the handshake. A
	// connection outlives a CA rotation, so the certificate is checked again against the CA
	// current now: a certificate of a CA that was rotated out is refused on a connection
	// opened before.
	fp := s.proxy.Load()
	leaf := r.TLS.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range r.TLS.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: fp.ClientCA, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return user{}, false
	}
	if len(fp.AllowedNames) > 0 && !slices.Contains(fp.AllowedNames, leaf.Subject.CommonName) {
		return user{}, false
	}
	var u user
	for _, h := range fp.UsernameHeaders {
		if v := r.Header.Get(h); v != "" {
			u.name = v
			break
		}
	}
	if u.name == "" {
		return user{}, false
	}
	for _, h := range fp.GroupHeaders {
		u.groups = append(u.groups, r.Header.Values(h)...)
	}
	return u, true
}

func userOf(ctx context.Context) user {
	u, _ := ctx.Value(userKey{}).(user)
	return u
}

// record writes an admin action's audit record, with the Kubernetes user as the actor.
func (s *Server) record(ctx context.Context, r store.AuditRecord) {
	u := userOf(ctx)
	r.Actor = "kubernetes:" + u.name
	// Only what was done is recorded: a refused request (RBAC, a bad name) never reaches here.
	r.Outcome = store.OutcomeSuccess
	if r.Time.IsZero() {
		r.Time = s.o.Now()
	}
	// As every other writer does (site.Env.Record): the client named by the subject or the
	// details becomes the record's client, so the log and the sinks say the same.
	events.Normalize(&r)
	s.o.Logger.Info("audit", "project", r.Project, "action", r.Action, "actor", r.Actor, "target", r.Target)
	if err := s.o.Store.AppendAudit(ctx, r); err != nil {
		s.o.Logger.Error(err, "cannot append audit record", "project", r.Project, "action", r.Action)
	}
	if s.o.Events != nil {
		s.o.Events(ctx, r)
	}
}

// Package site is what every flow of the HTTP server plugs into: the runtime parts a handler
// needs (Env), the router that mounts a flow's handlers under each project's issuer (Router),
// the project a request is for, and one view of an OAuth client whether it was declared as an
// OAuthClient resource or registered at run time.
//
// A flow package exposes Register(rt site.Router, env *site.Env, st Store), where Store is the
// flow's own part of the store, and never imports the webhook package itself, so flows can be
// added without editing the server's core.
package site

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"latchkey.dev/latchkey/internal/clientaddr"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/jwks"
	"latchkey.dev/latchkey/internal/metrics"
	"latchkey.dev/latchkey/internal/policy"
	"latchkey.dev/latchkey/internal/ratelimit"
	"latchkey.dev/latchkey/internal/requestid"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/workload"
	"latchkey.dev/latchkey/webhook/pages"
)

// Env is shared by every handler. It is built once by webhook.New (NewEnv) and never changed
// afterwards. It holds no store a flow can reach: each flow is given its own part.
type Env struct {
	store   EnvStore
	Config  *config.Holder
	Keyring *secret.Keyring
	Logger  logr.Logger
	Pages   *pages.Pages
	// Clock is the injected clock; Now reads it.
	Clock func() time.Time
	// PublicURL is the installation's public address; issuers are {PublicURL}/{ns}/{name}.
	PublicURL *url.URL
	// RateBuckets, when set, keeps every flow's rate limits where all replicas see them
	// (ratelimit.Limiter.Share); nil keeps them in this process.
	RateBuckets ratelimit.Shared

	// Destination says where an authorization code for redirectURI would go, for the consent
	// page. The default calls every address a website; the server uses consent.Destination, which
	// classifies it with internal/redirect.
	Destination func(p *config.Project, redirectURI string) pages.Destination
	// RedirectPolicy decides whether a client with these registered redirect URIs may be used at
	// all in the project. It is called with the full list at registration, at consent and at
	// refresh; a non-nil error refuses, and its text is shown to people and developers as is.
	RedirectPolicy func(p *config.Project, redirectURIs []string) error
	// ClientDocument resolves a client id that is an https URL (client ID metadata documents)
	// when the project accepts them. Nil means such ids are unknown clients.
	ClientDocument func(ctx context.Context, p *config.Project, clientID string) (*Client, error)
	// Events, when set, is told of every record Record appended (or failed to append), so that
	// security events are counted (internal/events Emitter.Recorded).
	Events func(ctx context.Context, r store.AuditRecord)
	// Addresses finds the client address of a request for rate limits; nil trusts no proxy.
	Addresses *clientaddr.Resolver
	// CheckPerson, when set, is asked before a person's refresh token is rotated whether the
	// person may still act: webhook/signin re-checks people at the project's OpenID provider
	// (docs/leavers.md). It returns nil, ErrPersonEnded, ErrPersonUnchecked,
	// ErrPersonUnconfirmed, or a store failure.
	CheckPerson func(ctx context.Context, p *config.Project, person store.Person, now time.Time) error
	// ClientKeys fetches the key sets private_key_jwt clients publish at a jwks_uri.
	ClientKeys *jwks.Fetcher
	// Workloads asks the cluster whether a ServiceAccount token is valid (TokenReview), for
	// workload_identity clients; nil without a cluster, where such clients are refused and told
	// why (docs/workload-identity.md).
	Workloads workload.Reviewer
	// Metrics counts what flows report themselves (sign-ins); nil counts nothing.
	Metrics *metrics.Metrics
	// Policy decides a project's AccessPolicies at consent, issuance and token exchange
	// (Env.Decide, docs/policy.md); nil allows everything.
	Policy policy.Decider
}

// What CheckPerson says when a person may not act now.
var (
	// ErrPersonEnded: the provider refused the person; their sessions and tokens have been
	// ended.
	ErrPersonEnded = errors.New("the person can no longer sign in at their organisation")
	// ErrPersonUnchecked: nothing to re-check the person with (they signed in before re-checks
	// were turned on, or the provider issued no refresh token); they must sign in again.
	ErrPersonUnchecked = errors.New("the person must sign in again so their organisation can confirm them")
	// ErrPersonUnconfirmed: the provider has not confirmed the person for too long and cannot
	// be asked right now; nothing was ended, and a later attempt may succeed.
	ErrPersonUnconfirmed = errors.New("the person's organisation cannot confirm them right now")
)

// ClientAddress is the address rate limits count r's client by: the connection's peer, or
// what a trusted proxy says in front of it (internal/clientaddr), with IPv6 counted by /64.
func (e *Env) ClientAddress(r *http.Request) string {
	return clientaddr.Key(e.Addresses.Address(r))
}

// Log is the logger for a line about the request ctx belongs to: Logger with the request's
// request_id added (internal/requestid), or Logger outside a request.
func (e *Env) Log(ctx context.Context) logr.Logger { return requestid.Logger(ctx, e.Logger) }

// ResponseLog is Log for code that holds only the response writer: the request id is read from
// the X-Request-Id header the server set on it before the handler ran (none outside a request).
func (e *Env) ResponseLog(w http.ResponseWriter) logr.Logger {
	return requestid.WithID(e.Logger, w.Header().Get(requestid.Header))
}

// Now is the current time on the injected clock.
func (e *Env) Now() time.Time { return e.Clock() }

// Secure reports whether the server is reached over https, which decides cookie prefixes and
// the Secure attribute.
func (e *Env) Secure() bool { return e.PublicURL.Scheme == "https" }

// Record appends a security-relevant audit record and logs it. It is the one place such records
// are written, so security events (Kubernetes Events, metrics, event sinks) can fan out from here.
// Failure to record is logged, not returned: the action it describes has already happened.
//
// Every record reaches the project's event sinks: the store keeps it pending until a
// deliverer relays it to the outbox (internal/events), so nothing here can lose it. The records
// every token request writes are queued and stored a few milliseconds after the answer
// (events.WrittenBehind, docs/decisions/0047); the rest are stored before it, records of a
// handout in a batch with others (events.Handout, docs/decisions/0054). A handler that hands
// something out calls RecordHandout instead, and fails when it cannot.
func (e *Env) Record(ctx context.Context, r store.AuditRecord) {
	if err := e.record(ctx, r); err != nil {
		e.Log(ctx).Error(err, "cannot append audit record", "project", r.Project, "action", r.Action)
	}
}

// RecordHandout is Record for the record of something a client is about to be handed
// (events.Handout): it returns once the record is stored, or the error that kept it from
// being stored, and then the handler must answer with an error (oauth.Internal) instead:
// nothing is handed out that the audit log does not show.
func (e *Env) RecordHandout(ctx context.Context, r store.AuditRecord) error {
	err := e.record(ctx, r)
	if err != nil {
		err = fmt.Errorf("storing the %s record: %w", r.Action, err)
	}
	return err
}

func (e *Env) record(ctx context.Context, r store.AuditRecord) error {
	if r.Time.IsZero() {
		r.Time = e.Now()
	}
	events.Normalize(&r)
	level := 0
	if events.WrittenBehind(r.Action) || r.Action == events.TokenExchanged {
		// One per token request, like the access log: at debug level too, not a line per
		// request at the default level. The audit log and the sinks have every one.
		level = 1
	}
	// The request's logger is the server's with the id added (requestid.Logger), so the
	// server's says whether the line is wanted: asked first, a token request that logs nothing
	// makes neither that logger nor the line's arguments.
	if e.Logger.V(level).Enabled() {
		e.Log(ctx).V(level).Info("audit", "project", r.Project, "action", r.Action, "actor", r.Actor, "target", r.Target,
			"outcome", r.Outcome, "reason", r.Reason)
	}
	write := e.store.AppendAudit
	switch {
	case events.WrittenBehind(r.Action):
		write = e.store.QueueAudit
	case events.Handout(r.Action):
		write = e.store.AppendAuditBatched
	}
	err := write(ctx, r)
	// A handout whose record failed did not happen: the request fails.
	if e.Events != nil && (err == nil || !events.Handout(r.Action)) {
		e.Events(ctx, r)
	}
	return err
}

// Router mounts a flow's handlers under every project's issuer path. Patterns are Go 1.22
// ServeMux patterns relative to the issuer ("GET /sign-in", "/register/{client_id}"); the
// wildcard names {ns} and {project} are reserved. Flows are registered while the server is
// built and the routes are fixed from then on; registering a pattern twice panics.
type Router interface {
	// Page registers an HTML endpoint: every non-safe request passes
	// http.CrossOriginProtection, and an unknown project gets the HTML 404 page.
	Page(pattern string, h http.Handler)
	// API registers an endpoint called by programs rather than browsers with cookies: CORS is
	// open to any origin (no credentials), preflights are answered, and an unknown project gets
	// a JSON 404. Prefer patterns without a method and check the method in the handler, so a
	// wrong method gets the protocol's own error shape.
	API(pattern string, h http.Handler)
}

type projectKey struct{}

// WithProject returns r carrying the project it is for; the router does this before any flow
// handler runs.
func WithProject(r *http.Request, p *config.Project) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), projectKey{}, p))
}

// Project is the project the request is for. Handlers mounted through Router always have one.
func Project(r *http.Request) *config.Project {
	p, _ := r.Context().Value(projectKey{}).(*config.Project)
	return p
}

// IssuerPath is the path part of the project's issuer ("/ns/name", or with the public URL's
// path prefix in front).
func IssuerPath(p *config.Project) string {
	u, err := url.Parse(p.Issuer)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(u.Path, "/")
}

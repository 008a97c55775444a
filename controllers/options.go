package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"latchkey.dev/latchkey/internal/clientdoc"
	"latchkey.dev/latchkey/internal/config"
	lkkeys "latchkey.dev/latchkey/internal/keys"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/workload"
)

// Store is the part of the runtime state the controllers use: RedirectPolicy enforcement
// lists a project's registered clients, counts the live tokens of each, and revokes those of
// clients a policy refuses; policy changes are written to the audit log.
type Store interface {
	ListClients(ctx context.Context, project string) ([]store.Client, error)
	CountLiveTokens(ctx context.Context, project string, now time.Time) (map[string]int64, error)
	RevokeClientTokens(ctx context.Context, project string, clientIDs []string, now time.Time) (map[string]int64, error)
	// AppendAudit writes policy.changed when a Project's or a RedirectPolicy's spec changes.
	AppendAudit(ctx context.Context, r store.AuditRecord) error
	// HoldClientID records which namespace holds each OAuthClient id (clientids.go).
	HoldClientID(ctx context.Context, project, clientID, namespace string, now time.Time) (string, error)
}

// Options configures the controllers and the compiler.
type Options struct {
	// PublicURL is the server's external base URL (scheme, host, optional path prefix); issuers
	// are {PublicURL}/{namespace}/{project}. Required.
	PublicURL string
	// Config receives every compiled Snapshot. Required.
	Config *config.Holder
	// Store is the runtime state; RedirectPolicy enforcement revokes the tokens of clients a
	// policy refuses in it. May be nil (refused clients are then reported, not revoked).
	Store Store
	// ClientDocuments reads the client ID metadata documents of clients holding tokens, for
	// enforcement; nil means a clientdoc.Fetcher with production defaults.
	ClientDocuments *clientdoc.Fetcher
	// Clock stamps condition transitions. Defaults to time.Now.
	Clock func() time.Time
	// MaxConcurrentReconciles per kind. Defaults to 16: a reconcile mostly waits on API writes
	// (the credentials Secret, status), so overlapping them is what lets thousands of
	// OAuthClients converge quickly.
	MaxConcurrentReconciles int
	// SigningKeys are the operator's signing keys, for Projects with signingKeySource
	// Operator; nil refuses such Projects. Call Compiler.Kick when they change.
	SigningKeys *lkkeys.Signing
	// SPIFFEBundles fetches the SPIFFE bundle endpoints OAuthClients name
	// (spec.workloadIdentity.trustBundle.endpointURL); nil means one with production defaults.
	SPIFFEBundles *workload.Bundles
	// WaitFor, when set, is waited for before the first compilation: the server publishes no
	// configuration (and so serves no project) until the keys are loaded.
	WaitFor func(context.Context) error
	// Debounce is how long the compiler waits after a change for more changes before it
	// compiles. Defaults to 100ms.
	Debounce time.Duration
}

func (o *Options) defaults() error {
	if o.Config == nil {
		return errors.New("controllers: Options.Config is required")
	}
	u, err := url.Parse(o.PublicURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("controllers: Options.PublicURL %q must be an absolute http(s) URL without query or fragment", o.PublicURL)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.MaxConcurrentReconciles <= 0 {
		o.MaxConcurrentReconciles = 16
	}
	if o.Debounce <= 0 {
		o.Debounce = 100 * time.Millisecond
	}
	if o.SPIFFEBundles == nil {
		o.SPIFFEBundles = workload.NewBundles(workload.BundleOptions{Log: log.Log.WithName("spiffe-bundles")})
	}
	return nil
}

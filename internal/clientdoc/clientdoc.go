// Package clientdoc fetches OAuth Client ID Metadata Documents
// (draft-ietf-oauth-client-id-metadata-document; MCP 2026-07-28 prefers them to dynamic
// registration): a client whose client_id is an https URL describes itself in a JSON document
// served at that very URL.
//
// Fetching a URL a stranger chose is a server-side request forgery risk, so a Fetcher:
//   - fetches https only, never through a proxy, never following a redirect;
//   - refuses, at dial time, every address that is not public (loopback, private, link-local,
//     carrier-grade NAT, documentation, multicast, NAT64, …), through internal/netguard, which
//     checks the address actually dialled, after DNS resolution, so DNS rebinding gets nowhere;
//   - bounds the time (5 s) and the size (64 KiB) of each fetch, and the number of cached
//     documents;
//   - caches documents as their Cache-Control says, within bounds, and remembers failures
//     briefly, so a client cannot make the server fetch on every request; concurrent requests
//     for one document share one fetch.
//
// A document must name itself (its client_id member equals the URL, byte for byte), must not
// carry a client secret, and is accepted for public clients only (token_endpoint_auth_method
// none, which then prove themselves with PKCE): Latchkey does not accept client assertions, so
// private_key_jwt would be a promise it could not check.
package clientdoc

import (
	"cmp"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"latchkey.dev/latchkey/internal/netguard"
	"latchkey.dev/latchkey/internal/redirect"
	"latchkey.dev/latchkey/internal/tracing"
	"latchkey.dev/latchkey/internal/trust"
)

// Defaults of Options.
const (
	DefaultTimeout    = 5 * time.Second
	DefaultMaxBytes   = 64 << 10
	DefaultMinTTL     = time.Minute
	DefaultMaxTTL     = 24 * time.Hour
	DefaultTTL        = 5 * time.Minute
	DefaultFailureTTL = 30 * time.Second
	DefaultMaxEntries = 10000
)

// MaxIDLength bounds a client id URL. Client ids are stored with every token and shown on the
// consent page; nothing legitimate needs more.
const MaxIDLength = 1024

// maxRedirectURIs matches what dynamic registration accepts.
const maxRedirectURIs = 20

// Error is a problem with a client's document or its address: the client's mistake, never the
// server's. Reason is safe to show to people and developers; it never echoes the document.
type Error struct{ Reason string }

func (e *Error) Error() string { return "client ID metadata document: " + e.Reason }

func problem(format string, args ...any) *Error { return &Error{Reason: fmt.Sprintf(format, args...)} }

// Document is a fetched and checked client ID metadata document.
type Document struct {
	// ClientID is the URL the document was fetched from, equal to its client_id member.
	ClientID string
	// Host is the host (and port, if any) that served the document: the domain that vouches
	// for the client, which is more than a name the client chose for itself.
	Host string
	// RedirectURIs are exactly as the document lists them (duplicates removed); each passed
	// redirect.ValidateRedirectURI.
	RedirectURIs []string
	ClientName   string
	ClientURI    string
	LogoURI      string
	// GrantTypes and ResponseTypes as listed (nil when absent).
	GrantTypes    []string
	ResponseTypes []string
	Scope         string
	// Raw is the document as served, for callers that validate more of it.
	Raw []byte
	// AuthMethod is none or private_key_jwt; JWKSURI or JWKS (raw JSON) then holds the keys.
	AuthMethod string
	JWKSURI    string
	JWKS       []byte
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Options configure a Fetcher. The zero value is ready for production.
type Options struct {
	// Timeout bounds one fetch, from dialling to the last byte. Default 5 s.
	Timeout time.Duration
	// MaxBytes bounds a document. Default 64 KiB.
	MaxBytes int64
	// MinTTL and MaxTTL bound how long a document is kept, whatever its Cache-Control says
	// (no-store and no-cache are held MinTTL: the floor is what stops a client from making
	// the server fetch on every request). DefaultTTL applies without max-age. FailureTTL is how
	// long a failed fetch is remembered.
	MinTTL, MaxTTL, DefaultTTL, FailureTTL time.Duration
	// MaxEntries bounds the cache. Default 10000.
	MaxEntries int
	// AllowLoopback lets client ids name loopback hosts (127.0.0.1, [::1], localhost) and be
	// fetched from loopback addresses. For tests only: in production it would let anyone who
	// can reach the server make it fetch from itself.
	AllowLoopback bool
	// RootCAs, when set, replaces the trusted roots (tests trust their own server); otherwise
	// they are trust.Roots: the system's, plus the operator's --ca-bundle.
	RootCAs *x509.CertPool
	// Now is the injected clock for cache expiry; time.Now when nil.
	Now func() time.Time
}

// Fetcher fetches and caches documents. It is safe for concurrent use.
type Fetcher struct {
	o      Options
	client *http.Client

	// flight makes concurrent Gets for one id share one fetch.
	flight singleflight.Group

	mu    sync.Mutex
	cache map[string]entry
}

type entry struct {
	doc     *Document
	err     error
	expires time.Time
}

// New returns a Fetcher.
func New(o Options) *Fetcher {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	set(&o.Timeout, DefaultTimeout)
	set(&o.MinTTL, DefaultMinTTL)
	set(&o.MaxTTL, DefaultMaxTTL)
	set(&o.DefaultTTL, DefaultTTL)
	set(&o.FailureTTL, DefaultFailureTTL)
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	var allowed netguard.Allowed
	if o.AllowLoopback {
		allowed = netguard.Loopback
	}
	client := netguard.Client(o.Timeout, allowed, cmp.Or(o.RootCAs, trust.Roots()))
	client.Transport = tracing.Transport("client metadata", client.Transport)
	return &Fetcher{
		o:      o,
		client: client,
		cache:  map[string]entry{},
	}
}

// IsClientID reports whether id is meant as a client ID metadata document URL (it may still
// be an invalid one).
func IsClientID(id string) bool { return strings.HasPrefix(id, "https://") }

// Get returns the document for a client id, from the cache or freshly fetched. Every failure
// is an *Error: an invalid id, an unreachable or non-public host, or a document that does not
// qualify.
func (f *Fetcher) Get(ctx context.Context, id string) (*Document, error) {
	if err := ValidateID(id, f.o.AllowLoopback); err != nil {
		return nil, err
	}
	if e, ok := f.cached(id); ok {
		return e.doc, e.err
	}
	// The fetch runs in its own goroutine without the caller's cancellation: a caller giving up
	// does not fail the fetch for the others waiting on it.
	fetchCtx := context.WithoutCancel(ctx)
	ch := f.flight.DoChan(id, func() (any, error) {
		// A fetch that ended between the check above and joining this flight is cached.
		if e, ok := f.cached(id); ok {
			return e, nil
		}
		return f.run(fetchCtx, id), nil
	})
	select {
	case r := <-ch:
		e := r.Val.(entry)
		return e.doc, e.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// cached returns the unexpired entry for id.
func (f *Fetcher) cached(id string) (entry, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.cache[id]
	return e, ok && f.o.Now().Before(e.expires)
}

// run fetches and caches the outcome, a failure included (for FailureTTL).
func (f *Fetcher) run(ctx context.Context, id string) entry {
	doc, ttl, err := f.fetch(ctx, id)
	if err != nil {
		ttl = f.o.FailureTTL
	}
	e := entry{doc: doc, err: err, expires: f.o.Now().Add(ttl)}
	f.mu.Lock()
	f.store(id, e)
	f.mu.Unlock()
	return e
}

// store adds an entry, making room first: expired entries go, then arbitrary ones.
func (f *Fetcher) store(id string, e entry) {
	if _, ok := f.cache[id]; !ok && len(f.cache) >= f.o.MaxEntries {
		now := f.o.Now()
		for k, v := range f.cache {
			if !now.Before(v.expires) {
				delete(f.cache, k)
			}
		}
		for k := range f.cache {
			if len(f.cache) < f.o.MaxEntries {
				break
			}
			delete(f.cache, k)
		}
	}
	f.cache[id] = e
}

// Forget drops a cached document (or failure), so the next Get fetches again.
func (f *Fetcher) Forget(id string) {
	f.mu.Lock()
	delete(f.cache, id)
	f.mu.Unlock()
}

func (f *Fetcher) fetch(ctx context.Context, id string) (*Document, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, f.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, id, nil)
	if err != nil {
		return nil, 0, problem("the client id is not a URL that can be fetched")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		switch {
		case errors.Is(err, netguard.ErrNotPublic):
			return nil, 0, problem("the client id's host does not resolve to a public address")
		case errors.Is(err, netguard.ErrRedirect):
			return nil, 0, problem("the document must be served at the client id itself, without redirects")
		case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
			return nil, 0, problem("the document did not arrive within %s", f.o.Timeout)
		}
		return nil, 0, problem("the document could not be fetched")
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, problem("fetching the document answered HTTP %d, not 200", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || !(mt == "application/json" || strings.HasSuffix(mt, "+json")) {
			return nil, 0, problem("the document must be served as application/json")
		}
	}
	if resp.ContentLength > f.o.MaxBytes {
		return nil, 0, problem("the document is larger than %d bytes", f.o.MaxBytes)
	}
	body, err := netguard.ReadAtMost(resp.Body, f.o.MaxBytes)
	switch {
	case errors.Is(err, netguard.ErrTooLarge):
		return nil, 0, problem("the document is larger than %d bytes", f.o.MaxBytes)
	case err != nil && (isTimeout(err) || errors.Is(err, context.DeadlineExceeded)):
		return nil, 0, problem("the document did not arrive within %s", f.o.Timeout)
	case err != nil:
		return nil, 0, problem("the document could not be read")
	}
	doc, err := Parse(id, body)
	if err != nil {
		return nil, 0, err
	}
	return doc, f.ttl(resp.Header), nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// ttl reads Cache-Control (max-age, no-store, no-cache) within the configured bounds.
func (f *Fetcher) ttl(h http.Header) time.Duration {
	ttl := f.o.DefaultTTL
	for _, cc := range h.Values("Cache-Control") {
		for d := range strings.SplitSeq(cc, ",") {
			d = strings.ToLower(strings.TrimSpace(d))
			switch {
			case d == "no-store" || d == "no-cache":
				return f.o.MinTTL
			case strings.HasPrefix(d, "max-age="):
				if n, err := strconv.ParseInt(strings.Trim(d[len("max-age="):], `"`), 10, 64); err == nil && n >= 0 {
					if n > int64(f.o.MaxTTL/time.Second) {
						n = int64(f.o.MaxTTL / time.Second)
					}
					ttl = time.Duration(n) * time.Second
				}
			}
		}
	}
	return min(max(ttl, f.o.MinTTL), f.o.MaxTTL)
}

// ValidateID checks a client id URL (draft §3): https, a host that names a public site (a DNS
// name with at least one dot, not an IP literal, lower case, no trailing dot), an optional
// port, a path other than "/" without dot segments, and no userinfo, query or fragment. Every
// failure is an *Error. allowLoopback admits loopback hosts, for tests.
func ValidateID(id string, allowLoopback bool) error {
	if len(id) > MaxIDLength {
		return problem("the client id is longer than %d characters", MaxIDLength)
	}
	if !IsClientID(id) {
		return problem("the client id must be an https URL")
	}
	for i := 0; i < len(id); i++ {
		if b := id[i]; b <= 0x20 || b >= 0x7f || strings.IndexByte(`"<>\^`+"`{|}", b) >= 0 {
			return problem("the client id contains a character not allowed in a URL")
		}
	}
	if strings.ContainsAny(id, "#?") {
		return problem("the client id must not have a query or a fragment")
	}
	u, err := url.Parse(id)
	if err != nil || u.Scheme != "https" || u.Opaque != "" {
		return problem("the client id is not a valid https URL")
	}
	if u.User != nil {
		return problem("the client id must not contain userinfo")
	}
	host := u.Hostname()
	if err := checkHost(host, allowLoopback); err != nil {
		return err
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 || p[0] == '0' {
			return problem("the client id has an invalid port")
		}
	} else if strings.HasSuffix(u.Host, ":") {
		return problem("the client id has an invalid port")
	}
	path := u.EscapedPath()
	if path == "" || path == "/" {
		return problem("the client id must have a path (https://app.example/oauth/client.json)")
	}
	for seg := range strings.SplitSeq(path[1:], "/") {
		s, err := url.PathUnescape(seg)
		if err != nil {
			return problem("the client id has a malformed percent-escape")
		}
		if s == "." || s == ".." {
			return problem("the client id must not contain . or .. path segments")
		}
	}
	return nil
}

func checkHost(host string, allowLoopback bool) error {
	if host == "" {
		return problem("the client id must name a host")
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if allowLoopback && a.IsLoopback() {
			return nil
		}
		return problem("the client id must name a domain, not an IP address")
	}
	if host == "localhost" && allowLoopback {
		return nil
	}
	if host != strings.ToLower(host) {
		return problem("the client id's host must be written in lower case")
	}
	if strings.HasSuffix(host, ".") || !strings.Contains(host, ".") {
		return problem("the client id must name a public domain (with a dot, without a trailing dot)")
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") || strings.HasSuffix(host, ".local") ||
		strings.HasSuffix(host, ".internal") || strings.HasSuffix(host, ".home.arpa") {
		return problem("the client id must name a public domain")
	}
	for label := range strings.SplitSeq(host, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return problem("the client id's host is not a valid domain name")
		}
		for i := 0; i < len(label); i++ {
			if b := label[i]; !('a' <= b && b <= 'z' || '0' <= b && b <= '9' || b == '-') {
				return problem("the client id's host is not a valid domain name")
			}
		}
	}
	return nil
}

// document is the part of a metadata document Latchkey reads (RFC 7591 members).
type document struct {
	ClientID                string          `json:"client_id"`
	RedirectURIs            []string        `json:"redirect_uris"`
	TokenEndpointAuthMethod string          `json:"token_endpoint_auth_method"`
	GrantTypes              []string        `json:"grant_types"`
	ResponseTypes           []string        `json:"response_types"`
	ClientName              string          `json:"client_name"`
	ClientURI               string          `json:"client_uri"`
	LogoURI                 string          `json:"logo_uri"`
	Scope                   string          `json:"scope"`
	JWKSURI                 string          `json:"jwks_uri"`
	JWKS                    json.RawMessage `json:"jwks"`
}

// Parse checks a document served at id: a JSON object that names itself, carries no secret,
// is for a public client, and lists valid redirect URIs. Every failure is an *Error.
func Parse(id string, body []byte) (*Document, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(body, &members); err != nil {
		return nil, problem("the document is not a JSON object")
	}
	for _, k := range []string{"client_secret", "client_secret_expires_at"} {
		if _, ok := members[k]; ok {
			return nil, problem("the document must not contain %s: it is public", k)
		}
	}
	var d document
	if err := json.Unmarshal(body, &d); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return nil, problem("%s has the wrong type", te.Field)
		}
		return nil, problem("the document is not valid JSON")
	}
	if d.ClientID != id {
		return nil, problem("the document's client_id must be exactly the URL it is served at")
	}
	switch d.TokenEndpointAuthMethod {
	case "", "none":
		if d.JWKSURI != "" || len(d.JWKS) > 0 {
			return nil, problem("jwks and jwks_uri are for token_endpoint_auth_method private_key_jwt")
		}
	case "private_key_jwt":
		// The client proves itself with keys it publishes, never a secret: the document can
		// stay public.
		if (d.JWKSURI == "") == (len(d.JWKS) == 0) {
			return nil, problem("token_endpoint_auth_method private_key_jwt needs exactly one of jwks_uri and jwks")
		}
		if d.JWKSURI != "" && (!strings.HasPrefix(d.JWKSURI, "https://") || len(d.JWKSURI) > MaxIDLength) {
			return nil, problem("jwks_uri must be an https URL")
		}
	default:
		return nil, problem("token_endpoint_auth_method must be none or private_key_jwt: a document is public, so it cannot go with a secret")
	}
	if len(d.RedirectURIs) == 0 {
		return nil, problem("redirect_uris must list at least one redirect URI")
	}
	if len(d.RedirectURIs) > maxRedirectURIs {
		return nil, problem("redirect_uris lists more than %d redirect URIs", maxRedirectURIs)
	}
	var uris []string
	for _, u := range d.RedirectURIs {
		if err := redirect.ValidateRedirectURI(u); err != nil {
			return nil, problem("redirect_uris: %v", err)
		}
		if !slices.Contains(uris, u) {
			uris = append(uris, u)
		}
	}
	u, _ := url.Parse(id)
	return &Document{
		ClientID:      id,
		Host:          u.Host,
		RedirectURIs:  uris,
		ClientName:    d.ClientName,
		ClientURI:     d.ClientURI,
		LogoURI:       d.LogoURI,
		GrantTypes:    d.GrantTypes,
		ResponseTypes: d.ResponseTypes,
		Scope:         d.Scope,
		Raw:           body,
		AuthMethod:    cmpOr(d.TokenEndpointAuthMethod, "none"),
		JWKSURI:       d.JWKSURI,
		JWKS:          []byte(d.JWKS),
	}, nil
}

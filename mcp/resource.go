package mcp

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"latchkey.dev/latchkey/mcp/dpop"
)

// Keys of auth.TokenInfo.Extra that ResourceServer.Verify fills in.
const (
	// TokenInfoToken holds the access token itself, which the relay exchanges.
	TokenInfoToken = "latchkey.dev/access_token"
	// TokenInfoClientID holds the client the token was issued to (the agent).
	TokenInfoClientID = "latchkey.dev/client_id"
	// TokenInfoIssuer holds the issuer that introspection reported.
	TokenInfoIssuer = "latchkey.dev/iss"
	// TokenInfoSubjectType holds SubjectPerson, or SubjectClient for a client-only token
	// (accepted only with ResourceServer.AllowClientOnlyTokens).
	TokenInfoSubjectType = "latchkey.dev/subject_type"
)

// Who a token acts for, as Latchkey's introspection reports it in latchkey_subject_type.
const (
	// SubjectPerson: the token acts for the person in TokenInfo.UserID.
	SubjectPerson = "person"
	// SubjectClient: the token is client-only. A client got it for itself (the
	// client_credentials grant); it names no person and TokenInfo.UserID is empty.
	SubjectClient = "client"
)

// Defaults for the introspection cache.
const (
	DefaultCacheSize = 1024
	DefaultCacheTTL  = time.Minute
)

// wellKnownProtectedResource is RFC 9728's well-known suffix.
const wellKnownProtectedResource = "/.well-known/oauth-protected-resource"

// ResourceServer is the OAuth side of an MCP server whose access tokens Latchkey issues: it
// publishes protected resource metadata (RFC 9728), so clients find Latchkey; answers a request
// without a valid token with 401 and a WWW-Authenticate header naming that metadata; and
// verifies tokens by introspection (RFC 7662), accepting only active tokens issued for this
// server (Resource in aud) that act for a person.
//
// A client-only token, one a client got for itself with the client_credentials grant, names
// no person. It is refused (401 invalid_token) unless AllowClientOnlyTokens is set or
// ClientOnlyTokensFrom names its client, so a machine can never pass as a person to tools that
// act for one.
//
// Set the fields, then use Handler, or Protect and MetadataHandler separately. Do not change
// fields while serving.
type ResourceServer struct {
	// Resource is this MCP server's canonical URL, as clients name it in the "resource"
	// parameter (RFC 8707), e.g. https://mcp.example.com/mcp. Tokens must carry it in aud.
	Resource string
	// AuthorizationServer is the Latchkey project's issuer, {publicURL}/{namespace}/{project}.
	// It is published in the metadata and, when introspection reports iss, must match it.
	AuthorizationServer string
	// IntrospectionURL is the introspection endpoint; empty means AuthorizationServer +
	// "/introspect".
	IntrospectionURL string
	// ClientID and ClientSecret authenticate this server at the introspection endpoint
	// (client_secret_basic); usually the same client as the Exchanger's.
	ClientID     string
	ClientSecret string
	// ScopesSupported is published as scopes_supported.
	ScopesSupported []string
	// RequiredScopes must all be granted for every request; a token without them gets 403
	// insufficient_scope.
	RequiredScopes []string
	// ToolScopes names, by tool name, the scopes a tools/call of that tool needs on top of
	// RequiredScopes. A call whose token lacks one is refused before the tool runs with 403 and
	// WWW-Authenticate: Bearer error="insufficient_scope", scope="…", resource_metadata="…",
	// the MCP authorization specification's scope challenge: the client authorizes again with
	// that scope (step-up) and calls again. tools/list still lists every tool. Tools not named
	// here need only RequiredScopes.
	ToolScopes map[string][]string
	// AllowClientOnlyTokens also accepts client-only tokens: tokens that name no person, which a
	// client got for itself (client_credentials). Their TokenInfo has an empty UserID and
	// Extra[TokenInfoSubjectType] == SubjectClient; every handler must then act for no person
	// (and a connect link, which is made for a person, can never help). False, the default,
	// refuses them with 401 invalid_token.
	AllowClientOnlyTokens bool
	// ClientOnlyTokensFrom, when not empty, accepts client-only tokens only from these client
	// ids (the client_id introspection reports), whatever AllowClientOnlyTokens says: a
	// client-only token of any other client is refused with 401 invalid_token. Setting it is
	// enough to accept the listed clients. Name the services that call this server for
	// themselves, so that no other client the authorization server lets hold a token for this
	// URL (an OAuthClient the URL is shared with, or a registered client the Project's
	// registration policy lists it for) reaches tools that act for no person. A person's token
	// is not affected.
	ClientOnlyTokensFrom []string
	// ResourceName is published as resource_name, for display to the person.
	ResourceName string
	// HTTP is the client used to reach Latchkey; nil means http.DefaultClient.
	HTTP *http.Client
	// CacheSize bounds how many verified tokens are remembered; zero means DefaultCacheSize,
	// negative turns the cache off.
	CacheSize int
	// CacheTTL is how long a verified token is trusted without asking again; zero means
	// DefaultCacheTTL. An entry never outlives the token's own exp. A revoked token keeps
	// working here for at most this long.
	CacheTTL time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives why introspection failed; nil discards. Tokens are never logged.
	Logger *slog.Logger
	// RequireDPoP refuses bearer tokens: only DPoP-bound tokens presented with a proof
	// (RFC 9449) get through, and the metadata says dpop_bound_access_tokens_required. A
	// DPoP-bound token is always refused as a bearer token, whatever this says.
	RequireDPoP bool
	// UseOnce remembers DPoP proofs so none is accepted twice; nil keeps them in this process's
	// memory, which is enough for one replica. Several replicas should share one.
	UseOnce UseOnce

	once       sync.Once
	cache      *tokenCache
	replayOnce sync.Once
	replays    UseOnce
}

// MetadataPath is where the metadata is served: the well-known path with the resource's path
// inserted after it (RFC 9728 §3.1), e.g. /.well-known/oauth-protected-resource/mcp.
func (rs *ResourceServer) MetadataPath() string {
	u, err := url.Parse(rs.Resource)
	if err != nil {
		return wellKnownProtectedResource
	}
	return wellKnownProtectedResource + strings.TrimSuffix(u.EscapedPath(), "/")
}

// MetadataURL is the absolute URL of the metadata, as named in WWW-Authenticate.
func (rs *ResourceServer) MetadataURL() string {
	u, err := url.Parse(rs.Resource)
	if err != nil {
		return ""
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host}).String() + rs.MetadataPath()
}

// Metadata is the protected resource metadata document.
func (rs *ResourceServer) Metadata() *oauthex.ProtectedResourceMetadata {
	md := &oauthex.ProtectedResourceMetadata{
		Resource:               rs.Resource,
		BearerMethodsSupported: []string{"header"},
		ScopesSupported:        slices.Clone(rs.ScopesSupported),
		ResourceName:           rs.ResourceName,
		// What dpop.Verify accepts, exactly.
		DPOPSigningAlgValuesSupported: slices.Clone(dpop.Algorithms),
		DPOPBoundAccessTokensRequired: rs.RequireDPoP,
	}
	if rs.AuthorizationServer != "" {
		md.AuthorizationServers = []string{rs.AuthorizationServer}
	}
	return md
}

// MetadataHandler serves Metadata (GET, with CORS, as the SDK's handler does).
func (rs *ResourceServer) MetadataHandler() http.Handler {
	return auth.ProtectedResourceMetadataHandler(rs.Metadata())
}

// Protect lets a request through only with a valid token, putting the verified token info on
// the request for the MCP handler (and so on each tool call's req.Extra.TokenInfo). Otherwise
// it answers 401 with WWW-Authenticate: Bearer resource_metadata="…" (and, for a token that was
// refused, error="invalid_token" and why, RFC 6750 §3.1), or 403 insufficient_scope naming
// the scopes to ask for when the token lacks RequiredScopes, or a called tool's ToolScopes.
//
// A token bound to a key (DPoP, RFC 9449: introspection reports cnf.jkt) passes only as
// "Authorization: DPoP <token>" with a DPoP proof of this request signed by that key; refusals
// then carry a DPoP challenge (RFC 9449 §7.1). Presented as a bearer token, it is refused:
// that is what someone who copied the token without the key would do.
func (rs *ResourceServer) Protect(next http.Handler) http.Handler {
	metadataURL := rs.MetadataURL()
	// Scopes are checked here rather than by the SDK's middleware, whose 403 names no error
	// and knows nothing of tools.
	scoped, scopedDPoP := rs.scopeGate(next, false), rs.scopeGate(next, true)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if scheme, token := authScheme(r); scheme == "dpop" {
			info, err := rs.Verify(r.Context(), token, r)
			var refused *errDPoP
			switch {
			case errors.As(err, &refused):
			case errors.Is(err, auth.ErrInvalidToken):
				refused = &errDPoP{"invalid_token", strings.TrimPrefix(err.Error(), auth.ErrInvalidToken.Error()+": ")}
			}
			switch {
			case refused != nil:
				w.Header().Set("WWW-Authenticate", dpopChallenge(metadataURL, refused))
				http.Error(w, refused.code+": "+refused.desc, http.StatusUnauthorized)
				return
			case err != nil:
				rs.logger().WarnContext(r.Context(), "latchkey: DPoP request failed", "err", err)
				http.Error(w, errUnavailable.Error(), http.StatusInternalServerError)
				return
			}
			// The SDK's middleware reads only Bearer: hand it the checked token that way, so
			// it applies RequiredScopes and puts info where the MCP handler finds it.
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Bearer "+token)
			opts := &auth.RequireBearerTokenOptions{ResourceMetadataURL: metadataURL}
			checked := func(context.Context, string, *http.Request) (*auth.TokenInfo, error) { return info, nil }
			auth.RequireBearerToken(checked, opts)(scopedDPoP).ServeHTTP(w, r)
			return
		}
		// The SDK's middleware puts the token info where the MCP handler finds it, but its
		// challenge never says why a token was refused. So, per request: when Verify refuses,
		// write the full challenge here and clear the options, so that the SDK, which reads
		// them only after verifying and adds a challenge only when it has parameters, adds
		// none of its own.
		opts := &auth.RequireBearerTokenOptions{ResourceMetadataURL: metadataURL}
		verify := func(ctx context.Context, token string, req *http.Request) (*auth.TokenInfo, error) {
			info, err := rs.Verify(ctx, token, req)
			if errors.Is(err, auth.ErrInvalidToken) {
				w.Header().Set("WWW-Authenticate", invalidTokenChallenge(metadataURL, err))
				var bound *errDPoP
				if errors.As(err, &bound) {
					w.Header().Add("WWW-Authenticate", dpopChallenge("", nil))
				}
				opts.ResourceMetadataURL = ""
				return nil, err
			}
			return info, err
		}
		auth.RequireBearerToken(verify, opts)(scoped).ServeHTTP(w, r)
	})
}

// invalidTokenChallenge is RFC 6750 §3's challenge for a refused token. The description is
// this package's own text; anything that could break the quoted-string is dropped.
func invalidTokenChallenge(metadataURL string, err error) string {
	desc := strings.TrimPrefix(err.Error(), auth.ErrInvalidToken.Error()+": ")
	desc = strings.Map(func(r rune) rune {
		if r == '"' || r == '\\' || r < 0x20 || r > 0x7e {
			return -1
		}
		return r
	}, desc)
	var b strings.Builder
	b.WriteString("Bearer ")
	if metadataURL != "" {
		fmt.Fprintf(&b, "resource_metadata=%q, ", metadataURL)
	}
	fmt.Fprintf(&b, `error="invalid_token", error_description="%s"`, desc)
	return b.String()
}

// Handler serves the metadata at MetadataPath and at the bare well-known path (which some
// clients try when no WWW-Authenticate names the metadata), and passes every other request
// through Protect to next, the MCP handler. Those paths reach it only when it is mounted at the
// server root; mounted at the MCP path, also mount MetadataHandler at MetadataPath.
func (rs *ResourceServer) Handler(next http.Handler) http.Handler {
	meta := rs.MetadataHandler()
	protected := rs.Protect(next)
	path := rs.MetadataPath()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == path || r.URL.Path == wellKnownProtectedResource {
			meta.ServeHTTP(w, r)
			return
		}
		protected.ServeHTTP(w, r)
	})
}

// errUnavailable is what a client sees when Latchkey cannot answer; the detail goes to Logger.
var errUnavailable = errors.New("the authorization server cannot verify tokens right now")

// Verify is an auth.TokenVerifier: it introspects token at Latchkey and accepts it only when it
// is active, unexpired, issued for Resource, (when reported) issued by AuthorizationServer,
// and acts for a person, unless AllowClientOnlyTokens lets a client-only token through.
// Refusals wrap auth.ErrInvalidToken (401); when Latchkey cannot answer, the error does not
// (500), so a broken link to Latchkey is not mistaken for a bad token.
//
// A token bound to a key (DPoP, RFC 9449) passes only when req presents it with
// "Authorization: DPoP" and a valid proof of req signed by that key; a nil req, or a bearer
// presentation, refuses it. So whichever middleware calls Verify, a copied DPoP token without
// the key gets nothing. RequireDPoP refuses unbound tokens too.
func (rs *ResourceServer) Verify(ctx context.Context, token string, req *http.Request) (*auth.TokenInfo, error) {
	info, err := rs.verifyToken(ctx, token)
	if err != nil {
		return nil, err
	}
	jkt, _ := info.Extra[TokenInfoJKT].(string)
	scheme := ""
	if req != nil {
		scheme, _ = authScheme(req)
	}
	switch {
	case scheme == "dpop":
		if err := rs.checkProof(req, token, jkt); err != nil {
			return nil, fmt.Errorf("%w: %w", auth.ErrInvalidToken, err)
		}
	case jkt != "":
		return nil, fmt.Errorf("%w: %w", auth.ErrInvalidToken,
			&errDPoP{"invalid_token", "the access token is bound to a DPoP key; present it with Authorization: DPoP and a proof"})
	case rs.RequireDPoP:
		return nil, fmt.Errorf("%w: %w", auth.ErrInvalidToken, &errDPoP{"invalid_token", "this server accepts only DPoP-bound access tokens"})
	}
	return info, nil
}

// verifyToken is Verify without the DPoP rules: introspection, the checks, the cache.
func (rs *ResourceServer) verifyToken(ctx context.Context, token string) (*auth.TokenInfo, error) {
	now := rs.now()
	cache := rs.tokenCache()
	key := sha256.Sum256([]byte(token))
	if info, ok := cache.get(key, now); ok {
		return withToken(info, token), nil
	}
	ir, err := rs.introspect(ctx, token)
	if err != nil {
		rs.logger().WarnContext(ctx, "latchkey: token introspection failed", "err", err)
		return nil, errUnavailable
	}
	info, until, err := rs.accept(ir, now)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", auth.ErrInvalidToken, err)
	}
	cache.put(key, info, until, now)
	return withToken(info, token), nil
}

func (rs *ResourceServer) now() time.Time {
	if rs.Now != nil {
		return rs.Now()
	}
	return time.Now()
}

func (rs *ResourceServer) logger() *slog.Logger {
	if rs.Logger != nil {
		return rs.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func (rs *ResourceServer) tokenCache() *tokenCache {
	rs.once.Do(func() {
		size := rs.CacheSize
		if size == 0 {
			size = DefaultCacheSize
		}
		ttl := rs.CacheTTL
		if ttl <= 0 {
			ttl = DefaultCacheTTL
		}
		rs.cache = newTokenCache(size, ttl)
	})
	return rs.cache
}

// introspection is an RFC 7662 answer, with the members Latchkey sends.
type introspection struct {
	Active    bool     `json:"active"`
	Scope     string   `json:"scope"`
	ClientID  string   `json:"client_id"`
	TokenType string   `json:"token_type"`
	Exp       int64    `json:"exp"`
	Nbf       int64    `json:"nbf"`
	Sub       string   `json:"sub"`
	Aud       audience `json:"aud"`
	Iss       string   `json:"iss"`
	// SubjectType is Latchkey's latchkey_subject_type: "person" or "client".
	SubjectType string `json:"latchkey_subject_type"`
	// Cnf names the key a DPoP-bound token is bound to (RFC 9449 §6.2).
	Cnf struct {
		JKT string `json:"jkt"`
	} `json:"cnf"`
}

// clientOnly reports whether the token names no person. Latchkey says so in
// latchkey_subject_type and leaves sub out; an authorization server that follows RFC 9068 §2.2
// instead puts the client id in sub, which is just as much not a person.
func (ir *introspection) clientOnly() bool {
	return ir.SubjectType == SubjectClient || ir.Sub == "" || (ir.ClientID != "" && ir.Sub == ir.ClientID)
}

// audience is aud as a list; RFC 7662 allows a single string too.
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*a = audience{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("aud is neither a string nor a list of strings")
	}
	*a = many
	return nil
}

func (rs *ResourceServer) introspect(ctx context.Context, token string) (*introspection, error) {
	endpoint := rs.IntrospectionURL
	if endpoint == "" {
		if rs.AuthorizationServer == "" {
			return nil, errors.New("neither IntrospectionURL nor AuthorizationServer is set")
		}
		endpoint = strings.TrimSuffix(rs.AuthorizationServer, "/") + "/introspect"
	}
	form := url.Values{"token": {token}, "token_type_hint": {"access_token"}}
	status, body, err := postForm(ctx, rs.HTTP, endpoint, rs.ClientID, rs.ClientSecret, form)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		// 401 here means this server's own credentials were refused: an operator's problem,
		// not the caller's.
		return nil, fmt.Errorf("introspection answered %d: %s", status, oauthErrorCode(body))
	}
	var ir introspection
	if err := json.Unmarshal(body, &ir); err != nil {
		return nil, fmt.Errorf("introspection answer: %w", err)
	}
	return &ir, nil
}

func oauthErrorCode(body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	return e.Error
}

// accept applies the checks that make a token good for this server, and says how long the
// answer may be remembered.
func (rs *ResourceServer) accept(ir *introspection, now time.Time) (*auth.TokenInfo, time.Time, error) {
	if !ir.Active {
		return nil, time.Time{}, errors.New("token is not active")
	}
	clientOnly := ir.clientOnly()
	if clientOnly && len(rs.ClientOnlyTokensFrom) > 0 && !slices.Contains(rs.ClientOnlyTokensFrom, ir.ClientID) {
		return nil, time.Time{}, errors.New("the token names no person, and this server accepts such tokens only from the clients it names")
	}
	if clientOnly && len(rs.ClientOnlyTokensFrom) == 0 && !rs.AllowClientOnlyTokens {
		return nil, time.Time{}, errors.New("the token names no person: a client got it for itself (client_credentials), and this server acts only for people")
	}
	if ir.Exp <= 0 {
		return nil, time.Time{}, errors.New("token has no expiry")
	}
	exp := time.Unix(ir.Exp, 0)
	if !now.Before(exp) {
		return nil, time.Time{}, errors.New("token has expired")
	}
	if ir.Nbf > 0 && now.Before(time.Unix(ir.Nbf, 0)) {
		return nil, time.Time{}, errors.New("token is not valid yet")
	}
	if !slices.Contains(ir.Aud, rs.Resource) {
		// The confused-deputy guard: a token another MCP server received must not work here.
		return nil, time.Time{}, errors.New("token was not issued for this server")
	}
	if ir.Iss != "" && rs.AuthorizationServer != "" && ir.Iss != rs.AuthorizationServer {
		return nil, time.Time{}, errors.New("token was issued by another authorization server")
	}
	if !bearerType(ir.TokenType) {
		return nil, time.Time{}, errors.New("token is not an access token")
	}
	info := &auth.TokenInfo{
		Scopes:     strings.Fields(ir.Scope),
		Expiration: exp,
		UserID:     ir.Sub,
		Extra: map[string]any{
			TokenInfoClientID:    ir.ClientID,
			TokenInfoIssuer:      ir.Iss,
			TokenInfoSubjectType: SubjectPerson,
		},
	}
	if clientOnly {
		info.UserID = ""
		info.Extra[TokenInfoSubjectType] = SubjectClient
	}
	if ir.Cnf.JKT != "" {
		info.Extra[TokenInfoJKT] = ir.Cnf.JKT
	}
	return info, exp, nil
}

// bearerType accepts an absent token_type and the ways servers name an access token; anything
// else (a refresh token above all) is not a bearer credential for this server.
func bearerType(t string) bool {
	switch strings.ToLower(t) {
	case "", "bearer", "dpop", "access_token", TokenTypeAccessToken:
		return true
	}
	return false
}

// withToken returns a copy of info carrying the token, so cached entries never hold it and
// callers cannot change what the cache holds.
func withToken(info *auth.TokenInfo, token string) *auth.TokenInfo {
	c := *info
	c.Scopes = slices.Clone(info.Scopes)
	c.Extra = maps.Clone(info.Extra)
	if c.Extra == nil {
		c.Extra = map[string]any{}
	}
	c.Extra[TokenInfoToken] = token
	return &c
}

// tokenCache remembers verified tokens by hash: least recently used out first, each entry until
// the earlier of its TTL and the token's expiry.
type tokenCache struct {
	size int
	ttl  time.Duration

	mu      sync.Mutex
	order   *list.List // front: most recently used
	entries map[[32]byte]*list.Element
}

type cacheEntry struct {
	key   [32]byte
	info  *auth.TokenInfo
	until time.Time
}

func newTokenCache(size int, ttl time.Duration) *tokenCache {
	return &tokenCache{size: size, ttl: ttl, order: list.New(), entries: map[[32]byte]*list.Element{}}
}

func (c *tokenCache) get(key [32]byte, now time.Time) (*auth.TokenInfo, bool) {
	if c.size <= 0 {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[key]
	if !ok {
		return nil, false
	}
	e := el.Value.(*cacheEntry)
	if !now.Before(e.until) {
		c.order.Remove(el)
		delete(c.entries, key)
		return nil, false
	}
	c.order.MoveToFront(el)
	return e.info, true
}

func (c *tokenCache) put(key [32]byte, info *auth.TokenInfo, exp, now time.Time) {
	if c.size <= 0 {
		return
	}
	until := now.Add(c.ttl)
	if exp.Before(until) {
		until = exp
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[key]; ok {
		el.Value = &cacheEntry{key: key, info: info, until: until}
		c.order.MoveToFront(el)
		return
	}
	c.entries[key] = c.order.PushFront(&cacheEntry{key: key, info: info, until: until})
	for c.order.Len() > c.size {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.entries, oldest.Value.(*cacheEntry).key)
	}
}

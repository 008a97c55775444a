// Package upstream is Latchkey's side of a person's connection to another service (GitHub, or any
// OAuth 2.0 / OIDC provider): building the authorization URL, exchanging the code, reading which
// account was connected, and keeping the service's tokens sealed and fresh (Vault).
//
// The HTTP handlers that start a connection and receive the callback, bound to the browser that
// started it (docs/connectors-for-admins.md), live in the webhook packages; this package holds what
// they call, and knows nothing of browsers or cookies.
package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/oauth2"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/tracing"
)

var (
	// ErrReconnect: the service no longer accepts this connection's tokens; the person must
	// connect again (a "reconnect" link). The connection has been marked broken.
	ErrReconnect = errors.New("upstream: the service rejected the connection's tokens; reconnect required")
	// ErrTimeout: the service did not answer in time. Nothing was changed; asking again may work.
	ErrTimeout = errors.New("upstream: the service did not answer in time")
	// ErrService: the service refused the request or answered something unusable. When the
	// service said why, its *oauth2.RetrieveError is in the chain too (errors.As), so a caller
	// can tell a bad authorization code from a refused client secret. The error's text never
	// includes what the service sent (see Status for what a log may say).
	ErrService = errors.New("upstream: the service refused the request")
	// ErrNotAllowed: an endpoint of the connector resolves to an address that is not public
	// (loopback, a private or link-local range such as cloud metadata) and the Project does not
	// allow it in spec.upstreamNetwork. Nothing was sent: the connection was refused at dial time.
	ErrNotAllowed = errors.New("upstream: the service's address is not allowed")
	// ErrIssuer: the authorization response names another issuer than the connector's, or lacks
	// one that the service promises to send (RFC 9207).
	ErrIssuer = errors.New("upstream: the authorization response came from another issuer")
)

// DefaultTimeout bounds every call to a service when no other timeout is configured.
const DefaultTimeout = 10 * time.Second

// maxBody bounds what is read from a service's userinfo or revocation answer.
const maxBody = 1 << 20

// Account is the account at the service that a connection is for.
type Account struct {
	// ID is the service's stable identifier (GitHub's numeric user id, an OIDC "sub").
	ID string
	// Name is what the service calls the account for people (the GitHub login), shown on the
	// account page so a person can spot a wrong account.
	Name string
}

// reserved are the authorization parameters Latchkey owns; a connector's AuthParams or a query
// already in its AuthURL cannot set them, so nothing configured can move the callback elsewhere.
var reserved = map[string]bool{
	"response_type": true, "client_id": true, "redirect_uri": true, "scope": true, "state": true,
	"code_challenge": true, "code_challenge_method": true,
}

// AuthURL builds the URL that sends the person to the service. redirect_uri is always
// c.CallbackURL: the connector's fixed callback, never anything from a request. The PKCE S256
// challenge of verifier is included when c.PKCE is set. The scopes go in c.ScopeParam, joined
// by c.ScopeSeparator (RFC 6749's "scope" and " " when unset). Reserved parameters
// (redirect_uri, client_id, response_type, scope and c.ScopeParam, state, code_challenge*)
// cannot be set through AuthParams or a query in c.AuthURL. It returns "" only if c.AuthURL does not parse (controllers reject
// such connectors).
func AuthURL(c *config.Connector, state, verifier string) string {
	u, err := url.Parse(c.AuthURL)
	if err != nil {
		// Controllers validate AuthURL; an unparseable one must not become a redirect.
		return ""
	}
	q := u.Query()
	for k := range q {
		if reserved[k] {
			q.Del(k)
		}
	}
	scopeParam := orDefault(c.ScopeParam, "scope")
	q.Del(scopeParam)
	for k, v := range c.AuthParams {
		if !reserved[k] && k != scopeParam {
			q.Set(k, v)
		}
	}
	q.Set("response_type", "code")
	q.Set("client_id", c.ClientID)
	q.Set("redirect_uri", c.CallbackURL)
	if len(c.Scopes) > 0 {
		q.Set(scopeParam, strings.Join(c.Scopes, orDefault(c.ScopeSeparator, " ")))
	}
	q.Set("state", state)
	if c.PKCE {
		q.Set("code_challenge", oauth2.S256ChallengeFromVerifier(verifier))
		q.Set("code_challenge_method", "S256")
	}
	u.RawQuery = q.Encode()
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// NewVerifier returns a fresh PKCE code verifier (RFC 7636, 32 random bytes).
func NewVerifier() string { return oauth2.GenerateVerifier() }

// oauthConfig is the x/oauth2 view of a connector. Client credentials go where c.TokenAuth
// says: in the request body unless it says otherwise (every GitHub-like service accepts that),
// in a Basic header for client_secret_basic, only client_id for none, and client_id with a
// signed client assertion for private_key_jwt (RFC 7523, added by the dialect). The style is fixed,
// never guessed by x/oauth2's trial of both, so a secret goes only where the service wants it.
func oauthConfig(c *config.Connector) *oauth2.Config {
	style, secret := oauth2.AuthStyleInParams, c.ClientSecret
	switch c.TokenAuth {
	case config.TokenAuthBasic:
		style = oauth2.AuthStyleInHeader
	case config.TokenAuthNone, config.TokenAuthPrivateKeyJWT:
		// private_key_jwt: the dialect transport adds the client assertion to the form.
		secret = ""
	}
	return &oauth2.Config{
		ClientID:     c.ClientID,
		ClientSecret: secret,
		Endpoint:     oauth2.Endpoint{AuthURL: c.AuthURL, TokenURL: c.TokenURL, AuthStyle: style},
		RedirectURL:  c.CallbackURL,
		Scopes:       c.Scopes,
	}
}

// Exchange swaps an authorization code (with its PKCE verifier) for tokens and reads which
// account they are for: from the verified ID token when the connector has an OIDC issuer,
// otherwise from the userinfo endpoint's JSON fields AccountIDField and AccountNameField
// (strings or numbers; a dotted name reaches into nested objects). The token request carries
// redirect_uri = c.CallbackURL, as the authorization request did.
//
// Every call dials through the connector's address guard (AllowedNetworks). Errors: ErrNotAllowed
// when an endpoint's address is not allowed (nothing was sent); ErrTimeout when the service does
// not answer before ctx's deadline (DefaultTimeout when ctx has none); ErrService otherwise, with the service's *oauth2.RetrieveError in the
// chain when it gave a reason (a spent or foreign code is "bad_verification_code" at GitHub,
// "invalid_grant" elsewhere).
func Exchange(ctx context.Context, hc *http.Client, c *config.Connector, code, verifier string) (acct Account, tok *oauth2.Token, err error) {
	ctx, span := tracing.Start(ctx, "upstream code exchange", trace.WithAttributes(attribute.String("latchkey.connector", c.Key)))
	defer func() {
		if err != nil {
			tracing.Fail(span, "failed")
		}
		span.End()
	}()
	return exchange(ctx, hc, c, code, verifier)
}

func exchange(ctx context.Context, hc *http.Client, c *config.Connector, code, verifier string) (Account, *oauth2.Token, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	ctx, err := withClient(ctx, hc, c)
	if err != nil {
		return Account{}, nil, classify(ctx, "token endpoint", err)
	}
	var opts []oauth2.AuthCodeOption
	if verifier != "" {
		opts = append(opts, oauth2.VerifierOption(verifier))
	}
	tok, err := oauthConfig(c).Exchange(ctx, code, opts...)
	if err != nil {
		return Account{}, nil, classify(ctx, "token endpoint", err)
	}
	var acct Account
	if c.OIDCIssuer != "" {
		acct, err = accountFromIDToken(ctx, c, tok)
	} else {
		acct, err = accountFromUserInfo(ctx, c, tok)
	}
	if err != nil {
		return Account{}, nil, err
	}
	return acct, tok, nil
}

func accountFromIDToken(ctx context.Context, c *config.Connector, tok *oauth2.Token) (Account, error) {
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return Account{}, fail(ErrService, "no id_token in the token response", nil)
	}
	if c.TenantClaim != "" {
		claims, err := verifyTenantIDToken(ctx, c, raw)
		if err != nil {
			return Account{}, err
		}
		return accountFrom(claims, orDefault(c.AccountIDField, "sub"), c.AccountNameField, "preferred_username", "email", "name")
	}
	p, err := oidc.NewProvider(ctx, c.OIDCIssuer)
	if err != nil {
		return Account{}, classify(ctx, "OIDC discovery", err)
	}
	idt, err := p.VerifierContext(ctx, &oidc.Config{ClientID: c.ClientID}).Verify(ctx, raw)
	if err != nil {
		return Account{}, classify(ctx, "id_token verification", err)
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return Account{}, fail(ErrService, "id_token claims are not a JSON object", nil)
	}
	return accountFrom(claims, orDefault(c.AccountIDField, "sub"), c.AccountNameField, "preferred_username", "email", "name")
}

func accountFromUserInfo(ctx context.Context, c *config.Connector, tok *oauth2.Token) (Account, error) {
	if c.UserInfoURL == "" {
		return Account{}, fail(ErrService, "the connector has neither a userinfo endpoint nor an OIDC issuer", nil)
	}
	method := http.MethodGet
	var body io.Reader
	if c.UserInfoMethod == http.MethodPost || c.UserInfoBody != "" {
		method = http.MethodPost
		body = strings.NewReader(c.UserInfoBody)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.UserInfoURL, body)
	if err != nil {
		return Account{}, fail(ErrService, "userinfo: the URL is not usable", nil)
	}
	tok.SetAuthHeader(req)
	req.Header.Set("Accept", "application/json")
	if c.UserInfoBody != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := ctx.Value(oauth2.HTTPClient).(*http.Client).Do(req)
	if err != nil {
		return Account{}, classify(ctx, "userinfo", err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return Account{}, classify(ctx, "userinfo", err)
	}
	if resp.StatusCode != http.StatusOK {
		return Account{}, classify(ctx, "userinfo", &statusError{resp.StatusCode})
	}
	var fields map[string]any
	dec := json.NewDecoder(bytes.NewReader(answer))
	dec.UseNumber()
	if err := dec.Decode(&fields); err != nil {
		return Account{}, fail(ErrService, "userinfo is not a JSON object", nil)
	}
	return accountFrom(fields, orDefault(c.AccountIDField, "id"), c.AccountNameField, "login", "preferred_username", "email", "name")
}

// accountFrom reads the account id and name from decoded JSON. Field names may be dotted paths
// into nested objects ("data.user.id"). The name falls back through the usual fields, then to
// the id, so the account page always has something to show.
func accountFrom(fields map[string]any, idField, nameField string, fallbacks ...string) (Account, error) {
	id := scalar(lookup(fields, idField))
	if id == "" {
		return Account{}, fail(ErrService, fmt.Sprintf("the account has no %q", idField), nil)
	}
	name := ""
	for _, f := range append([]string{nameField}, fallbacks...) {
		if f == "" {
			continue
		}
		if name = scalar(lookup(fields, f)); name != "" {
			break
		}
	}
	if name == "" {
		name = id
	}
	return Account{ID: id, Name: name}, nil
}

func lookup(m map[string]any, path string) any {
	if v, ok := m[path]; ok {
		return v // a claim whose name contains dots, such as a namespaced URL
	}
	var v any = m
	for _, part := range strings.Split(path, ".") {
		obj, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = obj[part]
	}
	return v
}

// scalar renders a JSON string or number as text; numbers keep their exact digits (GitHub's ids
// exceed what a float64 would print faithfully in some encodings).
func scalar(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	}
	return ""
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// isTimeout reports whether err (or ctx) says the service did not answer before the deadline.
func isTimeout(ctx context.Context, err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// CheckIssuer applies RFC 9207 to an authorization response that arrived at c's callback: iss
// is the response's iss parameter and present says whether it was sent at all. It protects
// against a mix-up, where a response from one service is handed to another's token endpoint.
//
// A connector that knows its issuer (OIDC) needs iss, when sent, to equal it exactly. A missing
// iss is refused only when the service's discovery document promises to send one
// (authorization_response_iss_parameter_supported); reading that document dials through the
// connector's address guard, and happens only then. A connector without an issuer (the github
// preset) has nothing to compare with and accepts any response: its own callback URL, which no
// other connector shares, is what keeps responses apart there.
//
// A connector whose issuer is templated by tenant (TenantClaim, Microsoft's common and
// organizations) needs iss to be the discovered issuer of a tenant it admits; the ID token then
// pins the tenant.
//
// Errors: ErrIssuer when the response fails the check; otherwise what reading the discovery
// document failed with (ErrNotAllowed, ErrTimeout, ErrService).
func CheckIssuer(ctx context.Context, hc *http.Client, c *config.Connector, iss string, present bool) error {
	if c.OIDCIssuer == "" {
		return nil
	}
	if c.TenantClaim != "" {
		return checkTenantIssuer(ctx, hc, c, iss, present)
	}
	if present {
		if iss != c.OIDCIssuer {
			return fail(ErrIssuer, "the response's iss is not the connector's issuer", nil)
		}
		return nil
	}
	promised, err := promisesISS(ctx, hc, c)
	if err != nil {
		return err
	}
	if promised {
		return fail(ErrIssuer, "the response has no iss, though the service's metadata says it sends one", nil)
	}
	return nil
}

// issPromiseTTL is how long what an issuer's discovery document says about iss is remembered, so
// requests to a callback cannot make the server fetch the document on every one of them.
const issPromiseTTL = 10 * time.Minute

type issPromise struct {
	promised bool
	until    time.Time
}

// issPromises caches promisesISS by issuer (and address allowance). Issuers come from the
// compiled configuration, so the map is as large as the set of connectors.
var issPromises sync.Map

// promisesISS reads whether c's issuer sends iss in its authorization responses
// (authorization_response_iss_parameter_supported), through the connector's address guard.
func promisesISS(ctx context.Context, hc *http.Client, c *config.Connector) (bool, error) {
	key := c.OIDCIssuer + "\x00" + fmt.Sprint(c.AllowedNetworks)
	if v, ok := issPromises.Load(key); ok && time.Now().Before(v.(issPromise).until) {
		return v.(issPromise).promised, nil
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	ctx, err := withClient(ctx, hc, c)
	if err != nil {
		return false, classify(ctx, "OIDC discovery", err)
	}
	p, err := oidc.NewProvider(ctx, c.OIDCIssuer)
	if err != nil {
		return false, classify(ctx, "OIDC discovery", err)
	}
	var md struct {
		ISSSupported bool `json:"authorization_response_iss_parameter_supported"`
	}
	if err := p.Claims(&md); err != nil {
		return false, fail(ErrService, "OIDC discovery: the document is not a JSON object", nil)
	}
	issPromises.Store(key, issPromise{promised: md.ISSSupported, until: time.Now().Add(issPromiseTTL)})
	return md.ISSSupported, nil
}

// withDefaultTimeout gives ctx DefaultTimeout when it has no deadline of its own: a service that
// never answers must not hold a person's request for ever.
func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, DefaultTimeout)
}

// AnotherAccount adds to an authorization URL made by AuthURL what asks c's service to let the
// person pick another account than the one signed in there (c.SelectAccountParams, a prompt
// joining the prompt already asked for), and, when hint is not empty and the service takes
// one, the account to suggest (c.AccountHintParam). A service that has neither gets the URL
// unchanged and reuses its signed-in session (docs/several-accounts.md).
func AnotherAccount(authURL string, c *config.Connector, selectAccount bool, hint string) string {
	if authURL == "" || (!selectAccount || len(c.SelectAccountParams) == 0) && (hint == "" || c.AccountHintParam == "") {
		return authURL
	}
	u, err := url.Parse(authURL)
	if err != nil {
		return ""
	}
	q := u.Query()
	if selectAccount {
		for k, v := range c.SelectAccountParams {
			if reserved[k] {
				continue
			}
			if k == "prompt" && q.Get(k) != "" {
				prompts := strings.Fields(q.Get(k))
				for _, p := range strings.Fields(v) {
					if !slices.Contains(prompts, p) {
						prompts = append(prompts, p)
					}
				}
				v = strings.Join(prompts, " ")
			}
			q.Set(k, v)
		}
	}
	if hint != "" && c.AccountHintParam != "" && !reserved[c.AccountHintParam] {
		q.Set(c.AccountHintParam, hint)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

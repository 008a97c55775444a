// Package upstream is Latchkey's side of a person's connection to another service (GitHub, or any
// OAuth 2.0 / OIDC provider): building the authorization URL, exchanging the code, reading which
// account was connected, and keeping the service's tokens sealed and fresh (Vault).
//
// The HTTP handlers that start a connection and receive the callback (seed 002) live in the
// webhook packages; this package holds what they call, and knows nothing of browsers or cookies.
package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"latchkey.dev/latchkey/internal/config"
)

var (
	// ErrReconnect: the service no longer accepts this connection's tokens; the person must
	// connect again (a "reconnect" link). The connection has been marked broken.
	ErrReconnect = errors.New("upstream: the service rejected the connection's tokens; reconnect required")
	// ErrTimeout: the service did not answer in time. Nothing was changed; asking again may work.
	ErrTimeout = errors.New("upstream: the service did not answer in time")
	// ErrService: the service refused the request or answered something unusable. When the
	// service said why, its *oauth2.RetrieveError is in the chain too (errors.As), so a caller
	// can tell a bad authorization code from a refused client secret.
	ErrService = errors.New("upstream: the service refused the request")
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
// challenge of verifier is included when c.PKCE is set. Reserved parameters (redirect_uri,
// client_id, response_type, scope, state, code_challenge*) cannot be set through AuthParams or
// a query in c.AuthURL. It returns "" only if c.AuthURL does not parse (controllers reject
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
	for k, v := range c.AuthParams {
		if !reserved[k] {
			q.Set(k, v)
		}
	}
	q.Set("response_type", "code")
	q.Set("client_id", c.ClientID)
	q.Set("redirect_uri", c.CallbackURL)
	if len(c.Scopes) > 0 {
		q.Set("scope", strings.Join(c.Scopes, " "))
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

// oauthConfig is the x/oauth2 view of a connector. Client credentials go in the request body:
// every GitHub-like service accepts that, and several (Slack among them) accept nothing else.
func oauthConfig(c *config.Connector) *oauth2.Config {
	return &oauth2.Config{
		ClientID:     c.ClientID,
		ClientSecret: c.ClientSecret,
		Endpoint:     oauth2.Endpoint{AuthURL: c.AuthURL, TokenURL: c.TokenURL, AuthStyle: oauth2.AuthStyleInParams},
		RedirectURL:  c.CallbackURL,
		Scopes:       c.Scopes,
	}
}

// withClient puts hc where x/oauth2 and go-oidc look for their HTTP client, and makes every
// token request ask for JSON (GitHub answers form-encoded otherwise).
func withClient(ctx context.Context, hc *http.Client) context.Context {
	if hc == nil {
		hc = http.DefaultClient
	}
	cp := *hc
	base := cp.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	cp.Transport = acceptJSON{base}
	ctx = context.WithValue(ctx, oauth2.HTTPClient, &cp)
	return oidc.ClientContext(ctx, &cp)
}

type acceptJSON struct{ base http.RoundTripper }

func (a acceptJSON) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("Accept") == "" {
		r = r.Clone(r.Context())
		r.Header.Set("Accept", "application/json")
	}
	return a.base.RoundTrip(r)
}

// Exchange swaps an authorization code (with its PKCE verifier) for tokens and reads which
// account they are for: from the verified ID token when the connector has an OIDC issuer,
// otherwise from the userinfo endpoint's JSON fields AccountIDField and AccountNameField
// (strings or numbers; a dotted name reaches into nested objects). The token request carries
// redirect_uri = c.CallbackURL, as the authorization request did.
//
// Errors: ErrTimeout when the service does not answer before ctx's deadline (DefaultTimeout
// when ctx has none); ErrService otherwise, with the service's *oauth2.RetrieveError in the
// chain when it gave a reason (a spent or foreign code is "bad_verification_code" at GitHub,
// "invalid_grant" elsewhere).
func Exchange(ctx context.Context, hc *http.Client, c *config.Connector, code, verifier string) (Account, *oauth2.Token, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	ctx = withClient(ctx, hc)
	var opts []oauth2.AuthCodeOption
	if verifier != "" {
		opts = append(opts, oauth2.VerifierOption(verifier))
	}
	tok, err := oauthConfig(c).Exchange(ctx, code, opts...)
	if err != nil {
		return Account{}, nil, classify(ctx, err)
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
		return Account{}, fmt.Errorf("%w: no id_token in the token response", ErrService)
	}
	p, err := oidc.NewProvider(ctx, c.OIDCIssuer)
	if err != nil {
		return Account{}, classify(ctx, fmt.Errorf("%w: discovery: %v", ErrService, err))
	}
	idt, err := p.VerifierContext(ctx, &oidc.Config{ClientID: c.ClientID}).Verify(ctx, raw)
	if err != nil {
		return Account{}, classify(ctx, fmt.Errorf("%w: id_token: %v", ErrService, err))
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return Account{}, fmt.Errorf("%w: id_token claims: %v", ErrService, err)
	}
	return accountFrom(claims, orDefault(c.AccountIDField, "sub"), c.AccountNameField, "preferred_username", "email", "name")
}

func accountFromUserInfo(ctx context.Context, c *config.Connector, tok *oauth2.Token) (Account, error) {
	if c.UserInfoURL == "" {
		return Account{}, fmt.Errorf("%w: the connector has neither a userinfo endpoint nor an OIDC issuer", ErrService)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.UserInfoURL, nil)
	if err != nil {
		return Account{}, fmt.Errorf("%w: userinfo: %v", ErrService, err)
	}
	tok.SetAuthHeader(req)
	req.Header.Set("Accept", "application/json")
	resp, err := ctx.Value(oauth2.HTTPClient).(*http.Client).Do(req)
	if err != nil {
		return Account{}, classify(ctx, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return Account{}, classify(ctx, err)
	}
	if resp.StatusCode != http.StatusOK {
		return Account{}, fmt.Errorf("%w: userinfo answered %d", ErrService, resp.StatusCode)
	}
	var fields map[string]any
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	if err := dec.Decode(&fields); err != nil {
		return Account{}, fmt.Errorf("%w: userinfo is not a JSON object", ErrService)
	}
	return accountFrom(fields, orDefault(c.AccountIDField, "id"), c.AccountNameField, "login", "preferred_username", "email", "name")
}

// accountFrom reads the account id and name from decoded JSON. Field names may be dotted paths
// into nested objects ("data.user.id"). The name falls back through the usual fields, then to
// the id, so the account page always has something to show.
func accountFrom(fields map[string]any, idField, nameField string, fallbacks ...string) (Account, error) {
	id := scalar(lookup(fields, idField))
	if id == "" {
		return Account{}, fmt.Errorf("%w: the account has no %q", ErrService, idField)
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

// classify turns transport failures into ErrTimeout and leaves the rest wrapped as they are.
func classify(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrTimeout) {
		return err
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return fmt.Errorf("%w: %v", ErrTimeout, err)
	}
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		return fmt.Errorf("%w: %w", ErrService, re)
	}
	return err
}

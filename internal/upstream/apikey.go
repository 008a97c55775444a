package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/oauth2"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/tracing"
)

// ErrKeyRejected: the service answered the check call of an API-key connector with 401 or 403:
// the key is wrong, revoked, or lacks the permissions the call needs. Nothing is kept.
var ErrKeyRejected = errors.New("upstream: the service did not accept the key")

// MaxAPIKey bounds a pasted key. Keys and personal access tokens of the services people use are
// well under this (GitHub's fine-grained tokens are 93 characters, JWT-shaped keys about 1000).
const MaxAPIKey = 4096

// ValidAPIKey reports whether key can be sent in an HTTP header at all: 1 to MaxAPIKey visible
// ASCII characters, no spaces. Anything else is refused before the service is called, so a
// pasted line break can never add a header of its own.
func ValidAPIKey(key string) bool {
	if key == "" || len(key) > MaxAPIKey {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] <= ' ' || key[i] > '~' {
			return false
		}
	}
	return true
}

// CheckAPIKey makes the one call c.APIKey declares with key and returns the account the
// service says the key belongs to (c.APIKey.IDField and NameField of its JSON answer).
//
// The key goes only in c.APIKey.Header, never in the URL. The call dials through the
// connector's address guard, like every call to a service (ErrNotAllowed when the address is
// not allowed; nothing was sent). Redirects are not followed: a header of the service's own
// (X-Api-Key) would otherwise travel to wherever the redirect points. Errors: ErrKeyRejected
// for 401 or 403; ErrTimeout; ErrService for anything else, with the HTTP status only. No
// error's text holds the key or what the service sent.
func CheckAPIKey(ctx context.Context, hc *http.Client, c *config.Connector, key string) (acct Account, err error) {
	ctx, span := tracing.Start(ctx, "upstream api key check", trace.WithAttributes(attribute.String("latchkey.connector", c.Key)))
	defer func() {
		if err != nil {
			tracing.Fail(span, "failed")
		}
		span.End()
	}()
	k := c.APIKey
	if k == nil {
		return Account{}, fail(ErrService, "the connector takes no API key", nil)
	}
	if !ValidAPIKey(key) {
		return Account{}, fail(ErrKeyRejected, "the key is not printable ASCII of a usable length", nil)
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	cl, err := client(hc, c)
	if err != nil {
		return Account{}, classify(ctx, "API key check", err)
	}
	cl.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	var body io.Reader
	if k.Method == http.MethodPost {
		body = http.NoBody
	}
	req, err := http.NewRequestWithContext(ctx, k.Method, k.CheckURL, body)
	if err != nil {
		return Account{}, fail(ErrService, "API key check: the URL is not usable", nil)
	}
	req.Header.Set(k.Header, k.HeaderValue(key))
	resp, err := cl.Do(req)
	if err != nil {
		return Account{}, classify(ctx, "API key check", err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return Account{}, classify(ctx, "API key check", err)
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return Account{}, fail(ErrKeyRejected, "API key check: "+(&statusError{resp.StatusCode}).Error(), &statusError{resp.StatusCode})
	case resp.StatusCode != http.StatusOK:
		return Account{}, classify(ctx, "API key check", &statusError{resp.StatusCode})
	}
	var fields map[string]any
	dec := json.NewDecoder(bytes.NewReader(answer))
	dec.UseNumber()
	if err := dec.Decode(&fields); err != nil {
		return Account{}, fail(ErrService, "API key check: the answer is not a JSON object", nil)
	}
	return accountFrom(fields, k.IDField, k.NameField, "login", "email", "username")
}

// SealAPIKey stores key in conn sealed, as Seal stores an OAuth token: no refresh token and no
// expiry, since a key lives until the person or the service ends it. Its token type is Bearer
// when c sends it as a bearer token, N_A otherwise (RFC 8693 §2.2.1).
func (v *Vault) SealAPIKey(conn *store.Connection, c *config.Connector, key string) {
	tt := "N_A"
	if c.APIKey != nil && c.APIKey.Bearer() {
		tt = "Bearer"
	}
	v.Seal(conn, &oauth2.Token{AccessToken: key, TokenType: tt})
	conn.Expiry, conn.Scopes = nil, nil
}

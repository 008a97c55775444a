package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/oauth2"
	"golang.org/x/sync/singleflight"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/tracing"
)

// expirySkew treats a token as expired this long before the service would, so a token handed to
// an agent does not die on its way to the service.
const expirySkew = 30 * time.Second

// ConnectionStore is the part of the store the vault reads and refreshes connections through.
type ConnectionStore interface {
	GetConnection(ctx context.Context, project, id string) (store.Connection, error)
	UpdateConnection(ctx context.Context, project, id string, fn func(store.Connection) (store.Connection, error)) (store.Connection, error)
}

// Vault keeps upstream tokens sealed at rest and fresh on demand.
//
// Tokens are sealed with the Keyring's primary key and the key id is stored in the row, so a
// new primary key takes over without downtime: old rows still open with the key that sealed
// them and are re-sealed with the primary on their next refresh.
//
// Refreshing is serialised per connection twice over: within one process by a singleflight (so
// fifty waiting requests do not queue fifty transactions on the database), and across replicas
// by store.UpdateConnection's row lock, inside which the expiry is checked again. A service
// that rotates refresh tokens therefore sees one refresh, and the rotated token is never lost.
type Vault struct {
	Store   ConnectionStore
	Keyring *secret.Keyring
	// HTTP is the client for calls to services; nil uses http.DefaultClient. Its transport (an
	// *http.Transport, or nil for the default) is used through each connector's address guard.
	HTTP *http.Client
	// Now is the clock; nil uses time.Now.
	Now func() time.Time
	// Timeout bounds each call to a service; 0 means DefaultTimeout.
	Timeout time.Duration
	// OnRefresh, when set, is told of every refresh asked of a service: the connector's key and
	// the result, one of "ok", "rejected" (the person must reconnect), "timeout" or "error".
	// Metrics use it (internal/metrics.Metrics.UpstreamRefresh).
	OnRefresh func(connector, result string)

	flight singleflight.Group
}

func (v *Vault) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

func (v *Vault) timeout() time.Duration {
	if v.Timeout > 0 {
		return v.Timeout
	}
	return DefaultTimeout
}

// purpose binds a sealed token to its row, so a sealed value copied into another row (or used
// as another kind of secret) does not open. The binding uses the row's natural key rather than
// its id: SaveConnection keeps the existing id when a person reconnects the same account, so
// the id is not known for certain when the token is sealed, while project, person, connector
// and account id are, and together they identify the row just as uniquely.
func purpose(kind string, c *store.Connection) string {
	return strings.Join([]string{"latchkey/upstream-" + kind, c.Project, c.Subject, c.Connector, c.AccountID}, "\x00")
}

// Seal stores tok in conn, sealed: AccessToken, RefreshToken (nil when tok has none), KeyID,
// TokenType, Expiry, and Scopes when the service said which it granted. conn's Project,
// Subject, Connector and AccountID must already be set; they are bound into the seal.
func (v *Vault) Seal(conn *store.Connection, tok *oauth2.Token) {
	keyID, at := v.Keyring.Seal(purpose("access", conn), []byte(tok.AccessToken))
	conn.KeyID, conn.AccessToken = keyID, at
	conn.RefreshToken = nil
	if tok.RefreshToken != "" {
		_, conn.RefreshToken = v.Keyring.Seal(purpose("refresh", conn), []byte(tok.RefreshToken))
	}
	conn.TokenType = tok.TokenType
	if conn.TokenType == "" {
		conn.TokenType = "Bearer"
	}
	conn.Expiry = expiry(tok, v.now())
	if s, ok := tok.Extra("scope").(string); ok && s != "" {
		// GitHub separates granted scopes with commas, RFC 6749 with spaces.
		conn.Scopes = strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' })
	}
}

// expiry prefers expires_in measured from the injected clock over x/oauth2's Expiry, which is
// measured from the wall clock; nil means the token does not expire (GitHub OAuth apps).
func expiry(tok *oauth2.Token, now time.Time) *time.Time {
	secs := tok.ExpiresIn
	if secs == 0 {
		switch x := tok.Extra("expires_in").(type) {
		case string:
			secs, _ = strconv.ParseInt(x, 10, 64)
		case int64: // a form-encoded answer
			secs = x
		case float64:
			secs = int64(x)
		}
	}
	if secs > 0 {
		t := now.Add(time.Duration(secs) * time.Second)
		return &t
	}
	if !tok.Expiry.IsZero() {
		t := tok.Expiry
		return &t
	}
	return nil
}

func fresh(c store.Connection, now time.Time) bool {
	return c.Expiry == nil || now.Add(expirySkew).Before(*c.Expiry)
}

// open returns the connection's tokens in the clear.
func (v *Vault) open(c *store.Connection) (access, refresh string, err error) {
	at, err := v.Keyring.Open(purpose("access", c), c.KeyID, c.AccessToken)
	if err != nil {
		return "", "", fmt.Errorf("upstream: opening the access token of connection %s: %w", c.ID, err)
	}
	if len(c.RefreshToken) > 0 {
		rt, err := v.Keyring.Open(purpose("refresh", c), c.KeyID, c.RefreshToken)
		if err != nil {
			return "", "", fmt.Errorf("upstream: opening the refresh token of connection %s: %w", c.ID, err)
		}
		refresh = string(rt)
	}
	return string(at), refresh, nil
}

// handOut is what callers get: the access token only. The refresh token never leaves the vault.
func handOut(c *store.Connection, access string) *oauth2.Token {
	t := &oauth2.Token{AccessToken: access, TokenType: c.TokenType}
	if c.Expiry != nil {
		t.Expiry = *c.Expiry
	}
	return t
}

var (
	errUnchanged = errors.New("upstream: connection already fresh")
	errBroken    = errors.New("upstream: connection broken")
)

// Token returns a live access token for the connection, refreshing it first if it has expired.
//
// Errors: store.ErrNotFound for an unknown connection; ErrReconnect when the connection is
// broken or the service rejects the refresh (the connection is then marked broken); ErrTimeout
// when the service does not answer within Timeout; ErrService when it refuses our client or
// answers nonsense (the connection is left as it was, since reconnecting would not help);
// secret.ErrUnknownKey in the chain when the key that sealed the row has been removed.
func (v *Vault) Token(ctx context.Context, c *config.Connector, project, connectionID string) (*oauth2.Token, error) {
	conn, err := v.Store.GetConnection(ctx, project, connectionID)
	if err != nil {
		return nil, err
	}
	if conn.Connector != c.Key {
		return nil, fmt.Errorf("upstream: connection %s belongs to connector %q, not %q", connectionID, conn.Connector, c.Key)
	}
	if conn.Status == store.ConnectionBroken {
		return nil, ErrReconnect
	}
	if fresh(conn, v.now()) {
		at, _, err := v.open(&conn)
		if err != nil {
			return nil, err
		}
		return handOut(&conn, at), nil
	}

	// One refresh per connection in this process; the others wait for its result. The shared
	// work must not die with whichever caller happened to start it.
	ch := v.flight.DoChan(project+"\x00"+connectionID, func() (any, error) {
		return v.refreshLocked(context.WithoutCancel(ctx), c, project, connectionID)
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		tok := *r.Val.(*oauth2.Token)
		return &tok, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TokenFor is Token for a connection the caller has just read (token exchange reads it to
// decide between handing out a token and refusing with a link): a working connection whose
// token is fresh is opened without reading the row again; anything else goes through Token.
func (v *Vault) TokenFor(ctx context.Context, c *config.Connector, conn store.Connection) (*oauth2.Token, error) {
	if conn.Connector == c.Key && conn.Status == store.ConnectionActive && fresh(conn, v.now()) {
		at, err := v.Keyring.Open(purpose("access", &conn), conn.KeyID, conn.AccessToken)
		if err == nil {
			return handOut(&conn, string(at)), nil
		}
	}
	return v.Token(ctx, c, conn.Project, conn.ID)
}

// refreshLocked refreshes under the row lock, after checking again whether another replica
// refreshed while this one waited for the lock.
func (v *Vault) refreshLocked(ctx context.Context, c *config.Connector, project, connectionID string) (*oauth2.Token, error) {
	var (
		out     *oauth2.Token
		outcome error
	)
	_, err := v.Store.UpdateConnection(ctx, project, connectionID, func(cur store.Connection) (store.Connection, error) {
		out, outcome = nil, nil
		now := v.now()
		if cur.Status == store.ConnectionBroken {
			return cur, errBroken
		}
		at, rt, err := v.open(&cur)
		if err != nil {
			return cur, err
		}
		if fresh(cur, now) {
			out = handOut(&cur, at)
			return cur, errUnchanged
		}
		if rt == "" {
			// Expired and nothing to renew it with: only the person can fix this.
			cur.Status, cur.UpdatedAt = store.ConnectionBroken, now
			outcome = ErrReconnect
			return cur, nil
		}
		tok, err := v.refresh(ctx, c, rt)
		v.refreshed(c, err)
		if err != nil {
			if rejected(err) {
				cur.Status, cur.UpdatedAt = store.ConnectionBroken, now
				outcome = ErrReconnect
				return cur, nil
			}
			return cur, err
		}
		if tok.RefreshToken == "" {
			tok.RefreshToken = rt // the service kept the old one
		}
		v.Seal(&cur, tok)
		cur.Status, cur.UpdatedAt = store.ConnectionActive, now
		out = handOut(&cur, tok.AccessToken)
		return cur, nil
	})
	switch {
	case errors.Is(err, errUnchanged):
		return out, nil
	case errors.Is(err, errBroken):
		return nil, ErrReconnect
	case err != nil:
		return nil, err
	case outcome != nil:
		return nil, outcome
	}
	return out, nil
}

func (v *Vault) refreshed(c *config.Connector, err error) {
	if v.OnRefresh == nil {
		return
	}
	v.OnRefresh(c.Key, refreshResult(err))
}

// refreshResult is what metrics and traces say of a refresh's outcome: ok, rejected (the
// person must reconnect), timeout or error.
func refreshResult(err error) string {
	switch {
	case err == nil:
		return "ok"
	case rejected(err):
		return "rejected"
	case errors.Is(err, ErrTimeout):
		return "timeout"
	default:
		return "error"
	}
}

// refresh asks the service for new tokens, bounded by the vault's timeout.
func (v *Vault) refresh(ctx context.Context, c *config.Connector, refreshToken string) (tok *oauth2.Token, err error) {
	ctx, span := tracing.Start(ctx, "upstream refresh", trace.WithAttributes(attribute.String("latchkey.connector", c.Key)))
	defer func() {
		if err != nil {
			tracing.Fail(span, refreshResult(err))
		}
		span.End()
	}()
	ctx, cancel := context.WithTimeout(ctx, v.timeout())
	defer cancel()
	ctx, err = withClient(ctx, v.HTTP, c)
	if err != nil {
		return nil, classify(ctx, "token endpoint", err)
	}
	conf := oauthConfig(c)
	if c.RefreshURL != "" {
		conf.Endpoint.TokenURL = c.RefreshURL
	}
	tok, err = conf.TokenSource(WithClock(ctx, v.Now), &oauth2.Token{RefreshToken: refreshToken}).Token()
	if err != nil {
		return nil, classify(ctx, "token endpoint", err)
	}
	return tok, nil
}

// rejected reports whether the service refused the refresh token itself (revoked, expired,
// rotated away), as opposed to refusing our client or failing. Only the former needs the person
// to reconnect; a misconfigured client secret must not break every connection of a connector.
func rejected(err error) bool {
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) {
		return false
	}
	switch re.ErrorCode {
	case "invalid_grant", "bad_refresh_token", "invalid_refresh_token":
		return true
	case "":
		return re.Response != nil && (re.Response.StatusCode == http.StatusBadRequest || re.Response.StatusCode == http.StatusUnauthorized)
	}
	return false
}

// errSealedWithPrimary: the row needs no re-seal; UpdateConnection leaves it as it is.
var errSealedWithPrimary = errors.New("upstream: already sealed with the primary key")

// Reseal seals the connection's tokens again with the primary key, under the same row lock as
// a refresh, so a refresh running meanwhile is neither lost nor overwritten. It reports whether
// it rewrote the row; a row already sealed with the primary key (a refresh got there first) is
// left alone. A row no key in the keyring opens returns an error wrapping secret.ErrUnknownKey
// or secret.ErrOpen and stays as it is.
func (v *Vault) Reseal(ctx context.Context, project, id string) (bool, error) {
	_, err := v.Store.UpdateConnection(ctx, project, id, func(c store.Connection) (store.Connection, error) {
		if c.KeyID == v.Keyring.PrimaryID() {
			return c, errSealedWithPrimary
		}
		access, refresh, err := v.open(&c)
		if err != nil {
			return c, err
		}
		keyID, at := v.Keyring.Seal(purpose("access", &c), []byte(access))
		c.KeyID, c.AccessToken, c.RefreshToken = keyID, at, nil
		if refresh != "" {
			_, c.RefreshToken = v.Keyring.Seal(purpose("refresh", &c), []byte(refresh))
		}
		return c, nil
	})
	switch {
	case errors.Is(err, errSealedWithPrimary), errors.Is(err, store.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

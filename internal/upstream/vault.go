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
	"latchkey.dev/latchkey/internal/events"
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
	// Record, when set, is given the audit record of every change of a connection's state that
	// a refresh makes (events.ConnectionRefreshFailed, events.ConnectionRecovered), after the
	// change is stored. The serve process appends it to the audit log, whence it reaches the
	// Project's event sinks (docs/connection-health.md).
	Record func(ctx context.Context, r store.AuditRecord)
	// TrackUses has Token and TokenFor remember which connections they hand out, in memory, for
	// a Refresher to record (TakeUses): the exchange itself never writes for it.
	TrackUses bool

	flight singleflight.Group
	uses   uses
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
// Errors: store.ErrNotFound for an unknown connection; ErrReconnect when the connection needs
// its person (needs_reconnect, revoked_upstream) or comes to need them now; ErrTimeout when the
// service does not answer within Timeout; ErrService when it refuses our client or answers
// nonsense (the connection becomes expiring at most, since reconnecting would not help);
// secret.ErrUnknownKey in the chain when the key that sealed the row has been removed.
func (v *Vault) Token(ctx context.Context, c *config.Connector, project, connectionID string) (*oauth2.Token, error) {
	conn, err := v.Store.GetConnection(ctx, project, connectionID)
	if err != nil {
		return nil, err
	}
	if conn.Connector != c.Key {
		return nil, fmt.Errorf("upstream: connection %s belongs to connector %q, not %q", connectionID, conn.Connector, c.Key)
	}
	if conn.Status.NeedsPerson() {
		return nil, ErrReconnect
	}
	if fresh(conn, v.now()) {
		at, _, err := v.open(&conn)
		if err != nil {
			return nil, err
		}
		v.used(conn)
		return handOut(&conn, at), nil
	}

	// One refresh per connection in this process; the others wait for its result. The shared
	// work must not die with whichever caller happened to start it.
	ch := v.flight.DoChan(project+"\x00"+connectionID, func() (any, error) {
		return v.refreshLocked(context.WithoutCancel(ctx), c, project, connectionID, expirySkew, TriggerUse)
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		tok := *r.Val.(*oauth2.Token)
		v.used(conn)
		return &tok, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TokenFor is Token for a connection the caller has just read (token exchange reads it to
// decide between handing out a token and refusing with a link): a working connection whose
// token is fresh is opened without reading the row again; anything else goes through Token.
func (v *Vault) TokenFor(ctx context.Context, c *config.Connector, conn store.Connection) (*oauth2.Token, error) {
	if conn.Connector == c.Key && conn.Status.Usable() && fresh(conn, v.now()) {
		at, err := v.Keyring.Open(purpose("access", &conn), conn.KeyID, conn.AccessToken)
		if err == nil {
			v.used(conn)
			return handOut(&conn, string(at)), nil
		}
	}
	return v.Token(ctx, c, conn.Project, conn.ID)
}

// Triggers of a refresh, as audit records name them (details.trigger).
const (
	// TriggerUse: an agent asked for the token and it had expired.
	TriggerUse = "use"
	// TriggerAhead: the Refresher renewed it before it expired.
	TriggerAhead = "ahead"
)

// due reports whether the connection's token expires within ahead of now.
func due(c store.Connection, now time.Time, ahead time.Duration) bool {
	return c.Expiry != nil && !now.Add(ahead).Before(*c.Expiry)
}

// change is a change of a connection's state made by a refresh, for its audit record.
type change struct {
	from, to store.ConnectionStatus
	reason   string // why a refresh failed: the record's reason code
	code     string // the service's error code, when it sent one
}

// refreshLocked refreshes under the row lock when the token expires within ahead, after
// checking again whether another replica refreshed while this one waited for the lock. It
// returns the token to hand out, or the error that says why there is none, and moves the
// connection's state (docs/connection-health.md):
//
//   - a refresh that works makes it active;
//   - a service that refuses the refresh token itself makes it revoked_upstream;
//   - a refresh that fails in a way that may pass (the service timed out, answered with an
//     error of its own, or refused Latchkey's client) makes an active connection expiring and
//     changes nothing else: the connection is not broken, the next refresh may work;
//   - with no refresh token, a token that expires within ahead makes it expiring, one that has
//     expired makes it needs_reconnect.
func (v *Vault) refreshLocked(ctx context.Context, c *config.Connector, project, connectionID string, ahead time.Duration, trigger string) (*oauth2.Token, error) {
	var (
		out     *oauth2.Token
		outcome error
		moved   *change
	)
	saved, err := v.Store.UpdateConnection(ctx, project, connectionID, func(cur store.Connection) (store.Connection, error) {
		out, outcome, moved = nil, nil, nil
		now := v.now()
		if cur.Status.NeedsPerson() {
			return cur, errBroken
		}
		at, rt, err := v.open(&cur)
		if err != nil {
			return cur, err
		}
		if !due(cur, now, ahead) {
			out = handOut(&cur, at)
			return cur, errUnchanged
		}
		move := func(to store.ConnectionStatus, reason, code string) {
			if cur.Status != to {
				moved = &change{from: cur.Status, to: to, reason: reason, code: code}
				cur.Status, cur.UpdatedAt = to, now
			}
		}
		if rt == "" {
			// Nothing to renew it with: only the person can, by reconnecting.
			if fresh(cur, now) {
				out = handOut(&cur, at)
				if cur.Status == store.ConnectionExpiring {
					return cur, errUnchanged
				}
				move(store.ConnectionExpiring, ReasonNoRefreshToken, "")
				return cur, nil
			}
			move(store.ConnectionNeedsReconnect, ReasonNoRefreshToken, "")
			outcome = ErrReconnect
			return cur, nil
		}
		tok, err := v.refresh(ctx, c, rt)
		v.refreshed(c, err)
		if err != nil {
			if rejected(err) {
				move(store.ConnectionRevokedUpstream, ReasonRevokedUpstream, serviceCode(err))
				outcome = ErrReconnect
				return cur, nil
			}
			if cur.Status == store.ConnectionExpiring {
				return cur, err // already said; the row stays as it is
			}
			reason := ReasonUpstreamError
			if errors.Is(err, ErrTimeout) {
				reason = ReasonUpstreamTimeout
			}
			move(store.ConnectionExpiring, reason, serviceCode(err))
			outcome = err
			return cur, nil
		}
		if tok.RefreshToken == "" {
			tok.RefreshToken = rt // the service kept the old one
		}
		v.Seal(&cur, tok)
		move(store.ConnectionActive, "", "")
		cur.UpdatedAt = now
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
	}
	if moved != nil {
		v.recordChange(ctx, c, saved, *moved, trigger)
	}
	if outcome != nil {
		return nil, outcome
	}
	return out, nil
}

// Reason codes of connection.refresh_failed records (docs/audit.md).
const (
	// ReasonRevokedUpstream: the service refused the refresh token (invalid_grant and its
	// equivalents); the record's details.error is the service's code.
	ReasonRevokedUpstream = "revoked_upstream"
	// ReasonNoRefreshToken: the token expires (or has expired) and there is nothing to renew it.
	ReasonNoRefreshToken = "no_refresh_token"
	// ReasonUpstreamTimeout, ReasonUpstreamError: the refresh failed in a way that may pass.
	ReasonUpstreamTimeout = "upstream_timeout"
	ReasonUpstreamError   = "upstream_error"
)

// serviceCode is the OAuth error code the service answered a refresh with, if any.
func serviceCode(err error) string {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && isCode(re.ErrorCode) {
		return re.ErrorCode
	}
	return ""
}

// isCode keeps what the service sent to a short code before it goes into an audit record.
func isCode(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_' && r != '-' && r != '.' {
			return false
		}
	}
	return true
}

// recordChange hands the audit record of a change of state to Record: a failed refresh
// (connection.refresh_failed) or a recovery (connection.recovered). The person is the record's
// subject, so a sink can tell them to reconnect before their agent fails.
func (v *Vault) recordChange(ctx context.Context, c *config.Connector, conn store.Connection, ch change, trigger string) {
	if v.Record == nil {
		return
	}
	r := store.AuditRecord{
		Project: conn.Project, Time: v.now(), Actor: "system", Target: conn.Subject, Connector: c.Key,
		Details: map[string]string{
			"connection_id": conn.ID, "account": conn.AccountName, "state": string(ch.to),
			"previous_state": string(ch.from), "trigger": trigger,
		},
	}
	switch {
	case ch.to == store.ConnectionActive:
		r.Action, r.Outcome = events.ConnectionRecovered, store.OutcomeSuccess
	case ch.reason == ReasonRevokedUpstream:
		r.Action, r.Outcome, r.Reason = events.ConnectionRefreshFailed, store.OutcomeRefused, ch.reason
	default:
		r.Action, r.Outcome, r.Reason = events.ConnectionRefreshFailed, store.OutcomeFailed, ch.reason
	}
	if ch.code != "" {
		r.Details["error"] = ch.code
	}
	v.Record(ctx, r)
}

// RefreshAhead renews the connection's token if it expires within window, under the same row
// lock as a refresh on use, so replicas (and an agent's request meanwhile) cause one refresh
// between them; a connection another replica renewed while this one waited is left alone. It
// moves the connection's state as refreshLocked says. The error is what the refresh met
// (ErrReconnect, ErrTimeout, ErrService, …); nil when there was nothing to do.
func (v *Vault) RefreshAhead(ctx context.Context, c *config.Connector, project, connectionID string, window time.Duration) error {
	if c == nil {
		return errors.New("upstream: no connector")
	}
	_, err := v.refreshLocked(ctx, c, project, connectionID, max(window, expirySkew), TriggerAhead)
	return err
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

// Package store defines Latchkey's runtime state: everything that grows with people and agents
// (sessions, grants, codes, tokens, registered clients, connected accounts, link records,
// callback state rows, audit records, the event outbox). Configuration declared as Kubernetes
// resources is not here; it reaches the server as a compiled snapshot (internal/config).
//
// Conventions, after Dex's storage package:
//   - every method takes ctx first and returns value types;
//   - lookups by secret use the secret's SHA-256 hash (see internal/secret); no plaintext
//     token, code, cookie or confirmation token is ever handed to the store;
//   - ErrNotFound and ErrConflict are the only sentinel errors callers branch on;
//   - every multi-row change is atomic: it happens whole or not at all;
//   - times are passed in by the caller (an injected clock), never read inside the store.
//
// One SQL implementation serves SQLite and PostgreSQL (internal/store/sql); the conformance
// suite (internal/store/conformance) runs against both. Consumers do not take the whole Store:
// each declares the methods it calls beside itself (docs/decisions/0024).
package store

import (
	"context"
	"errors"
	"slices"
	"time"
)

var (
	// ErrNotFound: no live row matches. Expired rows are reported as not found too, so callers
	// cannot tell "never existed" from "expired" (uniform 404s depend on this).
	ErrNotFound = errors.New("store: not found")
	// ErrConflict: a unique row already exists, or a compare-and-swap lost a race.
	ErrConflict = errors.New("store: conflict")
	// ErrAccessEnded: the person's access was ended (Person.AccessEndedAt) after the operation
	// that asked began, so what it would save for them must not be saved.
	ErrAccessEnded = errors.New("store: the person's access has ended")
)

// Store is the runtime state of every project. Implementations are safe for concurrent use by
// many goroutines and, on PostgreSQL, by many server replicas.
type Store interface {
	// Ping reports whether the database answers; /-/readyz uses it.
	Ping(ctx context.Context) error
	Close() error

	People
	Sessions
	Clients
	Grants
	AuthCodes
	Tokens
	Connections
	CallbackStates
	Links
	Audit
	Outbox
	Leavers
	Sealed
	Admin
	Replays
	PushedRequests
	Passkeys
	ConnectionHealth
	SharedConnections
	AdminWatch
	ClientIDHolders
	Apps
	ConnectionActors
	Approvals
	Revisions

	// GarbageCollect deletes rows that expired before now (sessions, codes, tokens, callback
	// states, links, delivered events) and reports how many of each it removed. On PostgreSQL
	// only one replica collects at a time (advisory lock); others return a zero result.
	GarbageCollect(ctx context.Context, now time.Time) (GCResult, error)
}

// GCResult counts rows removed by GarbageCollect, by table: "sessions", "auth_codes",
// "tokens", "callback_states", "links", "events", "logout_tokens" (remembered back-channel
// logout token ids), "pushed_requests", "used_once" (one-time identifiers past their window:
// DPoP proofs, client assertions, ID-JAGs), "token_replays" (rotated refresh tokens whose stored grace-window response
// was cleared), "passkey_ceremonies" (passkey ceremonies nobody finished), "rate_buckets"
// (shared rate-limit buckets full again), "approvals" (approval requests past their expiry) and, when the store
// keeps audit records for a set time, "audit" (relayed records older than that).
type GCResult map[string]int64

// ---------------------------------------------------------------------------------------------
// People and sessions

// Person is someone who signs in to a project. ID is Latchkey's stable, opaque subject; Source
// and SourceSubject say where the person signs in ("password" + email, or "oidc" + issuer|sub).
type Person struct {
	Project       string // "namespace/name"
	ID            string
	Source        string
	SourceSubject string
	Email         string
	Name          string
	CreatedAt     time.Time
	// AccessEndedAt is when the person's access was last ended by the store (EndSignIns,
	// Logout, EndPersonAccess); zero if never. Whatever was issued or started for them before
	// it is dead (docs/leavers.md).
	AccessEndedAt time.Time
}

type People interface {
	// UpsertPerson finds the person by (Project, Source, SourceSubject) or creates them with
	// p.ID; email and name are refreshed either way, and p.CreatedAt is recorded as the
	// person's last sign-in (PersonSummary.LastSignIn). It returns the stored person.
	UpsertPerson(ctx context.Context, p Person) (Person, error)
	GetPerson(ctx context.Context, project, id string) (Person, error)
	// FindPerson returns the person with that source identity in the project, or ErrNotFound;
	// unlike UpsertPerson it never creates one.
	FindPerson(ctx context.Context, project, source, sourceSubject string) (Person, error)
}

// Session is a signed-in browser. The cookie holds a random value; only its hash is stored.
type Session struct {
	IDHash    []byte
	Project   string
	Subject   string // Person.ID
	AuthTime  time.Time
	CreatedAt time.Time
	ExpiresAt time.Time
	// UpstreamSID is "issuer|sid" for a session started with the project's OpenID provider
	// whose ID token carried a sid claim, so a back-channel logout token that names only the
	// provider's session finds it; "" otherwise.
	UpstreamSID string
	// Method is how the person signed in, as an RFC 8176 authentication method reference:
	// "pwd" (password), "hwk" or "swk" (a passkey bound to one device, or one that can be
	// synced), or "oidc" (the project's OpenID provider). "" for sessions started before
	// sign-in methods were recorded.
	Method string
}

type Sessions interface {
	CreateSession(ctx context.Context, s Session) error
	// GetSession returns a session that has not expired at now.
	GetSession(ctx context.Context, idHash []byte, now time.Time) (Session, error)
	// DeleteSession returns ErrNotFound if there was no such session.
	DeleteSession(ctx context.Context, idHash []byte) error
}

// ---------------------------------------------------------------------------------------------
// Clients registered at run time (RFC 7591). Statically declared OAuthClients live in config.

type Client struct {
	Project                 string
	ID                      string
	SecretHash              []byte // nil for public clients
	RegistrationTokenHash   []byte // RFC 7592 registration access token
	Name                    string
	URI                     string
	LogoURI                 string
	RedirectURIs            []string
	GrantTypes              []string
	ResponseTypes           []string
	TokenEndpointAuthMethod string
	Scope                   string
	// Metadata is the full registration document as the client sent it, normalised; RFC 7592
	// reads return it.
	Metadata  []byte
	CreatedAt time.Time
	UpdatedAt time.Time
}

type Clients interface {
	CreateClient(ctx context.Context, c Client) error
	GetClient(ctx context.Context, project, id string) (Client, error)
	// UpdateClient applies fn to the stored client and writes the result back atomically.
	// fn runs inside the write transaction: it must be quick and must not call the store.
	// Project, ID and CreatedAt cannot be changed.
	UpdateClient(ctx context.Context, project, id string, fn func(Client) (Client, error)) (Client, error)
	// DeleteClient removes the client (with its grants and agent permissions) and revokes
	// every token it holds.
	DeleteClient(ctx context.Context, project, id string, now time.Time) error
	ListClients(ctx context.Context, project string) ([]Client, error)
}

// ---------------------------------------------------------------------------------------------
// Consent

// Grant records that a person consented to a client with some scopes.
type Grant struct {
	Project   string
	Subject   string
	ClientID  string
	Scopes    []string
	CreatedAt time.Time
	UpdatedAt time.Time
}

type Grants interface {
	// UpsertGrant stores consent; scopes are replaced by the union of old and new.
	UpsertGrant(ctx context.Context, g Grant) error
	GetGrant(ctx context.Context, project, subject, clientID string) (Grant, error)
	ListGrants(ctx context.Context, project, subject string) ([]Grant, error)
	// DeleteGrant withdraws consent and revokes every token the client holds for the person.
	// It returns ErrNotFound only when there was neither a grant nor a live token.
	DeleteGrant(ctx context.Context, project, subject, clientID string, now time.Time) error
}

// ---------------------------------------------------------------------------------------------
// Authorization codes

type AuthCode struct {
	Hash                []byte
	Project             string
	ClientID            string
	Subject             string
	RedirectURI         string
	Scopes              []string
	Resource            []string
	CodeChallenge       string
	CodeChallengeMethod string
	Nonce               string
	AuthTime            time.Time
	ExpiresAt           time.Time
	CreatedAt           time.Time
	// DPoPJKT is the RFC 7638 thumbprint of the key the code is bound to (RFC 9449 §10): its
	// redemption must carry a DPoP proof by that key. "" when the code is not bound.
	DPoPJKT string
	// AuthorizationDetails are the RFC 9396 details the person approved, canonical JSON
	// (internal/authzdetails.Marshal); "" for none.
	AuthorizationDetails string
}

type AuthCodes interface {
	CreateAuthCode(ctx context.Context, c AuthCode) error
	// RedeemAuthCode marks the code used and returns it, exactly once. A second call for the
	// same code returns ErrConflict together with the code (so the caller can revoke what the
	// first redemption issued, RFC 6749 §4.1.2); an unknown or expired code is ErrNotFound.
	// A redeemed code stays ErrConflict after it expires, until GarbageCollect removes it.
	// If check is non-nil it decides, atomically with the redemption, whether the code may be
	// spent: when it returns an error the code stays unused and comes back with that error, so
	// a request that cannot redeem a code (wrong client, redirect_uri or PKCE verifier) cannot
	// burn it either. check runs only for an unused, unexpired code and must not call the store.
	RedeemAuthCode(ctx context.Context, hash []byte, now time.Time, check func(AuthCode) error) (AuthCode, error)
	// AuthCodeReplayed reports whether RevokeByCode has been called for the code, reading what
	// is committed. The redemption that won asks after storing its tokens: a replay that
	// revoked before those tokens existed is seen here, and one that marks the code later
	// revokes them itself, since RevokeByCode marks the code before it revokes.
	AuthCodeReplayed(ctx context.Context, hash []byte) (bool, error)
}

// ---------------------------------------------------------------------------------------------
// Tokens

type TokenKind string

const (
	AccessToken  TokenKind = "access"
	RefreshToken TokenKind = "refresh"
)

// Token is an issued access or refresh token. Tokens issued together belong to one Family
// (one authorization: a code redemption, a client_credentials call, an exchange).
type Token struct {
	Hash     []byte
	Kind     TokenKind
	Project  string
	ClientID string
	Subject  string // empty for client_credentials
	Scopes   []string
	Audience []string // RFC 8707 resources
	FamilyID string
	// Generation counts refresh rotations within the family, starting at 0.
	Generation int
	// CodeHash links the family to the code it was redeemed from, so a replayed code can
	// revoke it.
	CodeHash  []byte
	AuthTime  time.Time
	IssuedAt  time.Time
	ExpiresAt time.Time
	RevokedAt *time.Time
	// RotatedAt is set on a refresh token once it has been exchanged for a successor.
	RotatedAt *time.Time
	// JKT is the RFC 7638 thumbprint of the key the token is bound to by DPoP (RFC 9449), ""
	// for a bearer token. Rotation does not carry it over: the caller sets it on each new token.
	JKT string
	// AuthorizationDetails are the RFC 9396 details the token carries, canonical JSON
	// (internal/authzdetails.Marshal); "" for none. Rotation does not carry them over: the
	// caller sets them on each new token (never wider than the old one's).
	AuthorizationDetails string
	// Act is who acts for the person with this token (RFC 8693 §4.1): the client it was issued
	// to, and nested, the agents that exchanged the person's token before (docs/delegation.md).
	// Nil for a token that names no person. MayAct is the one other agent the token's person
	// lets exchange it (RFC 8693 §4.4), nil when any agent the token is for may. Both are stored
	// with the token (one column) and, like JKT, set by the caller on each new token.
	Act    *Actor
	MayAct *Actor
}

// Actor is one party in a delegation chain (RFC 8693 §4.1 act, §4.4 may_act): Sub is the
// agent's client id, ClientName the name an administrator declared for it (empty for a client
// that named itself), Act the actor before it.
type Actor struct {
	Sub        string `json:"sub"`
	ClientName string `json:"client_name,omitempty"`
	Act        *Actor `json:"act,omitempty"`
}

// Depth counts the actors of the chain a starts: 0 for nil.
func (a *Actor) Depth() int {
	n := 0
	for ; a != nil; a = a.Act {
		n++
	}
	return n
}

// Chain lists the chain's client ids, the latest actor first.
func (a *Actor) Chain() []string {
	var out []string
	for ; a != nil; a = a.Act {
		out = append(out, a.Sub)
	}
	return out
}

// Active reports whether the token may be used at now. A rotated refresh token is still
// Active here: what presenting it means (grace replay or reuse) is RotateRefreshToken's call.
func (t Token) Active(now time.Time) bool {
	return t.RevokedAt == nil && now.Before(t.ExpiresAt)
}

// Rotation is the outcome of RotateRefreshToken.
type Rotation struct {
	// Outcome says what happened.
	Outcome RotationOutcome
	// Old is the presented refresh token as stored (always set unless ErrNotFound).
	Old Token
	// Replay, for OutcomeGraceReplay, is the sealed response the first rotation stored, to be
	// returned again unchanged (so a retry and the original end with the same live pair).
	Replay []byte
	// Revoked counts tokens ended, for OutcomeReuseDetected.
	Revoked int64
}

type RotationOutcome int

const (
	// OutcomeRotated: the old token was live and is now retired; the new tokens are stored.
	OutcomeRotated RotationOutcome = iota + 1
	// OutcomeGraceReplay: the old token was retired less than the grace window ago and its
	// successor is still the family's live head; nothing changed.
	OutcomeGraceReplay
	// OutcomeReuseDetected: a retired token was presented outside the rules above; every live
	// token the client holds for that person in that project has been revoked.
	OutcomeReuseDetected
	// OutcomeInactive: the token is revoked or expired; nothing changed.
	OutcomeInactive
)

// RotateRequest asks to retire Old and store New (a new access token and a new refresh token,
// in Old's family, Generation+1). Sealed is the encrypted token response kept with the old row
// for the grace window. In New, FamilyID, Generation, Project, ClientID, Subject, CodeHash and
// AuthTime may be left zero: they are taken from the old token (values that disagree with it
// are an error).
type RotateRequest struct {
	OldHash []byte
	New     []Token
	Sealed  []byte
	Now     time.Time
	Grace   time.Duration
}

type Tokens interface {
	// CreateTokens stores tokens of one issuance atomically. "Live" below means not revoked,
	// not rotated and not expired.
	CreateTokens(ctx context.Context, tokens ...Token) error
	// GetToken returns a token by hash whether or not it is active; callers check Active.
	GetToken(ctx context.Context, hash []byte) (Token, error)
	// TokenHolder is GetToken and, in the same query, the person the token was issued for
	// (GetPerson in the token's project): found reports whether the token names a person who
	// is still stored. Refresh rotation asks both on every request.
	TokenHolder(ctx context.Context, hash []byte) (t Token, holder Person, found bool, err error)
	// RotateRefreshToken implements rotation with reuse detection (decision 0008); it is atomic and
	// correct under any number of concurrent calls for the same token, on every replica.
	RotateRefreshToken(ctx context.Context, r RotateRequest) (Rotation, error)
	// RevokeToken revokes one token and, for a refresh token, its whole family.
	RevokeToken(ctx context.Context, hash []byte, now time.Time) error
	// RevokeFamily revokes every token of a family; it returns how many were live.
	RevokeFamily(ctx context.Context, familyID string, now time.Time) (int64, error)
	// RevokeByCode revokes every family issued from a code (replayed code, RFC 6749 §4.1.2).
	// It first marks the code replayed, committed on its own, and only then revokes, so that
	// with AuthCodeReplayed no ordering of a replay and the winning redemption leaves tokens
	// issued from a replayed code alive.
	RevokeByCode(ctx context.Context, codeHash []byte, now time.Time) (int64, error)
	// RevokeClientTokens revokes every live token held by the given clients of a project,
	// reporting how many were live per client (enforcing "Only recognised apps can connect").
	RevokeClientTokens(ctx context.Context, project string, clientIDs []string, now time.Time) (map[string]int64, error)
	// RevokeClientTokensIn revokes every live token of one client in each of the projects, in
	// one transaction (all of them or none), reporting how many were live per project (the
	// admin API's delete of a client's tokens across the projects a caller may see).
	RevokeClientTokensIn(ctx context.Context, projects []string, clientID string, now time.Time) (map[string]int64, error)
	// CountLiveTokens counts live tokens per client of a project (for status and tests).
	CountLiveTokens(ctx context.Context, project string, now time.Time) (map[string]int64, error)
}

// ---------------------------------------------------------------------------------------------
// Connected accounts (docs/connectors-for-admins.md) and which agents may use them

type ConnectionStatus string

// Connection states (docs/connection-health.md, docs/decisions/0061). Latchkey hands out the
// token of an active or expiring connection; one that needs reconnecting or was revoked
// upstream waits for its person to connect the account again.
const (
	// ConnectionActive: the token works, or Latchkey can renew it when it expires.
	ConnectionActive ConnectionStatus = "active"
	// ConnectionExpiring: the token still works but expires soon (or has expired) and Latchkey
	// cannot renew it now: it holds no refresh token, or its last refresh failed for a reason
	// that may pass (the service timed out or answered with an error of its own).
	ConnectionExpiring ConnectionStatus = "expiring"
	// ConnectionNeedsReconnect: only the person can make it work again, for a reason other than
	// a revocation at the service: its token expired and there is no refresh token.
	ConnectionNeedsReconnect ConnectionStatus = "needs_reconnect"
	// ConnectionRevokedUpstream: the service refused the refresh token itself (invalid_grant
	// and its equivalents): the person or the service revoked the access there, or the refresh
	// token expired at the service.
	ConnectionRevokedUpstream ConnectionStatus = "revoked_upstream"
)

// ConnectionStates lists every state, in a stable order (metrics create a series for each).
func ConnectionStates() []ConnectionStatus {
	return []ConnectionStatus{ConnectionActive, ConnectionExpiring, ConnectionNeedsReconnect, ConnectionRevokedUpstream}
}

// Usable reports whether Latchkey may hand out the connection's token (refreshing it first
// when it has expired).
func (s ConnectionStatus) Usable() bool { return s == ConnectionActive || s == ConnectionExpiring }

// NeedsPerson reports whether only the person, by connecting the account again, can make the
// connection work.
func (s ConnectionStatus) NeedsPerson() bool {
	return s == ConnectionNeedsReconnect || s == ConnectionRevokedUpstream
}

// Connection is a person's account at an upstream service. Upstream tokens are sealed with
// AEAD (internal/secret); KeyID names the key that sealed them.
type Connection struct {
	ID           string
	Project      string
	Subject      string
	Connector    string // connector key "namespace/name"
	AccountID    string // the service's stable id for the account
	AccountName  string // how the service names it (e.g. the GitHub login)
	KeyID        string
	AccessToken  []byte // sealed
	RefreshToken []byte // sealed, may be nil
	TokenType    string
	Expiry       *time.Time
	Scopes       []string
	Status       ConnectionStatus
	CreatedAt    time.Time
	UpdatedAt    time.Time
	// Default marks the person's default account for the connector: at most one of their
	// connections to it has it. A first connection is saved as the default; another one
	// becomes it only through SetDefaultConnection, and deleting the default leaves none
	// (docs/several-accounts.md). SaveConnection and UpdateConnection leave it as it is.
	Default bool
}

// AgentPermission lets a client (an agent) use one connection. An agent may hold several,
// one per connection (a work and a personal account at the same service).
type AgentPermission struct {
	Project      string
	Subject      string
	Connector    string
	ClientID     string
	ConnectionID string
	CreatedAt    time.Time
}

// AgentAccess is what token exchange decides on: a person's connections to one connector and
// which of them one agent may use.
type AgentAccess struct {
	// Connections are the person's connections to the connector, oldest first.
	Connections []Connection
	// Allowed is the ID of the connection in Connections the agent gets when it names no
	// account (Choose); empty if it may use none.
	Allowed string
	// Permits are the IDs of every connection in Connections the agent may use, in
	// Connections' order.
	Permits []string
	// Person is the token's person as stored, read by SubjectAccess only (AgentAccess leaves
	// it empty); its ID is empty when the person no longer exists.
	Person Person
}

// Choose is the connection the agent gets when it names no account: of those it may use, the
// person's default, else the oldest (docs/decisions/0059). "" when it may use none.
func (a AgentAccess) Choose() string {
	first := ""
	for _, c := range a.Connections {
		if !slices.Contains(a.Permits, c.ID) {
			continue
		}
		if c.Default {
			return c.ID
		}
		if first == "" {
			first = c.ID
		}
	}
	return first
}

// MayUse reports whether the agent may use the connection id.
func (a AgentAccess) MayUse(id string) bool { return id != "" && slices.Contains(a.Permits, id) }

// Permitted returns the connection the agent gets when it names no account (Allowed).
func (a AgentAccess) Permitted() (Connection, bool) {
	if a.Allowed == "" {
		return Connection{}, false
	}
	for _, c := range a.Connections {
		if c.ID == a.Allowed {
			return c, true
		}
	}
	return Connection{}, false
}

// Sealed is what re-sealing with a new sealing key needs: the connections still sealed with
// another key, page by page, and how many stored values each key still seals. Rewriting a
// connection goes through UpdateConnection, under the same row lock as a token refresh.
type Sealed interface {
	// ConnectionsSealedWithout returns up to limit connections whose KeyID is not keyID, in
	// order of ID, starting after the ID afterID ("" starts at the first).
	ConnectionsSealedWithout(ctx context.Context, keyID, afterID string, limit int) ([]Connection, error)
	// SealedValueCounts counts stored values by the id of the key that sealed them:
	// connections' upstream tokens, connect links' codes and callback states' verifiers,
	// expired rows the garbage collector has not deleted yet included. (A rotated refresh
	// token's replay response is sealed too; it lives only for the refresh grace period.)
	SealedValueCounts(ctx context.Context) (map[string]int64, error)
}

type Connections interface {
	// SaveConnection stores a connection; an existing connection of the same person, connector
	// and AccountID is updated in place (reconnect keeps its ID and permissions).
	SaveConnection(ctx context.Context, c Connection) (Connection, error)
	// FinishConnection is SaveConnection for an upstream callback that began at since: in one
	// transaction it locks the person c.Subject, refuses with ErrNotFound if they no longer
	// exist, with ErrAccessEnded if their access was ended at or after since, and with check's error
	// if check refuses the person as stored, and only then saves. An end of the person's access
	// therefore either comes after the save (and ends the connection as it ends the others) or
	// stops it.
	FinishConnection(ctx context.Context, c Connection, since time.Time, check func(Person) error) (Connection, error)
	GetConnection(ctx context.Context, project, id string) (Connection, error)
	ListConnections(ctx context.Context, project, subject string) ([]Connection, error)
	// UpdateConnection applies fn under a row lock (SELECT … FOR UPDATE on PostgreSQL): the
	// vault refreshes upstream tokens inside fn, so concurrent callers on any replica cause
	// exactly one upstream refresh. fn returning an error leaves the row unchanged. fn may not
	// change ID, Project, Subject, Connector, AccountID or CreatedAt.
	UpdateConnection(ctx context.Context, project, id string, fn func(Connection) (Connection, error)) (Connection, error)
	// DeleteConnection deletes the connection and its agent permissions. Deleting the default
	// makes no other connection the default.
	DeleteConnection(ctx context.Context, project, id string) error
	// SetDefaultConnection makes the person subject's connection id their default for its
	// connector and, in the same transaction, takes the mark off the one that had it.
	// ErrNotFound unless id is a connection of subject in project.
	SetDefaultConnection(ctx context.Context, project, subject, id string) error

	// AllowAgent lets the client use the connection, beside any other connection of the same
	// connector it may already use (allowing it again changes nothing); ErrNotFound unless
	// ConnectionID is a connection of the same person and connector.
	AllowAgent(ctx context.Context, p AgentPermission) error
	// FindPermission returns a permission for person×connector×client: the oldest, when the
	// client may use several connections.
	FindPermission(ctx context.Context, project, subject, connector, clientID string) (AgentPermission, error)
	ListPermissions(ctx context.Context, project, subject string) ([]AgentPermission, error)
	// DeletePermission withdraws every permission of the client for the person's connections
	// to connector; ErrNotFound when there was none.
	DeletePermission(ctx context.Context, project, subject, connector, clientID string) error
	// DisallowAgent withdraws the client's permission for one connection of the person, and
	// leaves its permissions for their other connections; ErrNotFound when there was none.
	DisallowAgent(ctx context.Context, project, subject, connectionID, clientID string) error
	// AgentAccess reads the person's connections to connector and the one clientID may use in
	// one query: token exchange asks on every request, and a permission and the connection it
	// names are then never seen from two different moments.
	AgentAccess(ctx context.Context, project, subject, connector, clientID string) (AgentAccess, error)
	// SubjectAccess is a token exchange's reads in one query: the token with hash and, for the
	// person it was issued for and the client it was issued to, AgentAccess for connector (in
	// the token's project). ErrNotFound when there is no such token. The caller checks the
	// token (project, kind, expiry) before it uses the access.
	SubjectAccess(ctx context.Context, hash []byte, connector string) (Token, AgentAccess, error)
}

// ConnectionActor says that an agent received a connection's token for its person
// (docs/delegation.md): ClientID is the agent that asked, Via the agents it acted through, the
// latest first, space-separated ("" when the person's token was issued to ClientID itself).
type ConnectionActor struct {
	Project      string
	ConnectionID string
	ClientID     string
	Via          string
	LastUsedAt   time.Time
}

// ConnectionActors remembers which agents acted for a person with each connection, for
// administrators (the admin API's connections). Deleting a connection deletes its rows.
type ConnectionActors interface {
	// RecordConnectionActor stores a's use; a row for the same connection, client and Via keeps
	// the later LastUsedAt. A connection that no longer exists is passed over.
	RecordConnectionActor(ctx context.Context, a ConnectionActor) error
	// ListConnectionActors returns the actors of the project's connections ids, ordered by
	// connection, then latest use first.
	ListConnectionActors(ctx context.Context, project string, ids []string) ([]ConnectionActor, error)
}

// ConnectionUse says that a connection's token was handed out at At.
type ConnectionUse struct {
	Project, ID string
	At          time.Time
}

// DueQuery selects the connections whose token expires by Before (docs/connection-health.md).
type DueQuery struct {
	// Before: connections whose Expiry is set and not after Before.
	Before time.Time
	// UsedSince: a connection holding a refresh token is due only if it was used (TouchConnections)
	// at or after UsedSince; one holding none is due whether used or not.
	UsedSince time.Time
	// AfterExpiry and AfterID continue a listing after the last connection of the previous page
	// (zero AfterExpiry starts at the beginning).
	AfterExpiry time.Time
	AfterID     string
	Limit       int
}

// ConnectionCount counts the connections of one connector in one state.
type ConnectionCount struct {
	Connector string
	Status    ConnectionStatus
	Count     int64
}

// ConnectionHealth is what keeps connections working before an agent needs them
// (docs/connection-health.md).
type ConnectionHealth interface {
	// TouchConnections records each use as its connection's last use, in one transaction. A
	// use older than the recorded one changes nothing, and a connection that no longer exists
	// is passed over. It never changes what UpdateConnection guards: a use recorded while a
	// refresh holds the row does not make the refresh's write fail.
	TouchConnections(ctx context.Context, uses []ConnectionUse) error
	// DueConnections returns up to q.Limit connections of every project that are active or
	// expiring, whose Expiry is set and not after q.Before, and that either hold no refresh
	// token or were used at or after q.UsedSince: ordered by Expiry then ID, after
	// (q.AfterExpiry, q.AfterID).
	DueConnections(ctx context.Context, q DueQuery) ([]Connection, error)
	// CountConnections counts every project's connections by connector and state.
	CountConnections(ctx context.Context) ([]ConnectionCount, error)
}

// ---------------------------------------------------------------------------------------------
// Upstream OAuth callback state (docs/connectors-for-admins.md)

type CallbackState struct {
	// State is the random state value sent upstream; it is not a secret from the person who
	// started (they see it in the URL), so it is stored as a hash to keep DB reads useless.
	StateHash   []byte
	Project     string
	Subject     string
	Connector   string
	Purpose     string // "connect" | "reconnect" | …
	LinkID      string // the connect link that started it, if any
	Verifier    []byte // PKCE code verifier, sealed
	KeyID       string
	BindingHash []byte // hash of the binding cookie
	ConfirmHash []byte // hash of the current confirmation token, nil until rendered
	ExpiresAt   time.Time
	CreatedAt   time.Time
}

type CallbackStates interface {
	CreateCallbackState(ctx context.Context, s CallbackState) error
	GetCallbackState(ctx context.Context, stateHash []byte, now time.Time) (CallbackState, error)
	// SetConfirmHash replaces the confirmation token hash (rendering the page again voids the
	// previous token).
	SetConfirmHash(ctx context.Context, stateHash, confirmHash []byte, now time.Time) error
	// ConsumeCallbackState deletes the row and returns it, exactly once. If check is non-nil it
	// runs on the row first and the row is kept when it returns an error (the row is returned
	// with that error). check runs inside the write transaction and must not call the store.
	ConsumeCallbackState(ctx context.Context, stateHash []byte, now time.Time, check func(CallbackState) error) (CallbackState, error)
	// EndCallbackStates deletes every callback state the person subject started in project,
	// live or expired, and reports how many it deleted (0 is not an error). Signing out calls
	// it: an attempt must not outlive the sign-in it was started under.
	EndCallbackStates(ctx context.Context, project, subject string) (int64, error)
}

// ---------------------------------------------------------------------------------------------
// Connect links (docs/connections-for-agents.md)

type LinkKind string

const (
	LinkConnect   LinkKind = "connect"
	LinkAllow     LinkKind = "allow"
	LinkReconnect LinkKind = "reconnect"
)

type LinkState string

const (
	LinkOpen     LinkState = "open"
	LinkDone     LinkState = "done"
	LinkDeclined LinkState = "declined"
	LinkReplaced LinkState = "replaced"
)

// Link is a connect link record. CodeHash finds it; SealedCode lets the server hand the same
// link out again while it is open, without a database read alone being enough to open it.
type Link struct {
	ID         string // connect_id
	CodeHash   []byte
	SealedCode []byte
	KeyID      string
	Project    string
	Subject    string
	ClientID   string
	Connector  string
	Kind       LinkKind
	// Account is the account the agent named (token exchange's account parameter, the
	// account's name or id at the service), "" when it named none: a connect link asks the
	// person to connect that account, an allow link to let the agent use it.
	Account   string
	State     LinkState
	ExpiresAt time.Time
	CreatedAt time.Time
}

type Links interface {
	// OpenLink returns the open, unexpired link for l's person×agent×connector if it has l.Kind
	// and l.Account;
	// otherwise it marks any open link replaced and stores l. Atomic under concurrency: many
	// callers racing end with one open link. created says whether l was stored.
	OpenLink(ctx context.Context, l Link, now time.Time) (link Link, created bool, err error)
	// GetLinkByCode returns an open, unexpired link; anything else is ErrNotFound.
	GetLinkByCode(ctx context.Context, codeHash []byte, now time.Time) (Link, error)
	// CloseLink moves an open link to done or declined; ErrNotFound unless the link is open.
	CloseLink(ctx context.Context, id string, state LinkState, now time.Time) error
	// GetLink returns a link by id in whatever state it is in, expired or not; ErrNotFound only
	// when there is no such row. It serves the flow that finishes a link it started (the
	// upstream callback), never the link page, which finds links by code.
	GetLink(ctx context.Context, id string) (Link, error)
}

// ---------------------------------------------------------------------------------------------
// Revisions

// Revisions is a number that moves whenever the store changed in a way that could withdraw or
// change what a cached decision read (docs/decisions/0082): the token proxy keeps its
// decisions with the revision it read before deciding, and decides afresh once it moved.
type Revisions interface {
	// Revision returns the store's revision, the same on every replica. It is greater than
	// every revision read before any write that could withdraw a permission (a token, grant,
	// client, person, session or connection changed or removed) returned, on any replica.
	// Writes that cannot withdraw anything (new tokens, audit records, one-time identifiers,
	// rate-limit buckets, connection actors) do not move it.
	Revision(ctx context.Context) (int64, error)
}

// ---------------------------------------------------------------------------------------------
// One-time identifiers

type Replays interface {
	// UseOnce records key as used until expiresAt. It returns ErrConflict when key is already
	// recorded and its record has not expired at now, on every replica: a DPoP proof's or a
	// client assertion's or an ID-JAG's jti is accepted once. An expired record is taken over. Keys are
	// hashes the caller makes, naming what the identifier is for (the project, the key or
	// client, the jti), so identifiers of different purposes never collide.
	UseOnce(ctx context.Context, key []byte, expiresAt, now time.Time) error
}

// ---------------------------------------------------------------------------------------------
// Pushed authorization requests (RFC 9126)

// PushedRequest is an authorization request a client pushed: its validated parameters, found
// by the hash of the request_uri handed back for it.
type PushedRequest struct {
	Hash      []byte
	Project   string
	ClientID  string
	Params    string // form-encoded authorization request parameters
	ExpiresAt time.Time
	CreatedAt time.Time
}

type PushedRequests interface {
	// CreatePushedRequest stores a pushed request; a duplicate hash is ErrConflict.
	CreatePushedRequest(ctx context.Context, p PushedRequest) error
	// ConsumePushedRequest deletes the request and returns it, exactly once; an unknown,
	// expired or already used one is ErrNotFound. If check is non-nil it runs on the row first,
	// inside the transaction, and the row is kept when it returns an error (returned with the
	// row): a request_uri presented with another client's id is refused without being burnt.
	ConsumePushedRequest(ctx context.Context, hash []byte, now time.Time, check func(PushedRequest) error) (PushedRequest, error)
}

// ---------------------------------------------------------------------------------------------
// Audit and events

// AuditRecord is one entry of the audit log; docs/audit.md describes every action and field.
type AuditRecord struct {
	ID      int64
	Project string
	Time    time.Time
	Actor   string // Person.ID, "client:<id>", "kubernetes:<username>" (the admin API) or "system"
	Action  string // e.g. "connection.saved", "signin.failed"
	// Target is the record's subject: whom or what the action concerns (a person's id, a
	// client id, "connection:<id>").
	Target  string
	Details map[string]string
	// ClientID and Connector name the OAuth client and the Connector the action involved, when
	// one did ("" otherwise).
	ClientID  string
	Connector string
	// Outcome is OutcomeSuccess, OutcomeRefused or OutcomeFailed; Reason is a short code
	// saying why when it is not success ("bad_password", "connect_required").
	Outcome string
	Reason  string
}

// Audit outcomes.
const (
	// OutcomeSuccess: the action happened.
	OutcomeSuccess = "success"
	// OutcomeRefused: a check refused it (wrong password, policy, wrong person); Reason says which.
	OutcomeRefused = "refused"
	// OutcomeFailed: it could not be done (an upstream error, an unreachable service).
	OutcomeFailed = "failed"
)

type Audit interface {
	// AppendAudit stores r before it returns.
	AppendAudit(ctx context.Context, r AuditRecord) error
	// QueueAudit stores r a few milliseconds after it returns, batched with other queued
	// records, for records written on every token request (docs/decisions/0047). Reads of the
	// audit log through the same store see the records it queued; Close stores what is still
	// queued. A process killed without closing loses what it had queued.
	QueueAudit(ctx context.Context, r AuditRecord) error
	// AppendAuditBatched stores r before it returns, like AppendAudit, but in the same
	// batched write as the queued records: many callers at once share one commit. It is for
	// records of what a client is handed and Latchkey keeps no other trace of (an upstream
	// token, an ID-JAG), which must survive a process that is killed after answering
	// (docs/decisions/0054). An error means r may not be stored: the caller must fail.
	AppendAuditBatched(ctx context.Context, r AuditRecord) error
	ListAudit(ctx context.Context, project string, limit int) ([]AuditRecord, error)
	// ListAuditAfter returns up to limit records of every project whose ID is greater than
	// afterID and whose Time is not before since (zero: any time), in ID order. Security events
	// are tailed into Kubernetes Events this way. On PostgreSQL ids are handed out before
	// commit, so a record may become visible after one with a higher id: a tail may miss it.
	ListAuditAfter(ctx context.Context, afterID int64, since time.Time, limit int) ([]AuditRecord, error)
	// RelayAudit hands up to limit records not yet relayed (every appended record starts so),
	// oldest first, to fanOut, then stores the events fanOut returns in the outbox and marks
	// the records relayed, all in one transaction: each record reaches the outbox exactly once
	// whatever wrote it, and concurrent callers (replicas) never get the same record. fanOut
	// may be called again with the same records if the transaction has to be retried, so it
	// must not have effects of its own. It returns how many records were relayed.
	RelayAudit(ctx context.Context, limit int, fanOut func([]AuditRecord) ([]Event, error)) (int, error)
}

// Event is a security event waiting for delivery to one sink. The outbox is written in the
// same transaction as the change it reports where possible, and delivered with retries.
type Event struct {
	ID          string // CloudEvents id
	Project     string
	Sink        string
	Type        string
	Data        []byte // JSON
	CreatedAt   time.Time
	Attempts    int
	NextAttempt time.Time
	DeliveredAt *time.Time
}

type Outbox interface {
	EnqueueEvents(ctx context.Context, events ...Event) error
	// ClaimEvents leases up to limit due events for lease (so another replica does not send
	// them meanwhile) and returns them.
	ClaimEvents(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]Event, error)
	MarkDelivered(ctx context.Context, id, sink string, now time.Time) error
	// MarkFailed records a failed attempt and schedules the next one.
	MarkFailed(ctx context.Context, id, sink string, next time.Time) error
	OutboxDepth(ctx context.Context) (int64, error)
}

// ---------------------------------------------------------------------------------------------
// People who leave (docs/leavers.md)

// Ended counts what ending people's sign-ins removed.
type Ended struct {
	// Subjects are the people (Person.ID) whose sign-ins were ended, sorted; empty when the
	// request named nobody the store knows.
	Subjects []string
	Sessions int64 // browser sessions deleted
	Tokens   int64 // live access and refresh tokens revoked, of every client
	// Callbacks counts pending upstream callback attempts deleted.
	Callbacks int64
	// Passkeys counts the passkeys deleted, and Codes the authorization codes.
	Passkeys int64
	Codes    int64
}

// Logout is what a verified back-channel logout token (OpenID Connect Back-Channel Logout 1.0)
// asks of the store.
type Logout struct {
	Project string
	// SourceSubject is the person's "issuer|sub" (Person.SourceSubject of an "oidc" person);
	// empty when the token names only a provider session. When set it alone decides who is
	// signed out.
	SourceSubject string
	// SID is "issuer|sid", matched against Session.UpstreamSID when SourceSubject is empty: the
	// people with a session of that provider session are signed out.
	SID string
	// JTI is the logout token's jti. A second Logout with the same Project and JTI is
	// ErrConflict and ends nothing, so a captured logout token cannot end a later sign-in.
	JTI string
	// Until is when JTI may be forgotten (GarbageCollect removes it after): no later than the
	// moment the token itself is refused for its age.
	Until time.Time
	Now   time.Time
}

// PersonCheck is what re-checking a person at the project's OpenID provider needs: the
// provider's refresh token from their last sign-in, sealed (internal/secret), and when the
// provider last confirmed them.
type PersonCheck struct {
	Project string
	Subject string // Person.ID
	KeyID   string // the key that sealed RefreshToken
	// RefreshToken is the provider's refresh token, sealed.
	RefreshToken []byte
	// CheckedAt is when the provider last confirmed the person: their sign-in, or a refresh
	// at the provider that succeeded.
	CheckedAt time.Time
	// TriedAt is when a replica last started asking the provider; it leases the check so that
	// replicas do not ask at once with the same refresh token (zero: never).
	TriedAt time.Time
}

// Leavers ends the access of people who can no longer sign in at their organisation's identity
// provider (docs/leavers.md).
type Leavers interface {
	// EndSignIns ends everything that lets subject act in project without signing in again, in
	// one transaction: their browser sessions, pending upstream callback attempts, passkeys
	// with their pending enrolments, and authorization codes are deleted, every live access
	// and refresh token issued for them (to any client) is revoked, their PersonCheck is
	// removed and now is recorded as their AccessEndedAt. Consent (grants) and connected
	// accounts stay: nothing can use them without a new sign-in. Ending nothing is not an
	// error.
	EndSignIns(ctx context.Context, project, subject string, now time.Time) (Ended, error)
	// Logout remembers l.JTI and ends the sign-ins (as EndSignIns) of the people l names, in one
	// transaction. A JTI seen before is ErrConflict, and nothing is ended.
	Logout(ctx context.Context, l Logout) (Ended, error)
	// SavePersonCheck stores c, replacing the person's previous one.
	SavePersonCheck(ctx context.Context, c PersonCheck) error
	// UpdatePersonCheck applies fn to the stored check and writes the result back atomically
	// (under a row lock on PostgreSQL, so concurrent callers on any replica see each other's
	// lease). fn runs inside the write transaction: it must be quick and must not call the
	// store. When fn returns an error the row is unchanged and comes back with that error.
	// Project and Subject cannot be changed. ErrNotFound when the person has no check.
	UpdatePersonCheck(ctx context.Context, project, subject string, fn func(PersonCheck) (PersonCheck, error)) (PersonCheck, error)
}

// Passkey is a WebAuthn credential a person enrolled in a project (docs/passkeys.md). Its
// credential ID is unique in the project; the public key verifies its assertions.
type Passkey struct {
	Project      string
	CredentialID []byte
	Subject      string // Person.ID; also the WebAuthn user handle
	Name         string // shown on the account page
	PublicKey    []byte // COSE key
	SignCount    uint32
	Transports   []string
	AAGUID       []byte
	// AttestationFormat is the format of the attestation statement at enrolment ("none" in
	// practice: Latchkey asks for no attestation).
	AttestationFormat string
	// UserVerified: the authenticator verified the person at enrolment. BackupEligible: the
	// credential can be synced to other devices (it never changes); BackupState: it is backed
	// up now.
	UserVerified   bool
	BackupEligible bool
	BackupState    bool
	CreatedAt      time.Time
	LastUsedAt     time.Time // zero: never used to sign in
}

// PasskeyCeremony is one WebAuthn ceremony between its options and the browser's answer: the
// challenge and what the answer is checked against. It belongs to the browser that holds the
// cookie whose hash is IDHash, and is used once.
type PasskeyCeremony struct {
	IDHash  []byte
	Project string
	Kind    string // "enrol" or "sign-in"
	Subject string // who enrols; "" for a sign-in
	Data    []byte // the WebAuthn library's session data, JSON
	Expires time.Time
}

// Passkeys stores people's passkeys and the ceremonies that enrol and use them.
type Passkeys interface {
	// AddPasskey stores a new passkey; a credential ID already in the project is ErrConflict.
	AddPasskey(ctx context.Context, k Passkey) error
	// GetPasskey returns the project's passkey with that credential ID, or ErrNotFound.
	GetPasskey(ctx context.Context, project string, credentialID []byte) (Passkey, error)
	// ListPasskeys returns the person's passkeys, oldest first.
	ListPasskeys(ctx context.Context, project, subject string) ([]Passkey, error)
	// DeletePasskey removes one of the person's passkeys; ErrNotFound when the person has no
	// passkey with that ID.
	DeletePasskey(ctx context.Context, project, subject string, credentialID []byte) error
	// UsePasskey records a sign-in with the passkey, atomically: the stored sign count moves
	// to signCount only if signCount is higher, or both are zero (an authenticator that keeps
	// no counter). Otherwise nothing changes and the answer is ErrConflict: the same credential
	// signed from two authenticators (a clone), or the same assertion twice. ErrNotFound when
	// there is no such passkey.
	UsePasskey(ctx context.Context, project string, credentialID []byte, signCount uint32, backupState bool, now time.Time) error
	// CreatePasskeyCeremony stores a ceremony; an IDHash already in use is ErrConflict.
	CreatePasskeyCeremony(ctx context.Context, c PasskeyCeremony) error
	// TakePasskeyCeremony deletes the ceremony and returns it, once: a second take, or one
	// after Expires, is ErrNotFound.
	TakePasskeyCeremony(ctx context.Context, idHash []byte, now time.Time) (PasskeyCeremony, error)
}

package site

import (
	"context"
	"time"

	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/upstream"
)

// Store is the runtime state the HTTP flows reach through Env: the sum of what each flow
// uses, and nothing the server does not (garbage collection, the event outbox, the audit
// tail and token counts belong to other parts). Each flow's part is declared below rather
// than in the flow's package because flows import site, not the other way round, and because
// they call each other through Env: every page checks the session through signin, the account
// page starts upstream callbacks, token exchange opens connect links (docs/decisions/0024).
type Store interface {
	EnvStore
	SignInStore
	TokenStore
	ConsentStore
	RegistrationStore
	AccountStore
	LinkStore
	CallbackStore
	ExchangeStore
	IdentityAssertionStore
}

// EnvStore is what Env's own methods use: Client reads registered clients, Record appends
// audit records (or queues the ones every token request writes).
type EnvStore interface {
	GetClient(ctx context.Context, project, id string) (store.Client, error)
	AppendAudit(ctx context.Context, r store.AuditRecord) error
	QueueAudit(ctx context.Context, r store.AuditRecord) error
	AppendAuditBatched(ctx context.Context, r store.AuditRecord) error
}

// SignInStore is what signing in and out uses (webhook/signin): people and their browser
// sessions, and ending them when the person leaves. Every page that needs a person reads the
// session through it.
type SignInStore interface {
	PasskeyStore
	UpsertPerson(ctx context.Context, p store.Person) (store.Person, error)
	GetPerson(ctx context.Context, project, id string) (store.Person, error)
	CreateSession(ctx context.Context, s store.Session) error
	GetSession(ctx context.Context, idHash []byte, now time.Time) (store.Session, error)
	DeleteSession(ctx context.Context, idHash []byte) error
	// People who leave (docs/leavers.md): back-channel logout and re-checking people at the
	// project's OpenID provider.
	EndSignIns(ctx context.Context, project, subject string, now time.Time) (store.Ended, error)
	Logout(ctx context.Context, l store.Logout) (store.Ended, error)
	SavePersonCheck(ctx context.Context, c store.PersonCheck) error
	UpdatePersonCheck(ctx context.Context, project, subject string, fn func(store.PersonCheck) (store.PersonCheck, error)) (store.PersonCheck, error)
}

// TokenStore is what the OAuth endpoints use (webhook/oauth): codes are redeemed, tokens
// issued, rotated, looked up and revoked; userinfo and refresh read the person.
type TokenStore interface {
	RedeemAuthCode(ctx context.Context, hash []byte, now time.Time, check func(store.AuthCode) error) (store.AuthCode, error)
	CreateTokens(ctx context.Context, tokens ...store.Token) error
	GetToken(ctx context.Context, hash []byte) (store.Token, error)
	TokenHolder(ctx context.Context, hash []byte) (store.Token, store.Person, bool, error)
	RotateRefreshToken(ctx context.Context, r store.RotateRequest) (store.Rotation, error)
	RevokeToken(ctx context.Context, hash []byte, now time.Time) error
	RevokeFamily(ctx context.Context, familyID string, now time.Time) (int64, error)
	RevokeByCode(ctx context.Context, codeHash []byte, now time.Time) (int64, error)
	GetPerson(ctx context.Context, project, id string) (store.Person, error)
	// UseOnce spends the jti of a DPoP proof or a client assertion.
	UseOnce(ctx context.Context, key []byte, expiresAt, now time.Time) error
}

// ConsentStore is what the authorization endpoint uses (webhook/consent): the person's
// consent and the code it issues, and pushed authorization requests (RFC 9126).
type ConsentStore interface {
	GetGrant(ctx context.Context, project, subject, clientID string) (store.Grant, error)
	UpsertGrant(ctx context.Context, g store.Grant) error
	CreateAuthCode(ctx context.Context, c store.AuthCode) error
	CreatePushedRequest(ctx context.Context, p store.PushedRequest) error
	ConsumePushedRequest(ctx context.Context, hash []byte, now time.Time, check func(store.PushedRequest) error) (store.PushedRequest, error)
}

// RegistrationStore is what dynamic client registration uses (webhook/register, RFC 7591 and
// RFC 7592).
type RegistrationStore interface {
	CreateClient(ctx context.Context, c store.Client) error
	GetClient(ctx context.Context, project, id string) (store.Client, error)
	UpdateClient(ctx context.Context, project, id string, fn func(store.Client) (store.Client, error)) (store.Client, error)
	DeleteClient(ctx context.Context, project, id string, now time.Time) error
}

// AccountStore is what the account page uses (webhook/account): the person's connections,
// agent permissions and consents with the clients they name, and the vault that revokes
// upstream tokens on disconnect.
type AccountStore interface {
	PasskeyStore
	upstream.ConnectionStore
	GetClient(ctx context.Context, project, id string) (store.Client, error)
	ListConnections(ctx context.Context, project, subject string) ([]store.Connection, error)
	DeleteConnection(ctx context.Context, project, id string) error
	ListPermissions(ctx context.Context, project, subject string) ([]store.AgentPermission, error)
	DeletePermission(ctx context.Context, project, subject, connector, clientID string) error
	// Several accounts per connector (docs/several-accounts.md).
	SetDefaultConnection(ctx context.Context, project, subject, id string) error
	DisallowAgent(ctx context.Context, project, subject, connectionID, clientID string) error
	ListGrants(ctx context.Context, project, subject string) ([]store.Grant, error)
	DeleteGrant(ctx context.Context, project, subject, clientID string, now time.Time) error
}

// LinkStore is what connect links use (webhook/links): opening a link for token exchange,
// the link page, and the hook that finishes a link when its callback succeeds.
type LinkStore interface {
	OpenLink(ctx context.Context, l store.Link, now time.Time) (store.Link, bool, error)
	GetLinkByCode(ctx context.Context, codeHash []byte, now time.Time) (store.Link, error)
	GetLink(ctx context.Context, id string) (store.Link, error)
	CloseLink(ctx context.Context, id string, state store.LinkState, now time.Time) error
	ListConnections(ctx context.Context, project, subject string) ([]store.Connection, error)
	FindPermission(ctx context.Context, project, subject, connector, clientID string) (store.AgentPermission, error)
	AllowAgent(ctx context.Context, p store.AgentPermission) error
}

// CallbackStore is what the upstream OAuth callback uses (webhook/callback): callback state
// from start to finish, the person it was started for, and the connection it saves.
type CallbackStore interface {
	upstream.ConnectionStore
	CreateCallbackState(ctx context.Context, s store.CallbackState) error
	GetCallbackState(ctx context.Context, stateHash []byte, now time.Time) (store.CallbackState, error)
	SetConfirmHash(ctx context.Context, stateHash, confirmHash []byte, now time.Time) error
	ConsumeCallbackState(ctx context.Context, stateHash []byte, now time.Time, check func(store.CallbackState) error) (store.CallbackState, error)
	EndCallbackStates(ctx context.Context, project, subject string) (int64, error)
	GetPerson(ctx context.Context, project, id string) (store.Person, error)
	FinishConnection(ctx context.Context, c store.Connection, since time.Time, check func(store.Person) error) (store.Connection, error)
	// Organisation-shared connections (docs/shared-connections.md).
	TakeSharedStart(ctx context.Context, codeHash []byte, now time.Time) (store.SharedStart, error)
	SaveSharedConnection(ctx context.Context, c store.Connection) (store.Connection, []store.Connection, error)
}

// ExchangeStore is what token exchange uses (webhook/exchange, RFC 8693) besides the connect
// links it opens through LinkStore: the subject token, the person's connections the agent may
// use, and the vault that hands out their upstream tokens.
type ExchangeStore interface {
	upstream.ConnectionStore
	SubjectAccess(ctx context.Context, hash []byte, connector string) (store.Token, store.AgentAccess, error)
	AgentAccess(ctx context.Context, project, subject, connector, clientID string) (store.AgentAccess, error)
	// ListConnections with store.SharedSubject reads an Organisation connector's shared
	// connection (docs/shared-connections.md).
	ListConnections(ctx context.Context, project, subject string) ([]store.Connection, error)
}

// IdentityAssertionStore is what ID-JAGs use (webhook/idjag): redeeming one spends its jti,
// finds or creates the person and issues tokens; issuing one reads the subject token and the
// person.
type IdentityAssertionStore interface {
	// UseOnce spends an assertion's jti (store.Replays).
	UseOnce(ctx context.Context, key []byte, expiresAt, now time.Time) error
	FindPerson(ctx context.Context, project, source, sourceSubject string) (store.Person, error)
	UpsertPerson(ctx context.Context, p store.Person) (store.Person, error)
	GetPerson(ctx context.Context, project, id string) (store.Person, error)
	CreateTokens(ctx context.Context, tokens ...store.Token) error
	GetToken(ctx context.Context, hash []byte) (store.Token, error)
}

// PasskeyStore is what passkeys use (docs/passkeys.md): signing in with one (webhook/signin)
// and enrolling and removing them on the account page (webhook/account), with the ceremonies
// between a challenge and its answer.
type PasskeyStore interface {
	AddPasskey(ctx context.Context, k store.Passkey) error
	GetPasskey(ctx context.Context, project string, credentialID []byte) (store.Passkey, error)
	ListPasskeys(ctx context.Context, project, subject string) ([]store.Passkey, error)
	DeletePasskey(ctx context.Context, project, subject string, credentialID []byte) error
	UsePasskey(ctx context.Context, project string, credentialID []byte, signCount uint32, backupState bool, now time.Time) error
	CreatePasskeyCeremony(ctx context.Context, c store.PasskeyCeremony) error
	TakePasskeyCeremony(ctx context.Context, idHash []byte, now time.Time) (store.PasskeyCeremony, error)
	GetPerson(ctx context.Context, project, id string) (store.Person, error)
}

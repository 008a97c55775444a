// Package config is the compiled, validated runtime configuration the HTTP server reads. The
// controllers build it from Project, OAuthClient, RedirectPolicy and Connector resources and the
// Secrets they reference; handlers only ever see a Snapshot, never the raw objects, and never
// call the Kubernetes API.
//
// A Snapshot is immutable once published: handlers Load it once per request and use that one
// value throughout, so a request never sees half of an update.
package config

import (
	"crypto"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/jwtbundle"

	"latchkey.dev/latchkey/internal/authzdetails"
	"latchkey.dev/latchkey/internal/policy"
)

// Snapshot is everything the server needs, for every project.
type Snapshot struct {
	// Projects by key "namespace/name".
	Projects map[string]*Project
	// Version increases with every publication (for metrics and logs).
	Version uint64
}

// Project returns the project with the given key, or nil.
func (s *Snapshot) Project(key string) *Project {
	if s == nil {
		return nil
	}
	return s.Projects[key]
}

// Project is one compiled Project resource with everything attached to it.
type Project struct {
	Key         string // "namespace/name"
	Namespace   string
	Name        string
	DisplayName string
	// Issuer is {publicURL}/{namespace}/{name}, without a trailing slash.
	Issuer string

	SignIn       SignIn
	Lifetimes    Lifetimes
	Registration Registration
	// Clients declared as OAuthClient resources, by client id.
	Clients map[string]*Client
	// Connectors by key "namespace/name", and by their token-exchange audience.
	Connectors           map[string]*Connector
	ConnectorsByAudience map[string]*Connector
	// Redirects is the union of every RedirectPolicy attached to the project.
	Redirects RedirectRules
	// AccessPolicy is the project's compiled AccessPolicies and decision point (internal/policy),
	// asked at consent, token issuance and token exchange; nil allows (docs/policy.md).
	AccessPolicy *policy.Set
	// EventSinks receive security events (CloudEvents over HTTP, HMAC-signed), including those
	// that are Unavailable.
	EventSinks []EventSink
	// SigningKeys sign JWT access tokens (RFC 9068) and are published at jwks.json, newest
	// first: the first that Signs at a moment signs (Signer), the rest are kept for overlap
	// during rotation. Empty also when the project's signing key Secret is missing or does not
	// parse.
	SigningKeys []SigningKey
	// RequireDPoP: every token request must carry a DPoP proof (RFC 9449).
	RequireDPoP bool
	// RequireDPoPNonce: every DPoP proof at the token endpoint must carry a server nonce.
	RequireDPoPNonce bool
	// RequirePAR: every authorization request must be pushed first (RFC 9126).
	RequirePAR bool
	// IdentityAssertions: ID-JAGs the Project redeems and issues (zero: neither).
	IdentityAssertions IdentityAssertions
	// Branding is the Project's own look on its pages; the zero value is Latchkey's default
	// look. Only what passed validation is here (docs/branding.md).
	Branding Branding
	// DefaultLanguage is the BCP 47 tag ("en", "de", "fr") of the language the Project speaks
	// when no browser says which it prefers: the token-exchange refusal's connect_message, and
	// a page whose request has no Accept-Language. "" is English.
	DefaultLanguage string
	// AuthorizationDetails are the RFC 9396 types the Project accepts (zero: none).
	AuthorizationDetails authzdetails.Types
}

// Branding is what a Project changes on its pages. Colours are "#rrggbb" that reached WCAG 2.2 AA
// contrast where the pages use them; "" keeps the default colour.
type Branding struct {
	// Accent and AccentHover colour the main buttons in light mode (white text on them).
	Accent, AccentHover string
	// DarkAccent and DarkAccentHover colour the main buttons in dark mode (near-black text).
	DarkAccent, DarkAccentHover string
	// Logo is nil without a usable logo.
	Logo *Logo
	// SupportURL is the https address of the pages' Help link, or "".
	SupportURL string
}

// Logo is an image the server serves under the Project's issuer.
type Logo struct {
	// Data is the image, at most LogoMaxBytes.
	Data []byte
	// ContentType is "image/png" or "image/webp": what the bytes were sniffed as, never what
	// their source claimed.
	ContentType string
	// Hash is the hex SHA-256 of Data; it is part of the logo's address, so the address changes
	// whenever the image does and browsers may cache it for good.
	Hash string
}

// LogoMaxBytes is the largest logo a Project may use.
const LogoMaxBytes = 64 << 10

// SignIn says how people sign in to the project; either or both may be set.
type SignIn struct {
	// Passwords by lower-cased email.
	Passwords map[string]PasswordUser
	// PasswordsUnavailable: the project names a password file that is missing or does not
	// parse. Passwords is empty, password sign-in is refused, and nobody of the file is active
	// until it is readable again (fail closed: docs/leavers.md, decision 0050).
	PasswordsUnavailable bool
	OIDC                 *OIDCProvider
	// RequirePhishingResistant: the recent sign-in of connect links and account actions must
	// be with a passkey (docs/passkeys.md).
	RequirePhishingResistant bool
}

// PasswordUser is one line of the password file Secret.
type PasswordUser struct {
	Email string
	Name  string
	// Hash is a bcrypt ("$2a$…"/"$2b$…") or argon2id PHC ("$argon2id$…") string.
	Hash string
}

// OIDCProvider is the company's identity provider.
type OIDCProvider struct {
	Issuer       string
	ClientID     string
	ClientSecret string
	Scopes       []string
	// Label on the sign-in button ("Sign in with Acme SSO").
	Label string
	// Unavailable: the client secret's Secret is missing or empty, so sign-in with the provider
	// is refused. Issuer stays set: the provider's people remain people of the project.
	Unavailable bool
	// RecheckInterval, when not zero, is how long the provider's word that a person may still
	// sign in is trusted before a refresh asks it again (docs/leavers.md).
	RecheckInterval time.Duration
	// AllowedEmailDomains, when not empty, are the only email domains (lower-case, exact) whose
	// people may sign in, and only with email_verified true (decision 0063).
	AllowedEmailDomains []string
	// AllowedGroups, when not empty, admits only people whose GroupsClaim names one of them.
	AllowedGroups []string
	GroupsClaim   string
}

// Lifetimes of everything a project issues. Controllers fill defaults, so every field is set.
type Lifetimes struct {
	Session       time.Duration // default 12h
	RecentSignIn  time.Duration // default 15m: "signed in within the last fifteen minutes"
	AuthCode      time.Duration // default 1m
	AccessToken   time.Duration // default 1h
	RefreshToken  time.Duration // default 30 days
	RefreshGrace  time.Duration // default 10s
	Link          time.Duration // default 30m
	CallbackState time.Duration // default 10m
}

// DefaultLifetimes are the values docs/projects-and-clients.md ("Lifetimes")
// lists, each chosen for what it protects or as peers set it.
func DefaultLifetimes() Lifetimes {
	return Lifetimes{
		Session:       12 * time.Hour,
		RecentSignIn:  15 * time.Minute,
		AuthCode:      time.Minute,
		AccessToken:   time.Hour,
		RefreshToken:  30 * 24 * time.Hour,
		RefreshGrace:  10 * time.Second,
		Link:          30 * time.Minute,
		CallbackState: 10 * time.Minute,
	}
}

// RegistrationMode is the project's dynamic client registration policy.
type RegistrationMode string

const (
	RegistrationOpen               RegistrationMode = "Open"
	RegistrationClosed             RegistrationMode = "Closed"
	RegistrationInitialAccessToken RegistrationMode = "InitialAccessToken"
)

type Registration struct {
	Mode RegistrationMode
	// InitialAccessTokenHashes are SHA-256 hashes of accepted initial access tokens. Empty in
	// mode InitialAccessToken (the Secret is missing or holds no token) refuses every
	// registration.
	InitialAccessTokenHashes [][]byte
	// ClientIDMetadataDocuments: accept https client ids whose metadata document is fetched.
	ClientIDMetadataDocuments bool
	// ClientCredentialsResources and ClientCredentialsScopes are the only resources and scopes
	// a registered client's client_credentials tokens may carry; empty means none
	// (docs/decisions/0018).
	ClientCredentialsResources []string
	ClientCredentialsScopes    []string
	// Scopes, when not empty, are the only scopes a registered client may ask a person for at
	// the authorization endpoint (docs/decisions/0076); empty means any.
	Scopes []string
}

// TokenFormat of access tokens issued to a client.
type TokenFormat string

const (
	TokenOpaque TokenFormat = "opaque"
	TokenJWT    TokenFormat = "jwt"
)

// DeclaredClientPrefix starts the id of every client declared as an OAuthClient resource. A
// token held by such an id that is not in the snapshot belongs to a deleted (or no longer
// ready) OAuthClient, so the server can refuse it without a database read.
const DeclaredClientPrefix = "lkc_"

// ClientGone reports whether id was declared as an OAuthClient that is no longer in the
// project (deleted, or not ready): tokens it holds are refused. Registered clients are not
// covered here; deleting one revokes its tokens in the store.
func (p *Project) ClientGone(id string) bool {
	return len(id) > len(DeclaredClientPrefix) && id[:len(DeclaredClientPrefix)] == DeclaredClientPrefix && p.Clients[id] == nil
}

// Client is a statically declared OAuthClient.
type Client struct {
	ID string
	// SecretHash is SHA-256 of the client secret; nil for public clients.
	SecretHash              []byte
	Name                    string
	RedirectURIs            []string
	GrantTypes              []string
	Scopes                  []string
	TokenEndpointAuthMethod string
	AccessTokenFormat       TokenFormat
	// Connectors this client may exchange tokens for (keys); empty means none.
	Connectors []string
	// Resources are the RFC 8707 resource identifiers this client serves as a resource server
	// (an MCP server's URL). A person's access token issued for one of them may be presented
	// by this client in a token exchange, as an MCP server exchanges its caller's token.
	Resources []string
	// MayAct is the id of the one other declared client that may exchange this client's
	// tokens for its people (RFC 8693 §4.4 may_act, docs/delegation.md); "" lets any client
	// the token is for.
	MayAct string
	// Source names the resource, "namespace/name", for messages.
	Source string
	// RequireDPoP: every token request of this client must carry a DPoP proof.
	RequireDPoP bool
	// RequirePAR: every authorization request of this client must be pushed first.
	RequirePAR bool
	// JWKS (a JSON Web Key Set document) or JWKSURI holds the public keys of a private_key_jwt
	// client.
	JWKS    []byte
	JWKSURI string
	// SecretJWTKey is the client secret itself, only for a client_secret_jwt client: an HS256
	// assertion can only be checked with it. It lives in memory only (never in the database).
	SecretJWTKey []byte
	// BackchannelDeliveryMode ("poll" or "ping") and BackchannelNotificationEndpoint: how a
	// CIBA client learns a person answered (docs/approvals.md).
	BackchannelDeliveryMode         string
	BackchannelNotificationEndpoint string
	// Workload is the platform identity of a client with TokenEndpointAuthMethod
	// "workload_identity" (nil for every other client; docs/workload-identity.md).
	Workload *Workload
}

// Workload is the one workload whose platform-issued JWT authenticates a client: a Kubernetes
// ServiceAccount (ServiceAccountNamespace and ServiceAccountName) or a SPIFFE ID (SPIFFEID
// with SPIFFEBundle). The controllers set exactly one.
type Workload struct {
	ServiceAccountNamespace string
	ServiceAccountName      string
	SPIFFEID                string
	// SPIFFEBundle holds the JWT-SVID keys of SPIFFEID's trust domain, as compiled from the
	// trust bundle.
	SPIFFEBundle *jwtbundle.Bundle
}

// ServiceAccountSubject is the username Kubernetes gives a ServiceAccount, and the sub of its
// tokens: "system:serviceaccount:NAMESPACE:NAME"; "" when w names no ServiceAccount.
func (w *Workload) ServiceAccountSubject() string {
	if w == nil || w.ServiceAccountName == "" {
		return ""
	}
	return "system:serviceaccount:" + w.ServiceAccountNamespace + ":" + w.ServiceAccountName
}

// Connector is a compiled upstream OAuth service.
type Connector struct {
	Key         string // "namespace/name"
	Namespace   string
	Name        string
	DisplayName string // "GitHub"
	Preset      string // the catalog preset's name ("github"), or ""
	// Audience is the identifier agents send as `audience` in token exchange.
	Audience string
	// CallbackURL is the connector's own fixed callback, {issuer} followed by
	// CallbackPath(Namespace, Name): one per connector, so a code one service issued can only be
	// redeemed at the token endpoint of the connector it was started for (docs/decisions/0021).
	CallbackURL string

	AuthURL       string
	TokenURL      string
	UserInfoURL   string
	RevocationURL string
	// OIDCIssuer, when set, reads the account from the ID token instead of UserInfoURL.
	OIDCIssuer       string
	ClientID         string
	ClientSecret     string
	Scopes           []string
	PKCE             bool
	AuthParams       map[string]string
	AccountIDField   string // JSON field (or dotted path) of userinfo naming the stable account id ("id")
	AccountNameField string // JSON field (or dotted path) naming the account for people ("login")
	// SelectAccountParams are added to the authorization request when the person connects a
	// further account, so the service lets them pick another one than the one signed in there
	// (docs/several-accounts.md); AccountHintParam names the parameter that suggests the
	// account the agent named. Both empty: the service reuses its signed-in session.
	SelectAccountParams map[string]string
	AccountHintParam    string

	// The service's dialect (docs/connectors-for-admins.md, docs/decisions/0056). Zero values are
	// RFC 6749's.

	// TokenAuth is how the token endpoint authenticates Latchkey: TokenAuthPost (also when
	// empty), TokenAuthBasic or TokenAuthNone.
	TokenAuth string
	// TokenRequestJSON sends the token request's parameters as a JSON object instead of a form.
	TokenRequestJSON bool
	// AccessTokenField is the dotted path of the access token in the token answer; empty is
	// "access_token". Its siblings hold the refresh token, expiry, type and scope.
	AccessTokenField string
	// ScopeSeparator joins scopes in the authorization request; empty is " ".
	ScopeSeparator string
	// ScopeParam is the authorization request parameter carrying the scopes; empty is "scope".
	ScopeParam string
	// UserInfoMethod is "GET" (also when empty) or "POST"; UserInfoBody, when set, is the JSON
	// body of the POST.
	UserInfoMethod string
	UserInfoBody   string
	// Headers are sent on every call to the service.
	Headers map[string]string
	// RevocationStyle is RevokeRFC7009 (also when empty), RevokeGitHubGrant or RevokeBearer.
	RevocationStyle string
	// APIKey, when set, makes this a connector people connect by pasting an API key or personal
	// access token on a Latchkey page (docs/api-key-connectors.md); the OAuth fields above are
	// then empty, and CallbackURL too.
	APIKey *APIKey
	// RefreshURL, when set, is where refresh requests go instead of TokenURL (Figma).
	RefreshURL string
	// Assertion signs the client assertion of TokenAuthPrivateKeyJWT (RFC 7523); nil otherwise.
	Assertion *ClientAssertion
	// TenantClaim, when set, lets the ID token issuer be a template: the issuer of the OIDC
	// discovery document may contain "{tenantid}", filled from this claim of each ID token
	// ("tid" at Microsoft) before it is compared with the token's iss.
	TenantClaim string
	// AllowedTenants, when set, are the only values TenantClaim may have.
	AllowedTenants []string
	// AllowedNetworks are the address ranges outside the public internet that the server may
	// dial for this connector's token, userinfo, discovery, key and revocation endpoints: the
	// Project's spec.upstreamNetwork.allowedCIDRs. Empty (the default) dials public addresses
	// only (internal/netguard).
	AllowedNetworks []netip.Prefix

	// Shared: the Connector's spec.sharing is Organisation. People connect nothing; the one
	// shared connection (store.SharedSubject) serves the agents of SharedClients
	// (docs/shared-connections.md).
	Shared bool
	// SharedClients are the OAuthClients ("namespace/name", Client.Source) the Project's
	// spec.sharedConnections lets use the shared account; empty when not Shared.
	SharedClients []string

	// Proxy, when set, lets agents call the service through the token proxy and Envoy
	// external authorization (docs/token-proxy.md); nil refuses every call.
	Proxy *Proxy
}

// Proxy is where the token proxy forwards a Connector's calls, and which it forwards.
type Proxy struct {
	// BaseURL is the API's address without a trailing slash (https://api.github.com).
	BaseURL string
	// Rules admit calls; none admits nothing.
	Rules []ProxyRule
}

// ProxyRule admits calls with one of Methods to PathPrefix or below it, segment by segment.
type ProxyRule struct {
	Methods    []string
	PathPrefix string
}

// APIKey is how a pasted key is checked and sent. Every field is set (the controllers fill the
// defaults).
type APIKey struct {
	// CheckURL is called with the key once, before it is kept: 200 and a JSON object mean a
	// good key; 401 or 403 a wrong one.
	CheckURL string
	// Method is "GET" or "POST" (an empty body).
	Method string
	// Header carries the key, canonical ("Authorization", "X-Api-Key").
	Header string
	// Format is the header's value with APIKeyPlaceholder where the key goes, once.
	Format string
	// IDField and NameField are dotted paths into the check call's JSON answer.
	IDField, NameField string
	// Hint is shown to the person above the key field; plain text, may be "".
	Hint string
}

// APIKeyPlaceholder stands for the key in APIKey.Format.
const APIKeyPlaceholder = "{key}"

// HeaderValue is the value of Header for key.
func (k *APIKey) HeaderValue(key string) string {
	return strings.Replace(k.Format, APIKeyPlaceholder, key, 1)
}

// Bearer reports whether the key is sent as an RFC 6750 bearer token, so token exchange can
// call it token_type Bearer; any other way is N_A (RFC 8693 §2.2.1) and the agent sends it as
// the service documents.
func (k *APIKey) Bearer() bool {
	return strings.EqualFold(k.Header, "Authorization") && k.Format == "Bearer "+APIKeyPlaceholder
}

// Token endpoint authentication methods of a Connector (RFC 6749 §2.3.1, named as in RFC 7591).
const (
	TokenAuthPost  = "client_secret_post"
	TokenAuthBasic = "client_secret_basic"
	TokenAuthNone  = "none"
	// TokenAuthPrivateKeyJWT signs a client assertion with Connector.Assertion (RFC 7523 §2.2).
	TokenAuthPrivateKeyJWT = "private_key_jwt"
)

// ClientAssertion is the key a private_key_jwt Connector signs its client assertions with.
type ClientAssertion struct {
	// Key signs; it is an *rsa.PrivateKey or *ecdsa.PrivateKey.
	Key crypto.Signer
	// Algorithm is the JWS algorithm: RS256, PS256 or ES256.
	Algorithm string
	// KeyID, when set, is the assertion's kid header.
	KeyID string
	// X5TS256 and X5T, when set, are the base64url SHA-256 and SHA-1 thumbprints of the key's
	// certificate, sent as the x5t#S256 and x5t headers (Microsoft finds certificate credentials
	// by them).
	X5TS256, X5T string
}

// Revocation styles of a Connector.
const (
	// RevokeRFC7009 posts each token to the revocation endpoint (RFC 7009).
	RevokeRFC7009 = "RFC7009"
	// RevokeGitHubGrant is GitHub's DELETE /applications/{client_id}/grant.
	RevokeGitHubGrant = "GitHubGrant"
	// RevokeBearer posts to the revocation endpoint with the access token as the Bearer
	// credential and no body (Dropbox's auth/token/revoke).
	RevokeBearer = "Bearer"
)

// CallbackPath is a connector's callback path under its Project's issuer.
func CallbackPath(namespace, name string) string {
	return "/connectors/" + namespace + "/" + name + "/callback"
}

// RedirectRules is what the project recognises as a safe place for access to go
// (docs/recognised-apps.md).
type RedirectRules struct {
	Claude     bool
	ChatGPT    bool
	Loopback   bool
	AppSchemes bool
	// Named are the policies' own recognised callbacks.
	Named []NamedRedirect
	// OnlyRecognisedApps refuses clients with any unrecognised registered redirect.
	OnlyRecognisedApps bool
}

// NamedRedirect is an exact URI, or one with a single "{placeholder}" path segment.
type NamedRedirect struct {
	Name    string
	Pattern string
}

// DefaultRedirectRules applies when no RedirectPolicy attaches to a project.
func DefaultRedirectRules() RedirectRules {
	return RedirectRules{Claude: true, ChatGPT: true, Loopback: true, AppSchemes: true}
}

// EventSink receives CloudEvents.
type EventSink struct {
	Name    string
	URL     string
	HMACKey []byte
	// Keys are every key of the sink's Secret, HMACKey first; each signs every delivery while
	// a secret is rotated (docs/audit.md). Empty means HMACKey alone.
	Keys [][]byte
	// Types, when not empty, are the event types the sink receives: exact ("token.exchanged") or
	// a family ("signin.*"). Empty receives every type.
	Types []string
	// Unavailable: the HMAC key's Secret is missing or too short, so nothing is sent to the sink
	// (HMACKey is nil). Events are still queued for it and wait until it is back.
	Unavailable bool
}

// Wants reports whether s receives events of type typ (see Types).
func (s *EventSink) Wants(typ string) bool {
	if len(s.Types) == 0 {
		return true
	}
	fam, _, _ := strings.Cut(typ, ".")
	for _, t := range s.Types {
		if t == typ || t == fam+".*" {
			return true
		}
	}
	return false
}

// SigningKeys are the keys that sign a delivery to s.
func (s *EventSink) SigningKeys() [][]byte {
	if len(s.Keys) > 0 {
		return s.Keys
	}
	return [][]byte{s.HMACKey}
}

// SigningKey is a private key for JWT access tokens, PEM or JWK as stored in its Secret.
type SigningKey struct {
	ID        string
	Algorithm string // "ES256" or "RS256"
	Private   any    // crypto.Signer
	// SignsFrom and SignsUntil bound when the key signs; PublishedUntil when it leaves the
	// JWKS. Zero means no bound. Keys the operator rotates carry them (announce, use, retire:
	// docs/operations.md "Keys: creation and rotation"); keys from a Project's own Secret do not.
	SignsFrom, SignsUntil, PublishedUntil time.Time
}

// Signs reports whether the key signs tokens at now.
func (k SigningKey) Signs(now time.Time) bool {
	return !now.Before(k.SignsFrom) && (k.SignsUntil.IsZero() || now.Before(k.SignsUntil))
}

// Published reports whether the key is in the JWKS at now.
func (k SigningKey) Published(now time.Time) bool {
	return k.PublishedUntil.IsZero() || now.Before(k.PublishedUntil)
}

// Signer is the key that signs at now: the first of keys that does, so newest first.
func Signer(keys []SigningKey, now time.Time) (SigningKey, bool) {
	for _, k := range keys {
		if k.Signs(now) {
			return k, true
		}
	}
	return SigningKey{}, false
}

// Holder publishes snapshots to readers. The zero value holds nothing (Load returns nil).
type Holder struct {
	p atomic.Pointer[Snapshot]
}

// Load returns the current snapshot, nil before the first publication.
func (h *Holder) Load() *Snapshot { return h.p.Load() }

// Store publishes a snapshot.
func (h *Holder) Store(s *Snapshot) { h.p.Store(s) }

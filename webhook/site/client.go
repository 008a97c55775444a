package site

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/store"
)

// Grant types and client authentication methods Latchkey knows.
const (
	GrantAuthorizationCode = "authorization_code"
	GrantRefreshToken      = "refresh_token"
	GrantClientCredentials = "client_credentials"
	GrantTokenExchange     = "urn:ietf:params:oauth:grant-type:token-exchange"
	GrantCIBA              = "urn:openid:params:grant-type:ciba"

	AuthNone              = "none"
	AuthClientSecretBasic = "client_secret_basic"
	AuthClientSecretPost  = "client_secret_post"
	AuthClientSecretJWT   = "client_secret_jwt"
	AuthPrivateKeyJWT     = "private_key_jwt"
	// AuthWorkloadIdentity: the client sends its platform's token (a Kubernetes ServiceAccount
	// token or a SPIFFE JWT-SVID) as a client assertion; it has no secret.
	AuthWorkloadIdentity = "workload_identity"
)

// Client is one OAuth client as every flow sees it, whichever way it came to exist. Handlers
// must treat it as read-only: static clients share their slices with the config snapshot.
type Client struct {
	ID string
	// SecretHash is SHA-256 of the client secret; nil for public clients.
	SecretHash   []byte
	Name         string
	URI          string
	LogoURI      string
	RedirectURIs []string
	GrantTypes   []string
	// Scopes the client may ask for; empty means any scope.
	Scopes            []string
	AuthMethod        string
	AccessTokenFormat config.TokenFormat
	// Connectors the client may exchange tokens for (RFC 8693 token exchange).
	Connectors []string
	// Registered is true for clients registered at run time (RFC 7591) or described by a
	// client ID metadata document, whose name and logo are only the client's own claims.
	Registered bool
	// Vouched is the host that serves the client's ID metadata document ("" for other
	// clients): the domain that vouches for the client, which the consent page names.
	Vouched string
	// RequireDPoP: every token request must carry a DPoP proof (an OAuthClient's
	// spec.requireDPoP, or dpop_bound_access_tokens in a registration, RFC 9449 §5.2).
	RequireDPoP bool
	// RequirePAR: authorization requests must be pushed first (RFC 9126 §6).
	RequirePAR bool
	// JWKS (a JSON Web Key Set document) or JWKSURI holds a private_key_jwt client's keys.
	JWKS    []byte
	JWKSURI string
	// SecretJWTKey is the client secret itself, for client_secret_jwt only (declared clients).
	SecretJWTKey []byte
	// Workload is the platform identity of a workload_identity client (declared clients).
	Workload *config.Workload
}

// Public reports whether the client has no credential; PKCE is then its only proof. A
// private_key_jwt client has no secret but authenticates with its keys, a workload_identity
// client with its platform's token.
func (c *Client) Public() bool {
	return c.AuthMethod == AuthNone ||
		(len(c.SecretHash) == 0 && c.AuthMethod != AuthPrivateKeyJWT && c.AuthMethod != AuthWorkloadIdentity)
}

// registeredMetadata is what of a registered client's metadata is read beyond the columns.
type registeredMetadata struct {
	DPoPBoundAccessTokens bool `json:"dpop_bound_access_tokens"`
	RequirePAR            bool `json:"require_pushed_authorization_requests"`
}

// HasGrant reports whether the client may use the grant type.
func (c *Client) HasGrant(grantType string) bool { return slices.Contains(c.GrantTypes, grantType) }

// AllowsScopes reports whether every scope is one the client may ask for.
func (c *Client) AllowsScopes(scopes []string) bool {
	if len(c.Scopes) == 0 {
		return true
	}
	for _, s := range scopes {
		if !slices.Contains(c.Scopes, s) {
			return false
		}
	}
	return true
}

// ErrUnknownClient: no client with that id in the project.
var ErrUnknownClient = errors.New("unknown client")

// Client finds a client of the project: a declared OAuthClient first (no database read), then
// a registered one, then, if the project accepts them, a client ID metadata document.
func (e *Env) Client(ctx context.Context, p *config.Project, id string) (*Client, error) {
	if id == "" {
		return nil, ErrUnknownClient
	}
	if c := p.Clients[id]; c != nil {
		return FromConfig(c), nil
	}
	if strings.HasPrefix(id, "https://") {
		if e.ClientDocument == nil || !p.Registration.ClientIDMetadataDocuments {
			return nil, ErrUnknownClient
		}
		return e.ClientDocument(ctx, p, id)
	}
	sc, err := e.store.GetClient(ctx, p.Key, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrUnknownClient
	}
	if err != nil {
		return nil, err
	}
	return FromStore(sc), nil
}

// FromConfig views a declared OAuthClient. Unset grant types mean authorization_code with
// refresh; an unset auth method means a secret in the Basic header when there is a secret.
func FromConfig(c *config.Client) *Client {
	gt := c.GrantTypes
	if len(gt) == 0 {
		gt = []string{GrantAuthorizationCode, GrantRefreshToken}
	}
	am := c.TokenEndpointAuthMethod
	if am == "" {
		am = AuthClientSecretBasic
		if len(c.SecretHash) == 0 {
			am = AuthNone
		}
	}
	return &Client{
		ID:                c.ID,
		SecretHash:        c.SecretHash,
		Name:              c.Name,
		RedirectURIs:      c.RedirectURIs,
		GrantTypes:        gt,
		Scopes:            c.Scopes,
		AuthMethod:        am,
		AccessTokenFormat: c.AccessTokenFormat,
		Connectors:        c.Connectors,
		RequireDPoP:       c.RequireDPoP,
		RequirePAR:        c.RequirePAR,
		JWKS:              c.JWKS,
		JWKSURI:           c.JWKSURI,
		SecretJWTKey:      c.SecretJWTKey,
		Workload:          c.Workload,
	}
}

// FromStore views a client registered at run time.
func FromStore(c store.Client) *Client {
	var md registeredMetadata
	if len(c.Metadata) > 0 {
		// Written by the registration endpoint from a document it validated; a row that no
		// longer parses asks for nothing more.
		_ = json.Unmarshal(c.Metadata, &md)
	}
	return &Client{
		RequireDPoP:  md.DPoPBoundAccessTokens,
		RequirePAR:   md.RequirePAR,
		ID:           c.ID,
		SecretHash:   c.SecretHash,
		Name:         c.Name,
		URI:          c.URI,
		LogoURI:      c.LogoURI,
		RedirectURIs: c.RedirectURIs,
		GrantTypes:   c.GrantTypes,
		Scopes:       strings.Fields(c.Scope),
		AuthMethod:   c.TokenEndpointAuthMethod,
		Registered:   true,
	}
}

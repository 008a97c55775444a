package register

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"latchkey.dev/latchkey/internal/clientdoc"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/webhook/oauth"
	"latchkey.dev/latchkey/webhook/site"
)

// ClientDocument is the site.Env seam for client ID metadata documents: it turns a client id
// that is an https URL into a client, from the document f fetches there. The document's
// metadata passes the very checks a registration does (Metadata.Normalize: the same redirect
// URI rules, names, addresses), so a client gains nothing by describing itself one way rather
// than the other; the redirect policy then applies to its redirect URIs wherever the client is
// used, exactly as to registered ones.
//
// A document that does not qualify makes the id an unknown client (site.ErrUnknownClient,
// wrapping the *clientdoc.Error that says why): it is the client's mistake, never a 500.
func ClientDocument(f *clientdoc.Fetcher) func(ctx context.Context, p *config.Project, id string) (*site.Client, error) {
	return func(ctx context.Context, p *config.Project, id string) (*site.Client, error) {
		doc, err := f.Get(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", site.ErrUnknownClient, err)
		}
		c, err := documentClient(doc)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", site.ErrUnknownClient, err)
		}
		return c, nil
	}
}

// documentGrants are what a public client described by a document may use. Token exchange
// and client credentials are for clients an administrator declared.
var documentGrants = []string{site.GrantAuthorizationCode, site.GrantRefreshToken}

func documentClient(doc *clientdoc.Document) (*site.Client, error) {
	var m Metadata
	if err := json.Unmarshal(doc.Raw, &m); err != nil {
		return nil, &clientdoc.Error{Reason: "the document's metadata has the wrong shape"}
	}
	m.TokenEndpointAuthMethod = site.AuthNone
	if err := m.Normalize(); err != nil {
		return nil, &clientdoc.Error{Reason: oauth.AsError(err).Description}
	}
	for _, g := range m.GrantTypes {
		if !slices.Contains(documentGrants, g) {
			return nil, &clientdoc.Error{Reason: "grant type " + quote(g) + " is not available to clients described by a document"}
		}
	}
	if !slices.Contains(m.GrantTypes, site.GrantAuthorizationCode) {
		return nil, &clientdoc.Error{Reason: "grant_types must include authorization_code"}
	}
	method := site.AuthNone
	if doc.AuthMethod == site.AuthPrivateKeyJWT {
		method = site.AuthPrivateKeyJWT
	}
	return &site.Client{
		JWKSURI:      doc.JWKSURI,
		JWKS:         doc.JWKS,
		ID:           doc.ClientID,
		Name:         m.ClientName,
		URI:          m.ClientURI,
		LogoURI:      m.LogoURI,
		RedirectURIs: m.RedirectURIs,
		GrantTypes:   m.GrantTypes,
		Scopes:       strings.Fields(m.Scope),
		AuthMethod:   method,
		Registered:   true,
		Vouched:      doc.Host,
		RequireDPoP:  m.DPoPBoundAccessTokens,
		RequirePAR:   m.RequirePushedAuthorizationRequests,
	}, nil
}

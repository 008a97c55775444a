package oauth

import (
	"context"
	"slices"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/webhook/site"
)

// clientCredentials issues an access token to a confidential client acting for itself
// (RFC 6749 §4.4). There is no refresh token: the client can always ask again. It costs one
// store write.
//
// Such a token names no person, so what it may reach is what an administrator wrote down, never
// what the client asks for (docs/decisions/0018): a declared OAuthClient gets only the resources
// of its spec.resources and only the scopes of its spec.scopes; a client that registered itself
// gets only the resources and scopes the Project's registration policy lists
// (spec.registration.clientCredentials, none by default), its scopes further limited to those
// it registered. Anything else is invalid_target (RFC 8707 §2) or invalid_scope (RFC 6749 §5.2).
func clientCredentials(ctx context.Context, st Store, req *TokenRequest) (*TokenResponse, error) {
	client := req.Client
	if client.Public() {
		return nil, ErrUnauthorizedClient.WithDescription("client_credentials needs a confidential client")
	}
	// Nobody approves details for a client acting for itself, and no policy says which it may
	// have: refused rather than ignored, so the client does not take a token for narrower
	// than it is (docs/authorization-details.md).
	if req.Form.Has("authorization_details") {
		return nil, ErrInvalidAuthorizationDetails.WithDescription("authorization_details are approved by a person; client_credentials takes none")
	}
	allowed, declared := machineLimits(req.Project, client)
	scopes, err := machineScopes(req.Form.Get("scope"), allowed.scopes)
	if err != nil {
		return nil, err
	}
	audience, err := ParseResources(req.Form["resource"])
	if err != nil {
		return nil, err
	}
	for _, aud := range audience {
		if slices.Contains(allowed.resources, aud) {
			continue
		}
		if declared {
			return nil, ErrInvalidTarget.WithDescription("this client may get client_credentials tokens only for the resources its OAuthClient lists in spec.resources")
		}
		return nil, ErrInvalidTarget.WithDescription("a client that registered itself may get client_credentials tokens only for the resources the project's registration policy lists")
	}
	tokens, resp, err := Mint(req.Project, req.Now, Issue{Client: client, Scopes: scopes, Audience: audience, JKT: req.JKT})
	if err != nil {
		return nil, Internal(err)
	}
	if err := st.CreateTokens(ctx, tokens...); err != nil {
		return nil, Internal(err)
	}
	recordIssued(ctx, req, site.GrantClientCredentials, tokens)
	return &resp, nil
}

// machineScopes is the scope of a client_credentials token: the requested scope, which must be
// within allowed, or all of allowed when none is requested. Unlike a person's authorization,
// where a client without a scope list may ask for any and the person consents to what is
// asked, nobody consents here: with nothing allowed the token carries no scope.
func machineScopes(requested string, allowed []string) ([]string, error) {
	req, err := ParseScope(requested)
	if err != nil {
		return nil, err
	}
	if req == nil {
		return slices.Clone(allowed), nil
	}
	if len(allowed) == 0 {
		return nil, ErrInvalidScope.WithDescription("this client's client_credentials tokens carry no scope; ask without scope")
	}
	if !Subset(req, allowed) {
		return nil, ErrInvalidScope.WithDescription("the requested scope exceeds what this client's client_credentials tokens may carry")
	}
	return req, nil
}

// limits are the resources and scopes a client's client_credentials tokens may carry.
type limits struct{ resources, scopes []string }

// machineLimits says what a client may get with client_credentials, and whether the client is a
// declared OAuthClient (limited by its own spec.resources and spec.scopes) rather than one that
// registered itself or is described by a metadata document (limited by the Project's
// registration policy, and to the scope it registered when it registered one).
func machineLimits(p *config.Project, client *site.Client) (limits, bool) {
	if c := p.Clients[client.ID]; c != nil && !client.Registered {
		return limits{resources: c.Resources, scopes: c.Scopes}, true
	}
	reg := p.Registration
	scopes := reg.ClientCredentialsScopes
	if len(client.Scopes) > 0 {
		scopes = slices.DeleteFunc(slices.Clone(scopes), func(s string) bool { return !slices.Contains(client.Scopes, s) })
	}
	return limits{resources: reg.ClientCredentialsResources, scopes: scopes}, false
}

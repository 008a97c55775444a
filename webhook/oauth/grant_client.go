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
// gets only the resources the Project's registration policy lists
// (spec.registration.clientCredentialsResources, none by default) and only the scopes it
// registered. Anything else is invalid_target (RFC 8707 §2) or invalid_scope (RFC 6749 §5.2).
func clientCredentials(ctx context.Context, req *TokenRequest) (*TokenResponse, error) {
	client := req.Client
	if client.Public() {
		return nil, ErrUnauthorizedClient.WithDescription("client_credentials needs a confidential client")
	}
	scopes, err := machineScopes(req.Form.Get("scope"), client.Scopes)
	if err != nil {
		return nil, err
	}
	audience, err := ParseResources(req.Form["resource"])
	if err != nil {
		return nil, err
	}
	allowed, declared := machineResources(req.Project, client)
	for _, aud := range audience {
		if slices.Contains(allowed, aud) {
			continue
		}
		if declared {
			return nil, ErrInvalidTarget.WithDescription("this client may get client_credentials tokens only for the resources its OAuthClient lists in spec.resources")
		}
		return nil, ErrInvalidTarget.WithDescription("a client that registered itself may get client_credentials tokens only for the resources the project's registration policy lists")
	}
	tokens, resp, err := Mint(req.Project, req.Now, Issue{Client: client, Scopes: scopes, Audience: audience})
	if err != nil {
		return nil, Internal(err)
	}
	if err := req.Env.Store.CreateTokens(ctx, tokens...); err != nil {
		return nil, Internal(err)
	}
	return &resp, nil
}

// machineScopes is the scope of a client_credentials token: the requested scope, which must be
// within what the client declared, or all of it when none is requested. Unlike a person's
// authorization, where an empty list means "any scope" and the person consents to what is
// asked, nobody consents here: a client that declared no scope gets a token without one.
func machineScopes(requested string, declared []string) ([]string, error) {
	req, err := ParseScope(requested)
	if err != nil {
		return nil, err
	}
	if req == nil {
		return slices.Clone(declared), nil
	}
	if len(declared) == 0 {
		return nil, ErrInvalidScope.WithDescription("this client declares no scopes, so its client_credentials tokens carry none; ask without scope")
	}
	if !Subset(req, declared) {
		return nil, ErrInvalidScope.WithDescription("the requested scope exceeds the scopes this client declares")
	}
	return req, nil
}

// machineResources lists the resources a client may name in a client_credentials request, and
// whether the client is a declared OAuthClient (whose list is its own spec.resources) rather
// than one that registered itself or is described by a metadata document (whose list is the
// Project's registration policy).
func machineResources(p *config.Project, client *site.Client) (allowed []string, declared bool) {
	if c := p.Clients[client.ID]; c != nil && !client.Registered {
		return c.Resources, true
	}
	return p.Registration.ClientCredentialsResources, false
}

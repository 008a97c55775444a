package oauth

import (
	"context"
)

// clientCredentials issues an access token to a confidential client acting for itself
// (RFC 6749 §4.4). There is no refresh token: the client can always ask again. It costs one
// store write.
func clientCredentials(ctx context.Context, req *TokenRequest) (*TokenResponse, error) {
	client := req.Client
	if client.Public() {
		return nil, ErrUnauthorizedClient.WithDescription("client_credentials needs a confidential client")
	}
	var scopes []string
	var err error
	if len(client.Scopes) == 0 {
		scopes, err = ParseScope(req.Form.Get("scope"))
	} else {
		scopes, err = grantScopes(req.Form.Get("scope"), client.Scopes)
	}
	if err != nil {
		return nil, err
	}
	audience, err := ParseResources(req.Form["resource"])
	if err != nil {
		return nil, err
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

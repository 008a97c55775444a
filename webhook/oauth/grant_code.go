package oauth

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"time"

	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/site"
)

// authorizationCode redeems an authorization code (RFC 6749 §4.1.3 with PKCE, RFC 7636).
// A code is good once: a second redemption revokes everything the first one issued.
//
//nolint:funlen // the steps of RFC 6749 §4.1.3 with PKCE in order; what is checked before the code is spent is the point
func authorizationCode(ctx context.Context, st Store, req *TokenRequest) (*TokenResponse, error) {
	f, env, p, client := req.Form, req.Env, req.Project, req.Client
	code := f.Get("code")
	if code == "" {
		return nil, ErrInvalidRequest.WithDescription("code is required")
	}
	verifier := f.Get("code_verifier")
	if verifier == "" {
		return nil, ErrInvalidRequest.WithDescription("code_verifier is required (PKCE)")
	}
	if !ValidVerifier(verifier) {
		return nil, ErrInvalidRequest.WithDescription("code_verifier is malformed")
	}
	resources, err := ParseResources(f["resource"])
	if err != nil {
		return nil, err
	}

	// Everything that proves the caller may redeem the code is checked before it is spent,
	// inside the redemption: a request that cannot redeem a leaked code cannot burn it for the
	// client it was issued to either.
	keyMismatch := false
	check := func(ac store.AuthCode) error {
		if ac.Project != p.Key || ac.ClientID != client.ID {
			return ErrInvalidGrant.WithDescription("the code was not issued to this client")
		}
		if !redirectMatches(f, ac, client.RedirectURIs) {
			return ErrInvalidGrant.WithDescription("redirect_uri does not match the authorization request")
		}
		if ac.CodeChallengeMethod != "S256" || !VerifyS256(verifier, ac.CodeChallenge) {
			return ErrInvalidGrant.WithDescription("code_verifier does not match the code challenge")
		}
		// A code bound to a key (dpop_jkt, or the DPoP proof of its pushed request, RFC 9449
		// §10) is redeemed only with a proof by that key: whoever intercepted it holds no key.
		if ac.DPoPJKT != "" && ac.DPoPJKT != req.JKT {
			keyMismatch = true
			return BoundKeyError("code")
		}
		return nil
	}
	hash := secret.Hash(code)
	ac, err := st.RedeemAuthCode(ctx, hash, req.Now, check)
	var refused Error
	switch {
	case errors.As(err, &refused):
		if keyMismatch {
			RecordBoundKeyRefused(ctx, req, site.GrantAuthorizationCode, ac.Subject)
		}
		return nil, refused
	case errors.Is(err, store.ErrNotFound):
		return nil, ErrInvalidGrant.WithDescription("the code is invalid or has expired")
	case errors.Is(err, store.ErrConflict):
		// Only a replay by someone who could have redeemed the code revokes what it issued:
		// anyone else merely learnt a spent code, and must not be able to end the tokens of
		// the client it was issued to.
		if check(ac) == nil {
			n, rerr := st.RevokeByCode(ctx, hash, req.Now)
			if rerr != nil {
				return nil, Internal(rerr)
			}
			env.Record(ctx, store.AuditRecord{
				Project: p.Key, Actor: "client:" + client.ID, Action: events.CodeReplay, Target: ac.Subject,
				Details: map[string]string{"client_id": ac.ClientID, "revoked": itoa(n)},
			})
		}
		return nil, ErrInvalidGrant.WithDescription("the code has already been used")
	case err != nil:
		return nil, Internal(err)
	}
	audience := ac.Resource
	if resources != nil {
		if !Subset(resources, ac.Resource) {
			return nil, ErrInvalidTarget.WithDescription("resource was not part of the authorization")
		}
		audience = resources
	}

	details, _, err := NarrowDetails(p, f, ac.AuthorizationDetails)
	if err != nil {
		return nil, err
	}
	is := Issue{
		Details:  details,
		Client:   client,
		Subject:  ac.Subject,
		Scopes:   ac.Scopes,
		Audience: audience,
		AuthTime: ac.AuthTime,
		CodeHash: hash,
		Refresh:  client.HasGrant("refresh_token"),
		Nonce:    ac.Nonce,
		JKT:      req.JKT,
	}
	// The person is read at every redemption, not only for an ID token: a code issued before
	// the person was removed from the project's sign-in buys nothing (docs/leavers.md). Ending
	// a person's access in the store deletes their codes too; this also covers the ways that
	// end it in the configuration (the password file, the sign-in issuer).
	person, err := st.GetPerson(ctx, p.Key, ac.Subject)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrInvalidGrant.WithDescription("the person can no longer sign in to this project")
	}
	if err != nil {
		return nil, Internal(err)
	}
	if !site.PersonActive(p, person) {
		return nil, ErrInvalidGrant.WithDescription("the person can no longer sign in to this project")
	}
	if err := allowedByPolicy(ctx, req, person, audience); err != nil {
		return nil, err
	}
	if slices.Contains(ac.Scopes, "openid") && len(p.SigningKeys) > 0 {
		is.Person = &person
	}
	tokens, resp, err := Mint(p, req.Now, is)
	if err != nil {
		return nil, Internal(err)
	}
	if err := storeCodeTokens(ctx, st, req.Now, hash, tokens); err != nil {
		return nil, err
	}
	recordIssued(ctx, req, "authorization_code", tokens)
	return &resp, nil
}

// redirectMatches: redirect_uri must be the one the authorization request sent. When that
// request sent none (allowed for a client with one registered redirect URI), the token request
// may omit it too (RFC 6749 §4.1.3), or send that one registered URI.
// storeCodeTokens stores what a code bought. A replay that came between spending the code and
// storing these tokens revoked nothing: it marked the code first, so the mark is seen here and
// the tokens end before they are handed out. A replay marking it later revokes them itself
// (store.AuthCodes).
func storeCodeTokens(ctx context.Context, st Store, now time.Time, hash []byte, tokens []store.Token) error {
	if err := st.CreateTokens(ctx, tokens...); err != nil {
		return Internal(err)
	}
	replayed, err := st.AuthCodeReplayed(ctx, hash)
	if err == nil && !replayed {
		return nil
	}
	if _, rerr := st.RevokeByCode(ctx, hash, now); rerr != nil || err != nil {
		return Internal(errors.Join(err, rerr))
	}
	return ErrInvalidGrant.WithDescription("the code has already been used")
}

func redirectMatches(f url.Values, ac store.AuthCode, registered []string) bool {
	got, sent := f.Get("redirect_uri"), f.Has("redirect_uri")
	if ac.RedirectURI != "" {
		return sent && got == ac.RedirectURI
	}
	return !sent || (len(registered) == 1 && got == registered[0])
}

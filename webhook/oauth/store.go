package oauth

import (
	"context"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// ReplayStore spends the jti of a DPoP proof or a client assertion, once (store.Replays): what
// Authenticate and PushedProof need, for flows that authenticate clients outside /token.
type ReplayStore interface {
	UseOnce(ctx context.Context, key []byte, expiresAt, now time.Time) error
}

// ResourceStore is what a request to one of the server's own resources is checked with
// (ResourceAccessToken, LookupAccessToken): its access token and its DPoP proof's jti.
type ResourceStore interface {
	ReplayStore
	GetToken(ctx context.Context, hash []byte) (store.Token, error)
}

// Store is what the OAuth endpoints use: codes are redeemed, tokens issued, rotated, looked up
// and revoked; userinfo and refresh read the person.
type Store interface {
	ResourceStore
	RedeemAuthCode(ctx context.Context, hash []byte, now time.Time, check func(store.AuthCode) error) (store.AuthCode, error)
	CreateTokens(ctx context.Context, tokens ...store.Token) error
	TokenHolder(ctx context.Context, hash []byte) (store.Token, store.Person, bool, error)
	RotateRefreshToken(ctx context.Context, r store.RotateRequest) (store.Rotation, error)
	RevokeToken(ctx context.Context, hash []byte, now time.Time) error
	RevokeFamily(ctx context.Context, familyID string, now time.Time) (int64, error)
	RevokeByCode(ctx context.Context, codeHash []byte, now time.Time) (int64, error)
	AuthCodeReplayed(ctx context.Context, hash []byte) (bool, error)
	GetPerson(ctx context.Context, project, id string) (store.Person, error)
}

// grant is a core grant handler, given the endpoints' store when it is mounted.
type grant func(ctx context.Context, st Store, req *TokenRequest) (*TokenResponse, error)

func (g grant) with(st Store) GrantFunc {
	return func(ctx context.Context, req *TokenRequest) (*TokenResponse, error) { return g(ctx, st, req) }
}

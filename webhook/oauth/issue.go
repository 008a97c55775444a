package oauth

import (
	"crypto"
	"errors"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"latchkey.dev/latchkey/internal/authzdetails"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/site"
)

// TokenResponse is a successful token endpoint response (RFC 6749 §5.1, RFC 8693 §2.2.1).
type TokenResponse struct {
	AccessToken     string `json:"access_token"`
	IssuedTokenType string `json:"issued_token_type,omitempty"`
	TokenType       string `json:"token_type"`
	ExpiresIn       int64  `json:"expires_in,omitempty"`
	RefreshToken    string `json:"refresh_token,omitempty"`
	Scope           string `json:"scope,omitempty"`
	IDToken         string `json:"id_token,omitempty"`
	// AuthorizationDetails are the details the access token carries (RFC 9396 §7).
	AuthorizationDetails []authzdetails.Detail `json:"authorization_details,omitempty"`
}

// Issue describes one issuance: an access token, optionally a refresh token and an ID token.
type Issue struct {
	Client   *site.Client
	Subject  string // empty for client_credentials
	Scopes   []string
	Audience []string
	AuthTime time.Time
	// FamilyID groups the tokens of one authorization; a new one is made when empty.
	FamilyID   string
	Generation int
	CodeHash   []byte
	Refresh    bool
	// RefreshScopes is the refresh token's scope when the access token is narrowed
	// (RFC 6749 §6 keeps the refresh token's scope); Scopes when nil.
	RefreshScopes []string
	// Person and Nonce, when set and the scope holds openid, produce an ID token.
	Person *store.Person
	Nonce  string
	// JKT, when set, binds the access token to that DPoP key (cnf.jkt, token_type DPoP) and,
	// for a public client, the refresh token too (RFC 9449 §5): a confidential client's
	// refresh token is already bound to it by client authentication.
	JKT string
	// Details are the RFC 9396 authorization_details the access token carries; RefreshDetails
	// the refresh token's when the access token is narrowed (like RefreshScopes), Details when
	// nil.
	Details, RefreshDetails []authzdetails.Detail
	// Act, when set, is the token's delegation chain (a token exchange on behalf of earlier
	// agents, docs/delegation.md); a person's token names its client when it is nil.
	Act *store.Actor
	// Until, when set, is the latest the access token may live: an approval's end
	// (docs/approvals.md) bounds what it is redeemed for.
	Until time.Time
}

// Mint makes the tokens of an issuance and the response that carries them. The caller stores
// the tokens (one CreateTokens call, or a rotation). Access tokens are opaque unless the client
// asks for JWTs (RFC 9068) and the project has a signing key; without a key a JWT client gets
// opaque tokens, which introspection still understands. Either form is stored by its hash, so
// revocation takes effect at once at every endpoint.
func Mint(p *config.Project, now time.Time, is Issue) ([]store.Token, TokenResponse, error) {
	if is.FamilyID == "" {
		is.FamilyID = secret.NewOrderedID(now)
	}
	lt := p.Lifetimes
	atExp := now.Add(lt.AccessToken)
	if !is.Until.IsZero() && is.Until.Before(atExp) {
		atExp = is.Until
	}
	base := store.Token{
		Project:    p.Key,
		ClientID:   is.Client.ID,
		Subject:    is.Subject,
		Scopes:     is.Scopes,
		Audience:   is.Audience,
		FamilyID:   is.FamilyID,
		Generation: is.Generation,
		CodeHash:   is.CodeHash,
		AuthTime:   is.AuthTime,
		IssuedAt:   now,
	}
	base.AuthorizationDetails = authzdetails.Marshal(is.Details)
	base.Act, base.MayAct = delegationOf(p, is)

	var access string
	if is.Client.AccessTokenFormat == config.TokenJWT && len(p.SigningKeys) > 0 {
		var err error
		if access, err = accessJWT(p, now, atExp, is, base); err != nil {
			return nil, TokenResponse{}, err
		}
	} else {
		access = secret.New(secret.PrefixAccessToken)
	}
	at := base
	at.Kind = store.AccessToken
	at.Hash = secret.Hash(access)
	at.ExpiresAt = atExp
	at.JKT = is.JKT
	tokens := []store.Token{at}

	tokenType := "Bearer"
	if is.JKT != "" {
		tokenType = TokenTypeDPoP
	}
	resp := TokenResponse{
		AccessToken: access,
		TokenType:   tokenType,
		ExpiresIn:   int64(atExp.Sub(now) / time.Second),
		Scope:       strings.Join(is.Scopes, " "),
	}
	resp.AuthorizationDetails = is.Details
	if is.Refresh {
		refresh := secret.New(secret.PrefixRefreshToken)
		rt := base
		rt.Kind = store.RefreshToken
		rt.Hash = secret.Hash(refresh)
		rt.ExpiresAt = now.Add(lt.RefreshToken)
		if is.RefreshScopes != nil {
			rt.Scopes = is.RefreshScopes
		}
		if is.RefreshDetails != nil {
			rt.AuthorizationDetails = authzdetails.Marshal(is.RefreshDetails)
		}
		if is.Client.Public() {
			rt.JKT = is.JKT
		}
		tokens = append(tokens, rt)
		resp.RefreshToken = refresh
	}
	if is.Person != nil && slices.Contains(is.Scopes, "openid") && len(p.SigningKeys) > 0 {
		idt, err := idToken(p, now, atExp, is)
		if err != nil {
			return nil, TokenResponse{}, err
		}
		resp.IDToken = idt
	}
	return tokens, resp, nil
}

type accessClaims struct {
	jwt.Claims
	ClientID    string `json:"client_id"`
	Scope       string `json:"scope,omitempty"`
	AuthTime    int64  `json:"auth_time,omitempty"`
	SubjectType string `json:"latchkey_subject_type"`
	// Cnf binds the token to a DPoP key (RFC 9449 §6.1).
	Cnf *Confirmation `json:"cnf,omitempty"`
	// AuthorizationDetails are what the person approved (RFC 9396 §9.1), for the resource
	// server to enforce.
	AuthorizationDetails []authzdetails.Detail `json:"authorization_details,omitempty"`
	// Act and MayAct are the delegation claims (RFC 8693 §4.1, §4.4; docs/delegation.md).
	Act    *store.Actor `json:"act,omitempty"`
	MayAct *store.Actor `json:"may_act,omitempty"`
}

// Confirmation is the cnf member of a JWT access token or an introspection answer.
type Confirmation struct {
	JKT string `json:"jkt"`
}

// accessJWT makes an RFC 9068 access token. A client-only token (client_credentials) carries
// no sub, where RFC 9068 §2.2 would put the client id: a resource server reading sub would take
// the client for a person, and one that requires sub refuses the token, which is the safe way to
// fail. Introspection answers the same way (docs/decisions/0018).
func accessJWT(p *config.Project, now, exp time.Time, is Issue, stored store.Token) (string, error) {
	aud := is.Audience
	if len(aud) == 0 {
		aud = []string{p.Issuer}
	}
	c := accessClaims{
		Claims: jwt.Claims{
			Issuer:    p.Issuer,
			Subject:   is.Subject,
			Audience:  jwt.Audience(aud),
			Expiry:    jwt.NewNumericDate(exp),
			IssuedAt:  jwt.NewNumericDate(now),
			NotBefore: jwt.NewNumericDate(now),
			ID:        secret.NewID(),
		},
		ClientID:    is.Client.ID,
		Scope:       strings.Join(is.Scopes, " "),
		SubjectType: subjectType(is.Subject),
		Act:         stored.Act,
		MayAct:      stored.MayAct,
	}
	if is.Subject != "" && !is.AuthTime.IsZero() {
		c.AuthTime = is.AuthTime.Unix()
	}
	if is.JKT != "" {
		c.Cnf = &Confirmation{JKT: is.JKT}
	}
	c.AuthorizationDetails = is.Details
	return sign(p, now, "at+jwt", c)
}

type idClaims struct {
	jwt.Claims
	AuthTime int64  `json:"auth_time,omitempty"`
	Nonce    string `json:"nonce,omitempty"`
	Email    string `json:"email,omitempty"`
	Name     string `json:"name,omitempty"`
}

func idToken(p *config.Project, now, exp time.Time, is Issue) (string, error) {
	c := idClaims{
		Claims: jwt.Claims{
			Issuer:   p.Issuer,
			Subject:  is.Subject,
			Audience: jwt.Audience{is.Client.ID},
			Expiry:   jwt.NewNumericDate(exp),
			IssuedAt: jwt.NewNumericDate(now),
		},
		Nonce: is.Nonce,
	}
	if !is.AuthTime.IsZero() {
		c.AuthTime = is.AuthTime.Unix()
	}
	if slices.Contains(is.Scopes, "email") {
		c.Email = is.Person.Email
	}
	if slices.Contains(is.Scopes, "profile") {
		c.Name = is.Person.Name
	}
	return sign(p, now, "JWT", c)
}

var errNoSigningKey = errors.New("project has no usable signing key")

// sign signs claims with the key that signs at now: the newest one past its announce period
// (config.Signer).
func sign(p *config.Project, now time.Time, typ string, claims any) (string, error) {
	k, ok := config.Signer(p.SigningKeys, now)
	if !ok {
		return "", errNoSigningKey
	}
	opts := (&jose.SignerOptions{}).WithType(jose.ContentType(typ)).WithHeader("kid", k.ID)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.SignatureAlgorithm(k.Algorithm), Key: k.Private}, opts)
	if err != nil {
		return "", err
	}
	return jwt.Signed(signer).Claims(claims).Serialize()
}

// publicKey returns the public half of a signing key.
func publicKey(k config.SigningKey) (any, bool) {
	switch priv := k.Private.(type) {
	case crypto.Signer:
		return priv.Public(), true
	case jose.JSONWebKey:
		pub := priv.Public()
		return pub.Key, pub.Key != nil
	case *jose.JSONWebKey:
		pub := priv.Public()
		return pub.Key, pub.Key != nil
	}
	return nil, false
}

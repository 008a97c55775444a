package idjag

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/oauth"
	"latchkey.dev/latchkey/webhook/site"
)

// Issuer answers token exchange requests for an ID-JAG (the Project as the company's identity
// provider) and passes every other token exchange request to next.
type Issuer struct {
	env   *site.Env
	store IssueStore
	next  oauth.GrantHandler
}

// Grant answers one token exchange request.
func (g *Issuer) Grant(ctx context.Context, req *oauth.TokenRequest) (*oauth.TokenResponse, error) {
	if req.Form.Get("requested_token_type") != TokenTypeIDJAG {
		if g.next == nil {
			return nil, oauth.ErrInvalidRequest.WithDescription("requested_token_type must be " + TokenTypeIDJAG)
		}
		return g.next.Grant(ctx, req)
	}
	return g.issue(ctx, req)
}

// subject is who an ID-JAG is issued for, read from the subject token.
type subject struct {
	person   store.Person
	authTime time.Time
	// jkt is the key a subject access token is bound to (RFC 9449), "" when it is not.
	jkt string
}

//nolint:funlen // the checks of issuing an ID-JAG in the order the draft lists them, each a refusal of its own
func (g *Issuer) issue(ctx context.Context, req *oauth.TokenRequest) (*oauth.TokenResponse, error) {
	p, client, f, now := req.Project, req.Client, req.Form, req.Now
	// RFC 8693 §5: an ID-JAG speaks for a person to another organisation's server; only a
	// client that proves who it is may ask for one.
	if client.Public() {
		return nil, oauth.ErrInvalidClient.WithDescription("an ID-JAG needs an authenticated client; a public client cannot request one")
	}
	if f.Get("actor_token") != "" || f.Get("actor_token_type") != "" {
		return nil, oauth.ErrInvalidRequest.WithDescription("actor tokens are not supported")
	}
	raw := f.Get("subject_token")
	if raw == "" {
		return nil, oauth.ErrInvalidRequest.WithDescription("subject_token is required")
	}
	requested, err := oauth.ParseScope(f.Get("scope"))
	if err != nil {
		return nil, err
	}
	resources, err := oauth.ParseResources(f["resource"])
	if err != nil {
		return nil, err
	}
	aud, err := audience(p, f["audience"])
	if err != nil {
		return nil, err
	}
	ac, ok := aud.Clients[client.ID]
	if !ok || client.Registered || p.Clients[client.ID] == nil {
		return nil, oauth.ErrInvalidTarget.WithDescription("this client may not request ID-JAGs for " + aud.Issuer)
	}
	for _, r := range resources {
		if !slices.Contains(aud.Resources, r) {
			return nil, oauth.ErrInvalidTarget.WithDescription("resource " + r + " is not one this project issues ID-JAGs for at " + aud.Issuer)
		}
	}
	if requested != nil && !oauth.Subset(requested, aud.Scopes) {
		return nil, oauth.ErrInvalidScope.WithDescription("the requested scope exceeds what ID-JAGs for " + aud.Issuer + " may carry")
	}
	if len(p.SigningKeys) == 0 {
		return nil, oauth.ErrTemporarilyUnavailable.WithDescription("this project has no signing key, so it cannot issue ID-JAGs")
	}

	var sub subject
	switch f.Get("subject_token_type") {
	case TokenTypeIDToken:
		sub, err = g.fromIDToken(ctx, p, client, raw, now)
	case TokenTypeAccessToken:
		sub, err = g.fromAccessToken(ctx, p, client, raw, now)
	case "":
		return nil, oauth.ErrInvalidRequest.WithDescription("subject_token_type is required")
	default:
		return nil, oauth.ErrInvalidRequest.WithDescription("subject_token_type must be " + TokenTypeIDToken + " or " + TokenTypeAccessToken)
	}
	if err != nil {
		return nil, err
	}
	// A DPoP-bound subject token buys an ID-JAG only with a proof by its key, checked at the
	// token endpoint: a copy taken off the wire must not speak for the person elsewhere.
	if sub.jkt != "" && sub.jkt != req.JKT {
		oauth.RecordBoundKeyRefused(ctx, req, site.GrantTokenExchange, sub.person.ID)
		return nil, oauth.BoundKeyError("subject token")
	}

	lifetime := p.IdentityAssertions.Lifetime
	if lifetime <= 0 {
		lifetime = config.DefaultAssertionLifetime
	}
	c := claims{
		Claims: jwt.Claims{
			Issuer:   p.Issuer,
			Subject:  sub.person.ID,
			Audience: jwt.Audience{aud.Issuer},
			Expiry:   jwt.NewNumericDate(now.Add(lifetime)),
			IssuedAt: jwt.NewNumericDate(now),
			ID:       secret.NewID(),
		},
		ClientID: ac.ResourceClientID,
		Scope:    strings.Join(requested, " "),
		Resource: jwt.Audience(resources),
		Email:    sub.person.Email,
	}
	if !sub.authTime.IsZero() {
		c.AuthTime = sub.authTime.Unix()
	}
	signed, err := oauth.Sign(p, now, Typ, c)
	if err != nil {
		return nil, oauth.Internal(err)
	}
	// Stored before the answer, or no answer: the ID-JAG is kept nowhere else
	// (docs/decisions/0054).
	if err := g.env.RecordHandout(ctx, store.AuditRecord{
		// ClientID is the client here; the id it has at the audience is a detail, not the
		// record's client (details.client_id would be taken for it).
		Project: p.Key, Actor: "client:" + client.ID, Action: ActionIssued, Target: sub.person.ID, ClientID: client.ID,
		Details: map[string]string{"audience": aud.Issuer, "audience_client_id": ac.ResourceClientID, "jti": c.ID,
			"scope": c.Scope, "resource": strings.Join(resources, " ")},
	}); err != nil {
		return nil, oauth.Internal(err)
	}
	return &oauth.TokenResponse{
		AccessToken:     signed,
		IssuedTokenType: TokenTypeIDJAG,
		TokenType:       "N_A",
		ExpiresIn:       int64(lifetime / time.Second),
		Scope:           c.Scope,
	}, nil
}

// audience finds the one declared audience named; anything else is invalid_target (RFC 8693 §2.2.2).
func audience(p *config.Project, vals []string) (*config.AssertionAudience, error) {
	var found *config.AssertionAudience
	for _, v := range vals {
		if v == "" {
			continue
		}
		a := p.IdentityAssertions.Audiences[v]
		if a == nil {
			return nil, oauth.ErrInvalidTarget.WithDescription("this project issues no ID-JAGs for that audience")
		}
		if found != nil && found != a {
			return nil, oauth.ErrInvalidTarget.WithDescription("name exactly one audience")
		}
		found = a
	}
	if found == nil {
		return nil, oauth.ErrInvalidTarget.WithDescription("audience is required: the issuer identifier of the authorization server the ID-JAG is for")
	}
	return found, nil
}

var deadSubject = oauth.ErrInvalidGrant.WithDescription("the subject token is invalid, expired or revoked")

// idClaims are what an ID token of this project says.
type idClaims struct {
	jwt.Claims
	AuthTime int64 `json:"auth_time,omitempty"`
}

// fromIDToken reads one of this project's ID tokens, issued to the requesting client (its aud)
// for a person who can still sign in. Only the typ of an ID token ("JWT") is accepted, so the
// project's JWT access tokens (at+jwt) and its ID-JAGs, signed with the same keys, do not pass.
func (g *Issuer) fromIDToken(ctx context.Context, p *config.Project, client *site.Client, raw string, now time.Time) (subject, error) {
	if len(raw) > oauth.MaxFormBytes {
		return subject{}, deadSubject
	}
	tok, err := jwt.ParseSigned(raw, algorithms)
	if err != nil || len(tok.Headers) != 1 {
		return subject{}, deadSubject
	}
	h := tok.Headers[0]
	if typ, _ := h.ExtraHeaders[jose.HeaderType].(string); typ != "JWT" {
		return subject{}, oauth.ErrInvalidGrant.WithDescription("the subject token is not an ID token")
	}
	var c idClaims
	verified := false
	for _, k := range p.SigningKeys {
		if k.ID != h.KeyID || k.Algorithm != h.Algorithm {
			continue
		}
		pub, ok := oauth.PublicKey(k)
		if ok && tok.Claims(pub, &c) == nil {
			verified = true
		}
		break
	}
	if !verified || c.Issuer != p.Issuer || c.Subject == "" || c.Expiry == nil || !now.Before(c.Expiry.Time()) {
		return subject{}, deadSubject
	}
	if !c.Audience.Contains(client.ID) {
		return subject{}, oauth.ErrInvalidGrant.WithDescription("the ID token was issued to another client")
	}
	person, err := g.activePerson(ctx, p, c.Subject)
	if err != nil {
		return subject{}, err
	}
	// An ID token cannot be revoked: one issued before the person's access was last ended
	// (a back-channel logout, a failed re-check, an administrator) buys nothing, though it has
	// not expired. iat has whole seconds, so a token issued in the second of the end counts as
	// issued before it (decision 0050).
	if c.IssuedAt == nil {
		return subject{}, deadSubject
	}
	if !person.AccessEndedAt.IsZero() && !c.IssuedAt.Time().After(person.AccessEndedAt.Truncate(time.Second)) {
		return subject{}, oauth.ErrInvalidGrant.WithDescription("the ID token was issued before the person's access ended")
	}
	s := subject{person: person}
	if c.AuthTime > 0 {
		s.authTime = time.Unix(c.AuthTime, 0)
	}
	return s, nil
}

// fromAccessToken reads a live access token of this project issued to the requesting client
// for a person.
func (g *Issuer) fromAccessToken(ctx context.Context, p *config.Project, client *site.Client, raw string, now time.Time) (subject, error) {
	if len(raw) > oauth.MaxFormBytes {
		return subject{}, deadSubject
	}
	t, err := g.store.GetToken(ctx, secret.Hash(raw))
	if errors.Is(err, store.ErrNotFound) {
		return subject{}, deadSubject
	}
	if err != nil {
		return subject{}, oauth.Internal(err)
	}
	if t.Kind != store.AccessToken || t.Project != p.Key || !t.Active(now) {
		return subject{}, deadSubject
	}
	if t.Subject == "" {
		return subject{}, oauth.ErrInvalidGrant.WithDescription("the subject token was not issued for a person")
	}
	if t.ClientID != client.ID {
		return subject{}, oauth.ErrInvalidGrant.WithDescription("the subject token was issued to another client")
	}
	person, err := g.activePerson(ctx, p, t.Subject)
	if err != nil {
		return subject{}, err
	}
	return subject{person: person, authTime: t.AuthTime, jkt: t.JKT}, nil
}

func (g *Issuer) activePerson(ctx context.Context, p *config.Project, id string) (store.Person, error) {
	person, err := g.store.GetPerson(ctx, p.Key, id)
	if errors.Is(err, store.ErrNotFound) {
		return store.Person{}, deadSubject
	}
	if err != nil {
		return store.Person{}, oauth.Internal(err)
	}
	if !site.PersonActive(p, person) {
		return store.Person{}, oauth.ErrInvalidGrant.WithDescription("this person can no longer sign in to the project")
	}
	return person, nil
}

package idjag

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/mail"
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

// Redemption limits.
const (
	// skew is the clock difference accepted between the issuer and this server.
	skew = 30 * time.Second
	// maxLifetime bounds exp-iat: an ID-JAG is meant to be redeemed at once (identity
	// providers issue them for about five minutes); a long-lived one is refused rather than
	// remembered for long.
	maxLifetime = 10 * time.Minute
	// maxAssertionBytes bounds the assertion before it is parsed.
	maxAssertionBytes = 16 << 10
	maxJTILen         = 256
)

// algorithms are the signature algorithms an ID-JAG may use: asymmetric only. "none" and the
// HMAC algorithms are never accepted: an HMAC "signature" keyed with a public key is a classic
// forgery (RFC 8725 §2.1, §3.1).
var algorithms = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA,
}

// claims are an ID-JAG's claims.
type claims struct {
	jwt.Claims
	ClientID string       `json:"client_id"`
	Scope    string       `json:"scope,omitempty"`
	Resource jwt.Audience `json:"resource,omitempty"`
	Email    string       `json:"email,omitempty"`
	AuthTime int64        `json:"auth_time,omitempty"`
	ACR      string       `json:"acr,omitempty"`
}

// Redeemer is the JWT bearer grant handler for ID-JAGs.
type Redeemer struct {
	env   *site.Env
	store RedeemStore
	keys  *Keys
}

// refusal is what the audit record of a refused redemption says besides the error.
type refusal struct {
	issuer string
}

// Grant redeems one ID-JAG. Every answer is audited: a redemption names the person, a refusal
// the reason.
func (g *Redeemer) Grant(ctx context.Context, req *oauth.TokenRequest) (*oauth.TokenResponse, error) {
	resp, rec, err := g.redeem(ctx, req)
	p, client := req.Project, req.Client
	if err != nil {
		e := oauth.AsError(err)
		if e.Status >= 500 {
			return nil, err
		}
		d := map[string]string{"client_id": client.ID, "error": e.Code, "reason": e.Description}
		if rec.issuer != "" {
			d["issuer"] = rec.issuer
		}
		g.env.Record(ctx, store.AuditRecord{Project: p.Key, Actor: "client:" + client.ID, Action: ActionRefused, Reason: e.Code, Details: d})
		return nil, err
	}
	return resp, nil
}

//nolint:funlen // the checks of redeeming an ID-JAG in the order the draft lists them, each a refusal of its own
func (g *Redeemer) redeem(ctx context.Context, req *oauth.TokenRequest) (*oauth.TokenResponse, refusal, error) {
	p, client, f, now := req.Project, req.Client, req.Form, req.Now
	var rec refusal
	invalid := func(d string) (*oauth.TokenResponse, refusal, error) {
		return nil, rec, oauth.ErrInvalidGrant.WithDescription(d)
	}

	// An ID-JAG is a bearer credential: the client's authentication is what ties it to the
	// client it names, so a client that proves nothing but its id never redeems one.
	if client.Public() {
		return nil, rec, oauth.ErrUnauthorizedClient.WithDescription("the JWT bearer grant needs an authenticated client; a public client cannot redeem identity assertions")
	}
	raw := f.Get("assertion")
	if raw == "" {
		return nil, rec, oauth.ErrInvalidRequest.WithDescription("assertion is required")
	}
	if len(raw) > maxAssertionBytes {
		return invalid("the assertion is too large")
	}
	requested, err := oauth.ParseScope(f.Get("scope"))
	if err != nil {
		return nil, rec, err
	}
	resources, err := oauth.ParseResources(f["resource"])
	if err != nil {
		return nil, rec, err
	}
	iss, c, err := g.verify(ctx, p, client, raw, now, &rec)
	if err != nil {
		return nil, rec, err
	}
	if !admits(p, iss, client) {
		return nil, rec, oauth.ErrUnauthorizedClient.WithDescription("this client may not present identity assertions of " + iss.Issuer)
	}

	// The token is never wider than the assertion: the scope and resources asked for must be
	// within it, and the client's own scope list still applies.
	granted := strings.Fields(c.Scope)
	scopes := granted
	if requested != nil {
		if !oauth.Subset(requested, granted) {
			return nil, rec, oauth.ErrInvalidScope.WithDescription("the requested scope exceeds the assertion's scope")
		}
		scopes = requested
	}
	if !client.AllowsScopes(scopes) {
		return nil, rec, oauth.ErrInvalidScope.WithDescription("the assertion's scope exceeds what this client may ask for; ask for less with scope")
	}
	audience := []string(c.Resource)
	if _, err := oauth.ParseResources(audience); err != nil {
		return invalid("the assertion's resource claim is malformed")
	}
	if resources != nil {
		if !oauth.Subset(resources, audience) {
			return nil, rec, oauth.ErrInvalidTarget.WithDescription("the requested resource is not one the assertion names")
		}
		audience = resources
	}

	person, err := g.person(ctx, p, iss, c, now)
	if err != nil {
		return nil, rec, err
	}
	// Spent last, after every check: a request refused for another reason leaves the
	// assertion to its rightful client. The record lasts until the assertion is refused as
	// expired (exp + skew, see window), so taking over an expired record never lets one through
	// twice. The key names the purpose, project and issuer: a jti is unique per issuer only.
	key := sha256.Sum256([]byte("idjag\x00" + p.Key + "\x00" + iss.Issuer + "\x00" + c.ID))
	switch err := g.store.UseOnce(ctx, key[:], c.Expiry.Time().Add(skew), now); {
	case errors.Is(err, store.ErrConflict):
		return invalid("the assertion has already been used")
	case err != nil:
		return nil, rec, oauth.Internal(err)
	}

	// Redeemed with a DPoP proof, the access token is bound to its key (RFC 9449 §5), as every
	// grant's is; whether a proof is required was settled at the token endpoint (DPoPRequired).
	is := oauth.Issue{Client: client, Subject: person.ID, Scopes: scopes, Audience: audience, JKT: req.JKT}
	if c.AuthTime > 0 {
		is.AuthTime = time.Unix(c.AuthTime, 0)
	}
	tokens, resp, err := oauth.Mint(p, now, is)
	if err != nil {
		return nil, rec, oauth.Internal(err)
	}
	if err := g.store.CreateTokens(ctx, tokens...); err != nil {
		return nil, rec, oauth.Internal(err)
	}
	g.env.Record(ctx, store.AuditRecord{
		Project: p.Key, Actor: "client:" + client.ID, Action: ActionRedeemed, Target: person.ID,
		Details: map[string]string{"issuer": iss.Issuer, "jti": c.ID, "scope": strings.Join(scopes, " "), "resource": strings.Join(audience, " ")},
	})
	return &resp, rec, nil
}

// typOK: the typ header must name an ID-JAG. A missing typ is refused: an ID token or an
// access token of the same issuer, signed with the same key, must never pass as a grant
// (RFC 8725 §3.11).
func typOK(h jose.Header) bool {
	typ, _ := h.ExtraHeaders[jose.HeaderType].(string)
	typ = strings.ToLower(typ)
	return typ == Typ || typ == "application/"+Typ
}

// window checks exp, iat and nbf against now with the accepted skew.
func window(c claims, now time.Time) error {
	if c.Expiry == nil || c.IssuedAt == nil {
		return errors.New("the assertion needs exp and iat")
	}
	exp, iat := c.Expiry.Time(), c.IssuedAt.Time()
	switch {
	case !now.Before(exp.Add(skew)):
		return errors.New("the assertion has expired")
	case iat.After(now.Add(skew)):
		return errors.New("the assertion was issued in the future")
	case exp.Sub(iat) > maxLifetime:
		return errors.New("the assertion lives too long: exp may be at most 10 minutes after iat")
	case c.NotBefore != nil && c.NotBefore.Time().After(now.Add(skew)):
		return errors.New("the assertion is not valid yet")
	}
	return nil
}

// admits: only declared OAuthClients, and only those the issuer's entry lists (or all declared
// ones when it says so). A client that registered itself chose its own name and redirects; it
// never redeems a company's assertions, whatever id an identity provider put in them.
func admits(p *config.Project, iss *config.AssertionIssuer, client *site.Client) bool {
	if client.Registered || p.Clients[client.ID] == nil {
		return false
	}
	return iss.AllClients || slices.Contains(iss.Clients, client.ID)
}

// person maps the assertion's subject onto a person of the project (docs/decisions/0039):
//
//   - by sub (the default): the issuer's own subject, "issuer|sub". When the issuer is the
//     project's OpenID Connect sign-in provider it is the same person who signs in there; any
//     other issuer's people are its own (source id-jag), so no issuer can speak for someone
//     who signs in another way;
//   - by email: only for addresses in the issuer's emailDomains; such an address is the person
//     of the project's password file with that address when there is one (the administrator
//     declared that the issuer speaks for the domain), else the issuer's own person.
//
// A person the project has not seen is created only when the issuer's entry says so.
func (g *Redeemer) person(ctx context.Context, p *config.Project, iss *config.AssertionIssuer, c claims, now time.Time) (store.Person, error) {
	want := store.Person{Project: p.Key, Source: "id-jag", SourceSubject: iss.Issuer + "|" + c.Subject, Email: c.Email, CreatedAt: now}
	known := false
	switch iss.Subject {
	case config.AssertionSubjectEmail:
		addr, ok := emailIn(c.Email, iss.EmailDomains)
		if !ok {
			return store.Person{}, oauth.ErrInvalidGrant.WithDescription("the assertion's email is missing or not in a domain this issuer speaks for")
		}
		want.Email, want.SourceSubject = addr, iss.Issuer+"|email:"+addr
		if pw, ok := p.SignIn.Passwords[addr]; ok {
			want.Source, want.SourceSubject, want.Name, known = "password", addr, pw.Name, true
		}
	default:
		if o := p.SignIn.OIDC; o != nil && o.Issuer == iss.Issuer {
			want.Source = "oidc"
		}
	}
	found, err := g.store.FindPerson(ctx, p.Key, want.Source, want.SourceSubject)
	switch {
	case err == nil:
		if !site.PersonActive(p, found) {
			return store.Person{}, oauth.ErrInvalidGrant.WithDescription("this person can no longer sign in to the project")
		}
		return found, nil
	case !errors.Is(err, store.ErrNotFound):
		return store.Person{}, oauth.Internal(err)
	case !known && !iss.CreatePeople:
		return store.Person{}, oauth.ErrInvalidGrant.WithDescription("this person is not known to the project; they sign in once first, or the issuer's entry sets createPeople")
	}
	want.ID = secret.NewID()
	person, err := g.store.UpsertPerson(ctx, want)
	if err != nil {
		return store.Person{}, oauth.Internal(err)
	}
	return person, nil
}

// emailIn returns the lower-cased address when it is a plain address in one of domains.
func emailIn(email string, domains []string) (string, bool) {
	a, err := mail.ParseAddress(email)
	if err != nil || a.Address != email || a.Name != "" {
		return "", false
	}
	addr := strings.ToLower(a.Address)
	at := strings.LastIndexByte(addr, '@')
	if at < 1 {
		return "", false
	}
	return addr, slices.Contains(domains, addr[at+1:])
}

// verify checks the assertion itself: its form, its issuer and signature, and whom and when
// it is for. rec learns the issuer as soon as it is known, for the audit record.
func (g *Redeemer) verify(ctx context.Context, p *config.Project, client *site.Client, raw string, now time.Time, rec *refusal) (*config.AssertionIssuer, claims, error) {
	if len(p.IdentityAssertions.Issuers) == 0 {
		return nil, claims{}, invalidGrant("this project trusts no identity assertion issuers")
	}

	tok, err := jwt.ParseSigned(raw, algorithms)
	if err != nil || len(tok.Headers) != 1 {
		return nil, claims{}, invalidGrant("the assertion is not a JWT signed with an accepted algorithm")
	}
	h := tok.Headers[0]
	if !typOK(h) {
		return nil, claims{}, invalidGrant("the assertion is not an identity assertion: its typ header must be " + Typ)
	}
	// The issuer is read before the signature is checked only to choose whose keys check it:
	// the key comes from that issuer's set alone, so a key of one trusted issuer never vouches
	// for an assertion that names another.
	var unverified claims
	if err := tok.UnsafeClaimsWithoutVerification(&unverified); err != nil {
		return nil, claims{}, invalidGrant("the assertion's claims do not parse")
	}
	iss := p.IdentityAssertions.Issuers[unverified.Issuer]
	if iss == nil {
		return nil, claims{}, invalidGrant("the assertion's issuer is not trusted by this project")
	}
	rec.issuer = iss.Issuer
	key, err := g.keys.Key(ctx, iss, h.KeyID, h.Algorithm)
	if err != nil {
		g.env.Logger.Info("identity assertion key not found", "project", p.Key, "issuer", iss.Issuer, "kid", h.KeyID, "error", err.Error())
		return nil, claims{}, invalidGrant("no key of the assertion's issuer verifies it")
	}
	var c claims
	if err := tok.Claims(key.Key, &c); err != nil {
		return nil, claims{}, invalidGrant("the assertion's signature does not verify")
	}
	if c.Issuer != iss.Issuer {
		return nil, claims{}, invalidGrant("the assertion's issuer is not trusted by this project")
	}
	if !c.Audience.Contains(p.Issuer) {
		return nil, claims{}, invalidGrant("the assertion is not for this authorization server: its aud must be " + p.Issuer)
	}
	if c.ClientID == "" || c.ClientID != client.ID {
		return nil, claims{}, invalidGrant("the assertion was issued for another client")
	}
	if c.Subject == "" {
		return nil, claims{}, invalidGrant("the assertion names no subject")
	}
	if c.ID == "" || len(c.ID) > maxJTILen {
		return nil, claims{}, invalidGrant("the assertion needs a jti of at most 256 characters")
	}
	if err := window(c, now); err != nil {
		return nil, claims{}, invalidGrant(err.Error())
	}
	return iss, c, nil
}

func invalidGrant(d string) error { return oauth.ErrInvalidGrant.WithDescription(d) }

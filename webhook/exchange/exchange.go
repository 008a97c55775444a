// Package exchange is RFC 8693 token exchange at the token endpoint: an agent (or the MCP
// server it calls) trades a person's Latchkey access token for that person's access token at a
// connected service, or gets a connect link made for that person (docs/connections-for-agents.md).
//
// Who may exchange which token:
//
//   - the subject token is a live access token of this project issued for a person
//     (subject_token_type access_token); client_credentials tokens have no person and are refused;
//   - the requesting client either holds it (the token was issued to it), or is its audience:
//     the token's audience (RFC 8707 resources) contains the client's id or one of the
//     resource URIs the client declares (config.Client.Resources) — an MCP server exchanging its
//     caller's token;
//   - the requesting client authenticated itself: public clients never exchange (RFC 8693 §5);
//   - the requesting client is permitted to exchange for the connector: a declared OAuthClient
//     lists it in spec.connectors. Dynamically registered clients and clients described by
//     metadata documents are never permitted: their names and addresses are their own claims,
//     and nothing an administrator wrote lets them reach people's upstream tokens.
//
// The "agent" is the client the subject token was issued to: it is the one the person allows
// to use an account, and the one the refusal's message names. The requesting client is the
// actor: the audit records and the connection's actors name the whole chain (actor.go,
// docs/delegation.md).
//
// audience (or resource) names the connector by its token-exchange audience. Exactly one
// connector may be named; anything else is invalid_target.
package exchange

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"
	"time"

	"golang.org/x/oauth2"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/webhook/links"
	"latchkey.dev/latchkey/webhook/oauth"
	"latchkey.dev/latchkey/webhook/site"
)

// RFC 8693 identifiers.
const (
	GrantType            = site.GrantTokenExchange
	TokenTypeAccessToken = "urn:ietf:params:oauth:token-type:access_token"
	// TokenTypeJWT (RFC 8693 §3) is the actor_token_type of a workload's own token: a
	// ServiceAccount token or JWT-SVID of the requesting workload_identity client
	// (docs/workload-identity.md).
	TokenTypeJWT = "urn:ietf:params:oauth:token-type:jwt"
)

// Reasons of the refusal (docs/connections-for-agents.md, "The refusal").
const (
	ReasonConnectRequired   = "connect_required"
	ReasonAllowRequired     = "allow_required"
	ReasonReconnectRequired = "reconnect_required"
)

// maxTargets bounds audience and resource values; one is what a valid request sends.
const maxTargets = 10

// Vault hands out a connection's live upstream access token (upstream.Vault).
type Vault interface {
	Token(ctx context.Context, c *config.Connector, project, connectionID string) (*oauth2.Token, error)
}

// readVault is a Vault that can start from the connection the grant has just read, saving a
// second read of the same row on every successful exchange (upstream.Vault is one).
type readVault interface {
	TokenFor(ctx context.Context, c *config.Connector, conn store.Connection) (*oauth2.Token, error)
}

// Grant is the token-exchange grant handler.
type Grant struct {
	env       *site.Env
	store     Store
	vault     Vault
	approvals Approvals
	// actors remembers the connection actors this replica wrote lately (actor.go).
	actors actorCache
}

// WithApprovals makes a refusal for authorization_details start an approval request for a
// declared agent with the ciba grant (docs/approvals.md#from-a-token-exchange).
func (g *Grant) WithApprovals(a Approvals) *Grant {
	g.approvals = a
	return g
}

// New returns the grant handler. A nil vault means an upstream.Vault over st and env's keyring
// and clock.
func New(env *site.Env, st Store, vault Vault) *Grant {
	if vault == nil {
		vault = &upstream.Vault{Store: st, Keyring: env.Keyring, Now: env.Clock}
	}
	return &Grant{env: env, store: st, vault: vault}
}

// Register adds token exchange to a token endpoint: handle is webhook.Server.Grant or
// oauth.TokenEndpoint.Handle. A nil vault: see New.
func Register(handle func(grantType string, h oauth.GrantHandler), env *site.Env, st Store, vault Vault) {
	handle(GrantType, New(env, st, vault))
}

// Grant answers one token-exchange request.
func (g *Grant) Grant(ctx context.Context, req *oauth.TokenRequest) (*oauth.TokenResponse, error) {
	f, p, client, now := req.Form, req.Project, req.Client, req.Now

	// RFC 8693 §5: the client is always authenticated. A public client proves nothing but its
	// id, which anyone can send, so it never exchanges, whatever it lists or registered.
	if client.Public() {
		return nil, oauth.ErrInvalidClient.WithDescription("token exchange needs an authenticated client; a public client cannot exchange tokens")
	}
	subjectToken, requested, err := readRequest(f)
	if err != nil {
		return nil, err
	}
	account, err := readAccount(f)
	if err != nil {
		return nil, err
	}

	connector, err := target(p, f["audience"], f["resource"])
	if err != nil {
		return nil, err
	}

	h, err := g.hand(ctx, req, subjectToken, account, connector, requested, true)
	if err != nil {
		return nil, err
	}
	return h.approval.apply(response(h.Token, h.Connection, now), now), nil
}

// Handout is a person's upstream token handed out for one use, with the connection it came
// from and the person it speaks for.
type Handout struct {
	Token      *oauth2.Token
	Connection store.Connection
	Subject    string
	// approval is what the person's authorization_details allow at the Connector; token
	// exchange puts it on its answer (approval.apply).
	approval approval
}

// hand runs every check of token exchange after the request was read, in the order
// docs/connections-for-agents.md states them, and returns the person's upstream token or the
// refusal. record says whether a handout is written to the audit log here, before the answer
// (token exchange: decision 0054); the token proxy counts its uses instead (webhook/proxy).
//
//nolint:funlen // the token-exchange checks in the order docs/connections-for-agents.md states them, each ending in its own audited refusal
func (g *Grant) hand(ctx context.Context, req *oauth.TokenRequest, subjectToken, account string, connector *config.Connector, requested []string, record bool) (Handout, error) {
	p, client, now := req.Project, req.Client, req.Now
	subject, access, err := g.subject(ctx, p, subjectToken, connector, now)
	if err != nil {
		g.record(ctx, req, "", connector, "subject_token_invalid", nil)
		return Handout{}, err
	}
	chain, actorWorkload, err := g.actor(ctx, req, subject, connector)
	if err != nil {
		return Handout{}, err
	}
	if keyMismatch(subject, client, req.JKT) {
		g.record(ctx, req, subject.Subject, connector, "dpop_key_mismatch", map[string]string{"proof": oauth.ProofState(req.JKT)})
		return Handout{}, oauth.BoundKeyError("subject token")
	}
	if !permitted(client, p.Clients[client.ID], connector) {
		g.record(ctx, req, subject.Subject, connector, "client_not_permitted", nil)
		return Handout{}, oauth.ErrUnauthorizedClient.WithDescription("this client may not exchange tokens for " + connector.Audience)
	}
	// Authorization details the person approved for this connector's types bound what the
	// agent may ask for here (docs/authorization-details.md).
	agent, approved, err := g.agentWithin(ctx, req, subject, client, connector)
	if err != nil {
		return Handout{}, err
	}
	if err := g.policies(ctx, req, subject, agent, connector); err != nil {
		return Handout{}, err
	}

	// An Organisation connector hands out its one shared account, never a person's
	// (docs/shared-connections.md): everything above about the person and the agent held.
	if connector.Shared {
		h, err := g.shared(ctx, req, subject, agent, connector, requested, record)
		h.approval = approved
		return h, err
	}

	// agent is the client the subject token was issued to, whose access subject read with it.
	conn, kind, err := decideAccount(access, account)
	if err != nil {
		g.record(ctx, req, subject.Subject, connector, "account_ambiguous", map[string]string{"agent": agent.ID, "account": account})
		return Handout{}, err
	}
	if kind == "" {
		tok, err := g.token(ctx, connector, conn)
		switch {
		case err == nil:
			if len(requested) > 0 && len(conn.Scopes) > 0 && !oauth.Subset(requested, conn.Scopes) {
				g.record(ctx, req, subject.Subject, connector, "scope_not_granted", nil)
				return Handout{}, oauth.ErrInvalidScope.WithDescription("the connected account was not granted the requested scope")
			}
			// The moment an agent receives a person's upstream token: stored before the
			// answer, or no answer (docs/decisions/0054).
			if record {
				if err := g.env.RecordHandout(ctx, auditRecord(req, subject.Subject, connector, "", withWorkload(withChain(map[string]string{
					"agent": agent.ID, "connection_id": conn.ID, "account": conn.AccountName, "account_id": conn.AccountID,
				}, chain), actorWorkload))); err != nil {
					return Handout{}, oauth.Internal(err)
				}
			}
			g.recordActor(ctx, req, conn, chain)
			return Handout{Token: tok, Connection: conn, Subject: subject.Subject, approval: approved}, nil
		case errors.Is(err, upstream.ErrReconnect):
			kind = store.LinkReconnect
		case errors.Is(err, secret.ErrUnknownKey), errors.Is(err, secret.ErrOpen):
			// The key that sealed the tokens was removed before the row was re-sealed (or the
			// keys Secret was lost): only connecting again can mend it.
			g.env.Logger.Error(err, "a connection's tokens cannot be opened; asking the person to reconnect", "project", p.Key, "connector", connector.Key)
			kind = store.LinkReconnect
		case errors.Is(err, store.ErrNotFound):
			// Disconnected between the two reads: decide again from what is there now.
			access, err := g.store.AgentAccess(ctx, p.Key, subject.Subject, connector.Key, agent.ID)
			if err != nil {
				return Handout{}, oauth.Internal(err)
			}
			if _, kind, err = decideAccount(access, account); err == nil && kind == "" {
				return Handout{}, oauth.ErrTemporarilyUnavailable.WithDescription("the connection changed while it was read; try again")
			}
		case errors.Is(err, upstream.ErrTimeout):
			g.record(ctx, req, subject.Subject, connector, "upstream_timeout", nil)
			g.env.Log(ctx).Info("connected service did not answer a refresh", "project", p.Key, "connector", connector.Key)
			return Handout{}, oauth.ErrTemporarilyUnavailable.WithDescription(links.ServiceName(connector) + " did not answer in time; try again")
		case errors.Is(err, upstream.ErrService):
			g.record(ctx, req, subject.Subject, connector, "upstream_error", nil)
			g.env.Log(ctx).Error(err, "connected service refused a refresh", "project", p.Key, "connector", connector.Key)
			return Handout{}, oauth.ErrTemporarilyUnavailable.WithDescription(links.ServiceName(connector) + " refused Latchkey's request; try again later")
		default:
			return Handout{}, oauth.Internal(err)
		}
	}
	if kind == "" {
		// The account named became ambiguous between the two reads.
		return Handout{}, errAmbiguous
	}
	rerr := g.refuse(ctx, p, subject.Subject, agent, connector, kind, account, now)
	details := withWorkload(withChain(map[string]string{"agent": agent.ID}, chain), actorWorkload)
	if account != "" {
		details["account"] = account
	}
	g.record(ctx, req, subject.Subject, connector, reason(kind), details)
	return Handout{}, rerr
}

// readRequest checks the token-exchange parameters (RFC 8693 §2.1) and returns the subject
// token and the requested scope.
func readRequest(f url.Values) (subjectToken string, requested []string, err error) {
	subjectToken = f.Get("subject_token")
	if subjectToken == "" {
		return "", nil, oauth.ErrInvalidRequest.WithDescription("subject_token is required")
	}
	switch f.Get("subject_token_type") {
	case "":
		return "", nil, oauth.ErrInvalidRequest.WithDescription("subject_token_type is required")
	case TokenTypeAccessToken:
	default:
		return "", nil, oauth.ErrInvalidRequest.WithDescription("subject_token_type must be " + TokenTypeAccessToken)
	}
	if rt := f.Get("requested_token_type"); rt != "" && rt != TokenTypeAccessToken {
		return "", nil, oauth.ErrInvalidRequest.WithDescription("requested_token_type must be " + TokenTypeAccessToken)
	}
	requested, err = oauth.ParseScope(f.Get("scope"))
	return subjectToken, requested, err
}

// record writes token.exchanged (reason "") or token.exchange_refused with reason, a code:
// docs/audit.md lists them. Upstream timeouts and errors are failures, the rest refusals.
func (g *Grant) record(ctx context.Context, req *oauth.TokenRequest, subject string, c *config.Connector, reason string, details map[string]string) {
	r := auditRecord(req, subject, c, reason, details)
	if reason != "" {
		r.Action = refusedAction(ctx)
	}
	g.env.Record(ctx, r)
}

func auditRecord(req *oauth.TokenRequest, subject string, c *config.Connector, reason string, details map[string]string) store.AuditRecord {
	r := store.AuditRecord{
		Project: req.Project.Key, Time: req.Now, Actor: "client:" + req.Client.ID, Action: events.TokenExchanged,
		Target: subject, ClientID: req.Client.ID, Connector: c.Key, Outcome: store.OutcomeSuccess, Details: details,
	}
	if reason != "" {
		r.Action, r.Outcome, r.Reason = events.TokenExchangeRefused, store.OutcomeRefused, reason
		if reason == "upstream_timeout" || reason == "upstream_error" {
			r.Outcome = store.OutcomeFailed
		}
	}
	return r
}

func (g *Grant) token(ctx context.Context, c *config.Connector, conn store.Connection) (*oauth2.Token, error) {
	if rv, ok := g.vault.(readVault); ok {
		return rv.TokenFor(ctx, c, conn)
	}
	return g.vault.Token(ctx, c, conn.Project, conn.ID)
}

// target finds the one connector that audience and resource name.
func target(p *config.Project, audience, resource []string) (*config.Connector, error) {
	if len(audience)+len(resource) > maxTargets {
		return nil, oauth.ErrInvalidTarget.WithDescription("too many audience and resource values")
	}
	var found *config.Connector
	for _, v := range slices.Concat(audience, resource) {
		if v == "" {
			continue
		}
		c := p.ConnectorsByAudience[v]
		if c == nil {
			return nil, oauth.ErrInvalidTarget.WithDescription("no connected service has that audience in this project")
		}
		if found != nil && found != c {
			return nil, oauth.ErrInvalidTarget.WithDescription("name exactly one connected service")
		}
		found = c
	}
	if found == nil {
		return nil, oauth.ErrInvalidTarget.WithDescription("audience is required: the connected service's identifier")
	}
	return found, nil
}

// subject finds the person's live access token, and with it (in the same query) the person's
// connections to c and the one the token's client may use. Anything wrong with the token is
// invalid_grant (RFC 8693 §2.2.2), and then the access read with it is not looked at.
func (g *Grant) subject(ctx context.Context, p *config.Project, raw string, c *config.Connector, now time.Time) (store.Token, store.AgentAccess, error) {
	dead := oauth.ErrInvalidGrant.WithDescription("the subject token is invalid, expired or revoked")
	if len(raw) > oauth.MaxFormBytes {
		return store.Token{}, store.AgentAccess{}, dead
	}
	t, access, err := g.store.SubjectAccess(ctx, secret.Hash(raw), c.Key)
	if errors.Is(err, store.ErrNotFound) {
		return store.Token{}, store.AgentAccess{}, dead
	}
	if err != nil {
		return store.Token{}, store.AgentAccess{}, oauth.Internal(err)
	}
	if t.Kind != store.AccessToken || t.Project != p.Key || !t.Active(now) || p.ClientGone(t.ClientID) {
		return store.Token{}, store.AgentAccess{}, dead
	}
	if t.Subject == "" {
		return store.Token{}, store.AgentAccess{}, oauth.ErrInvalidGrant.WithDescription("the subject token was not issued for a person")
	}
	// The person came with the token (one query, decision 0045): one the project no longer
	// lets sign in has no agent acting for them, whether or not their tokens were revoked yet.
	if access.Person.ID == "" || !site.PersonActive(p, access.Person) {
		return store.Token{}, store.AgentAccess{}, oauth.ErrInvalidGrant.WithDescription("the person can no longer sign in to this project")
	}
	return t, access, nil
}

// keyMismatch: a DPoP-bound subject token is its holder's only with the key (RFC 9449), so a
// copy taken off the wire buys no upstream token. The request's proof was checked at the token
// endpoint (htm, htu, iat, jti); its key (jkt, "" without a proof) must be the token's. The
// audience that exchanges its caller's token proved itself by client authentication, and
// checked the caller's proof at its own resource: the caller's key is not its to hold
// (decision 0053).
func keyMismatch(t store.Token, client *site.Client, jkt string) bool {
	return t.JKT != "" && t.ClientID == client.ID && t.JKT != jkt
}

// audienceOf reports whether the requesting client is an audience the token was issued for.
func audienceOf(t store.Token, client *site.Client, declared *config.Client) bool {
	for _, aud := range t.Audience {
		if aud == client.ID {
			return true
		}
		if declared != nil && slices.Contains(declared.Resources, aud) {
			return true
		}
	}
	return false
}

// permitted: only declared clients, and only for the connectors their resource lists.
func permitted(client *site.Client, declared *config.Client, c *config.Connector) bool {
	if client.Registered || declared == nil {
		return false
	}
	return slices.Contains(declared.Connectors, c.Key)
}

// agent is the client the subject token was issued to.
func (g *Grant) agent(ctx context.Context, p *config.Project, t store.Token, requester *site.Client) (*site.Client, error) {
	if t.ClientID == requester.ID {
		return requester, nil
	}
	a, err := g.env.Client(ctx, p, t.ClientID)
	if errors.Is(err, site.ErrUnknownClient) {
		return nil, oauth.ErrInvalidGrant.WithDescription("the client the subject token was issued to no longer exists")
	}
	if err != nil {
		return nil, oauth.Internal(err)
	}
	return a, nil
}

// decide returns the connection to hand out, or the kind of link the person needs:
// no connection to the service → connect; connections but none this agent may use → allow (or
// reconnect, when every one of them needs reconnecting); the permitted connection needing
// reconnecting (needs_reconnect or revoked_upstream, docs/connection-health.md) → reconnect.
// The access is read on every request (with the subject token, see subject): a permission
// withdrawn or a connection found revoked a moment ago decides the very next exchange.
func decide(access store.AgentAccess) (store.Connection, store.LinkKind) {
	if conn, ok := access.Permitted(); ok {
		if conn.Status.NeedsPerson() {
			return conn, store.LinkReconnect
		}
		return conn, ""
	}
	switch {
	case len(access.Connections) == 0:
		return store.Connection{}, store.LinkConnect
	case slices.ContainsFunc(access.Connections, func(x store.Connection) bool { return x.Status.Usable() }):
		return store.Connection{}, store.LinkAllow
	default:
		return store.Connection{}, store.LinkReconnect
	}
}

// refuse is the token-exchange refusal (docs/connections-for-agents.md, "The refusal"), with the
// person's one open link for this agent and service.
// A request that named an account gets a link for exactly that account, and the refusal's
// account member says which (docs/several-accounts.md).
func (g *Grant) refuse(ctx context.Context, p *config.Project, subject string, agent *site.Client, c *config.Connector, kind store.LinkKind, account string, now time.Time) error {
	offer, err := links.Open(ctx, g.env, g.store, p, links.Request{Subject: subject, Agent: agent.ID, Connector: c, Kind: kind, Account: account}, now)
	if err != nil {
		return oauth.Internal(err)
	}
	desc, msg := links.AccountTexts(offer.Kind, links.ServiceName(c), links.AgentName(agent), account, p.DefaultLanguage)
	extra := map[string]any{
		"reason":             reason(offer.Kind),
		"connect_uri":        offer.URI,
		"connect_id":         offer.ID,
		"connect_expires_in": offer.ExpiresIn(now),
		"connect_message":    msg,
	}
	if account != "" {
		extra[AccountParam] = account
	}
	return oauth.ErrInvalidGrant.WithDescription(desc).WithExtra(extra)
}

func reason(k store.LinkKind) string {
	switch k {
	case store.LinkAllow:
		return ReasonAllowRequired
	case store.LinkReconnect:
		return ReasonReconnectRequired
	default:
		return ReasonConnectRequired
	}
}

// response hands out the upstream token. token_type is the service's, in RFC 6750's spelling
// when it is a bearer token (GitHub says "bearer").
func response(tok *oauth2.Token, conn store.Connection, now time.Time) *oauth.TokenResponse {
	tt := tok.TokenType
	if tt == "" || strings.EqualFold(tt, "bearer") {
		tt = "Bearer"
	}
	r := &oauth.TokenResponse{
		AccessToken:     tok.AccessToken,
		IssuedTokenType: TokenTypeAccessToken,
		TokenType:       tt,
		Scope:           strings.Join(conn.Scopes, " "),
	}
	if !tok.Expiry.IsZero() {
		r.ExpiresIn = max(int64((tok.Expiry.Sub(now)+time.Second-1)/time.Second), 1)
	}
	return r
}

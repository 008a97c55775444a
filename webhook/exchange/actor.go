package exchange

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/oauth"
	"latchkey.dev/latchkey/webhook/site"
)

// Delegation at token exchange (RFC 8693 §1.1, §4.1, §4.4; docs/delegation.md).
//
// The requesting client is the actor: it authenticated itself, so it is the one acting,
// whatever else the request says. An exchange by the client the subject token was issued to
// continues the token's own chain; one by another client (an MCP server exchanging its
// caller's token) adds that client in front: act {sub: B, act: {sub: A}}. The chain is read
// from the stored token, never from a JWT's payload, so an act written into a presented token
// counts for nothing.
//
// actor_token, when sent, must say the same as the client authentication: an access token
// Latchkey issued to the requesting client (a client_credentials token, say). Anything else
// is invalid_request (RFC 8693 §2.2.2). A subject token whose may_act names an agent may be
// exchanged by its holder and by that agent only; any other is invalid_grant.

// actorTokenInvalid is the one answer to every actor token that is not the requesting
// client's: unknown, dead, foreign and another client's look alike.
var actorTokenInvalid = oauth.ErrInvalidRequest.WithDescription("actor_token must be a live access token issued to the requesting client")

// actor checks who acts with the subject token (the client it was issued to or for,
// actor_token, may_act, the chain's depth) and returns the chain of what the exchange hands
// out; each refusal is audited.
//
// workload is the workload (docs/workload-identity.md) whose own token the client presented as
// actor_token, or "".
func (g *Grant) actor(ctx context.Context, req *oauth.TokenRequest, subject store.Token, c *config.Connector) (chain *store.Actor, workload string, err error) {
	raw, typ, err := readActorToken(req.Form)
	if err != nil {
		return nil, "", err
	}
	client := req.Client
	if subject.ClientID != client.ID && !audienceOf(subject, client, req.Project.Clients[client.ID]) {
		g.record(ctx, req, subject.Subject, c, "not_issued_to_client", nil)
		return nil, "", oauth.ErrInvalidGrant.WithDescription("the subject token was issued neither to this client nor for it")
	}
	chain, refusal, err := actingChain(subject, req.Client)
	if err != nil {
		g.record(ctx, req, subject.Subject, c, refusal, withChain(nil, subject.Act))
		return nil, "", err
	}
	workload, err = g.checkActorToken(ctx, req, raw, typ)
	if err != nil {
		g.record(ctx, req, subject.Subject, c, "actor_token_invalid", withChain(nil, chain))
		return nil, "", err
	}
	return chain, workload, nil
}

// readActorToken reads actor_token and actor_token_type (RFC 8693 §2.1): both or neither.
func readActorToken(f url.Values) (tok, typ string, err error) {
	tok, typ = f.Get("actor_token"), f.Get("actor_token_type")
	switch {
	case tok == "" && typ == "":
		return "", "", nil
	case tok == "":
		return "", "", oauth.ErrInvalidRequest.WithDescription("actor_token_type is sent only with an actor_token")
	case typ == "":
		return "", "", oauth.ErrInvalidRequest.WithDescription("actor_token_type is required with an actor_token")
	case typ != TokenTypeAccessToken && typ != TokenTypeJWT:
		return "", "", oauth.ErrInvalidRequest.WithDescription("actor_token_type must be " + TokenTypeAccessToken +
			" (or " + TokenTypeJWT + " for a workload's own token)")
	case len(tok) > oauth.MaxFormBytes:
		return "", "", actorTokenInvalid
	}
	return tok, typ, nil
}

// actorWorkloadInvalid is the one answer to every workload actor token that does not prove the
// requesting client's own workload.
var actorWorkloadInvalid = oauth.ErrInvalidRequest.WithDescription("an actor_token of type " + TokenTypeJWT +
	" must be a token of the requesting client's own workload (spec.workloadIdentity), for this issuer")

// checkActorToken: the actor token is a live access token of this project issued to the
// requesting client, or (type jwt) a token of the requesting client's own workload
// (docs/workload-identity.md), whose verified identity it returns for the records, which
// then name the workload that acted.
func (g *Grant) checkActorToken(ctx context.Context, req *oauth.TokenRequest, raw, typ string) (string, error) {
	if raw == "" {
		return "", nil
	}
	if typ == TokenTypeJWT {
		w := req.Client.Workload
		if w == nil {
			return "", actorWorkloadInvalid
		}
		id, err := oauth.VerifyWorkload(ctx, g.env, w, req.Project.Issuer, raw)
		if e := oauth.AsError(err); err != nil && e.Code == oauth.ErrTemporarilyUnavailable.Code {
			return "", err
		}
		if err != nil {
			return "", actorWorkloadInvalid
		}
		return id.Subject, nil
	}
	return "", g.checkAccessActor(ctx, req, raw)
}

// checkAccessActor: the actor token is a live access token of this project issued to the
// requesting client.
func (g *Grant) checkAccessActor(ctx context.Context, req *oauth.TokenRequest, raw string) error {
	t, err := g.store.GetToken(ctx, secret.Hash(raw))
	if errors.Is(err, store.ErrNotFound) {
		return actorTokenInvalid
	}
	if err != nil {
		return oauth.Internal(err)
	}
	if t.Kind != store.AccessToken || t.Project != req.Project.Key || !t.Active(req.Now) || t.ClientID != req.Client.ID {
		return actorTokenInvalid
	}
	return nil
}

// actingChain is the act of what the exchange hands out: the subject token's chain, with the
// requesting client in front when it is not the token's holder. It refuses a client the
// token's may_act does not name, and a chain longer than oauth.MaxActDepth.
func actingChain(subject store.Token, client *site.Client) (*store.Actor, string, error) {
	prev := subject.Act
	if prev == nil {
		// A token stored before tokens carried their chain: its holder is its only actor.
		prev = &store.Actor{Sub: subject.ClientID}
	}
	if subject.ClientID == client.ID {
		return prev, "", nil
	}
	if subject.MayAct != nil && subject.MayAct.Sub != client.ID {
		return nil, "may_act_mismatch", oauth.ErrInvalidGrant.WithDescription("the subject token's may_act names another agent")
	}
	chain := oauth.ClientActor(client)
	chain.Act = prev
	if chain.Depth() > oauth.MaxActDepth {
		return nil, "act_too_deep", oauth.ErrInvalidGrant.WithDescription("the delegation chain would be longer than " + strconv.Itoa(oauth.MaxActDepth) + " agents")
	}
	return chain, "", nil
}

// withWorkload adds to an audit record's details the workload whose own token the actor
// presented (actor_workload: "system:serviceaccount:NS:NAME" or a SPIFFE ID), if any.
func withWorkload(details map[string]string, workload string) map[string]string {
	if workload == "" {
		return details
	}
	if details == nil {
		details = map[string]string{}
	}
	details["actor_workload"] = workload
	return details
}

// withChain adds the chain to an audit record's details: act lists the agents, the latest
// first ("mcp-b agent-a": mcp-b acted for the person via agent-a).
func withChain(details map[string]string, chain *store.Actor) map[string]string {
	if chain == nil {
		return details
	}
	if details == nil {
		details = map[string]string{}
	}
	details["act"] = strings.Join(chain.Chain(), " ")
	return details
}

// actorInterval is how often one replica writes the same connection actor: the admin API's
// "last used" is exact to about this much, and an agent exchanging in a loop costs one write a
// minute, not one per exchange (a write on SQLite waits for every other write).
const actorInterval = time.Minute

// maxActorCache bounds the remembered writes; past it the cache starts again empty.
const maxActorCache = 10000

// actorCache is when this replica last wrote each connection actor.
type actorCache struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// due reports whether key should be written at now, and if so counts it as written.
func (c *actorCache) due(key string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.last[key]; ok && now.Sub(t) < actorInterval && !now.Before(t) {
		return false
	}
	if c.last == nil || len(c.last) >= maxActorCache {
		c.last = map[string]time.Time{}
	}
	c.last[key] = now
	return true
}

// recordActor remembers that the chain's agent received the connection's token for its
// person (the admin API's connections show it), at most once per actorInterval per replica.
// It is a view for administrators, written after the handout's audit record: a failure is
// logged and the exchange still answers.
func (g *Grant) recordActor(ctx context.Context, req *oauth.TokenRequest, conn store.Connection, chain *store.Actor) {
	ids := chain.Chain()
	if !g.actors.due(req.Project.Key+"\x00"+conn.ID+"\x00"+strings.Join(ids, " "), req.Now) {
		return
	}
	err := g.store.RecordConnectionActor(ctx, store.ConnectionActor{
		Project: req.Project.Key, ConnectionID: conn.ID, ClientID: ids[0], Via: strings.Join(ids[1:], " "), LastUsedAt: req.Now,
	})
	if err != nil {
		g.env.Log(ctx).Error(err, "recording a connection's actor failed", "project", req.Project.Key, "connection", conn.ID)
	}
}

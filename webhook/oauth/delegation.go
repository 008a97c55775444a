package oauth

import (
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/site"
)

// Delegation claims (RFC 8693 §4.1 act, §4.4 may_act; docs/delegation.md). Every token an agent
// holds for a person names the agent in act: act.sub is the client id, act.client_name the
// name an administrator declared for it. A client that registered itself, or is described by
// its own metadata document, is named by its id alone: its name is its own claim, and a
// resource server showing "Repo Helper acted for alice" must not be showing a stranger's
// choice of words. A token that names no person (client_credentials) has no act: nobody is
// acted for.

// MaxActDepth bounds a delegation chain: the agent a person's token was issued to, and up to
// four agents that exchanged it on (docs/decisions/0075).
const MaxActDepth = 5

// ClientActor is the act member naming client, with no earlier actor.
func ClientActor(c *site.Client) *store.Actor {
	a := &store.Actor{Sub: c.ID}
	if !c.Registered {
		a.ClientName = c.Name
	}
	return a
}

// delegationOf is the act and may_act of an issuance: none without a person; else is.Act when
// the issuance continues a chain (a token exchange), or the client itself; and may_act naming
// the one agent the client's declaration lets act with its tokens (spec.mayAct), if any.
func delegationOf(p *config.Project, is Issue) (act, mayAct *store.Actor) {
	if is.Subject == "" {
		return nil, nil
	}
	act = is.Act
	if act == nil {
		act = ClientActor(is.Client)
	}
	if is.Client.Registered {
		return act, nil
	}
	if d := p.Clients[is.Client.ID]; d != nil && d.MayAct != "" {
		mayAct = &store.Actor{Sub: d.MayAct}
		if named := p.Clients[d.MayAct]; named != nil {
			mayAct.ClientName = named.Name
		}
	}
	return act, mayAct
}

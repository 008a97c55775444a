package links

import (
	"context"
	"errors"
	"fmt"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/site"
)

// Request asks for the link of one person × agent × connector.
type Request struct {
	// Subject is the person (Person.ID).
	Subject string
	// Agent is the client id of the agent the person would let use the account.
	Agent     string
	Connector *config.Connector
	Kind      store.LinkKind
	// Account is the account the agent named, "" for none: the link is for exactly that
	// account, and a request naming another one replaces it (docs/several-accounts.md).
	Account string
}

// Offer is a link as the token-exchange refusal hands it out.
type Offer struct {
	// ID is connect_id: stable while the link is open, and not the code.
	ID   string
	URI  string
	Kind store.LinkKind
	// ExpiresAt is when the link stops working; the refusal says how far away that is.
	ExpiresAt time.Time
}

// ExpiresIn is connect_expires_in: whole seconds left at now, rounded up, at least 1.
func (o Offer) ExpiresIn(now time.Time) int64 {
	left := o.ExpiresAt.Sub(now)
	secs := int64((left + time.Second - 1) / time.Second)
	return max(secs, 1)
}

// Open returns the open link for the request, making one when there is none or when the open
// one asks for something else (the old code then leads to the 404 page). Concurrent calls for
// one person × agent × connector end with one link, and every caller gets its code: the winner
// made it, the others open the sealed copy.
func Open(ctx context.Context, env *site.Env, st OpenStore, p *config.Project, req Request, now time.Time) (Offer, error) {
	if req.Subject == "" || req.Agent == "" || req.Connector == nil {
		return Offer{}, errors.New("links: Open needs a person, an agent and a connector")
	}
	switch req.Kind {
	case store.LinkConnect, store.LinkAllow, store.LinkReconnect:
	default:
		return Offer{}, fmt.Errorf("links: unknown link kind %q", req.Kind)
	}
	life := p.Lifetimes.Link
	if life <= 0 {
		life = config.DefaultLifetimes().Link
	}
	code := secret.New("")
	id := secret.NewID()
	keyID, sealed := env.Keyring.Seal(codePurpose(p.Key, id), []byte(code))
	l, created, err := st.OpenLink(ctx, store.Link{
		ID: id, CodeHash: secret.Hash(code), SealedCode: sealed, KeyID: keyID,
		Project: p.Key, Subject: req.Subject, ClientID: req.Agent, Connector: req.Connector.Key,
		Kind: req.Kind, Account: req.Account, State: store.LinkOpen, ExpiresAt: now.Add(life), CreatedAt: now,
	}, now)
	if err != nil {
		return Offer{}, fmt.Errorf("links: opening a link: %w", err)
	}
	if !created {
		plain, err := env.Keyring.Open(codePurpose(l.Project, l.ID), l.KeyID, l.SealedCode)
		if err != nil {
			// The key that sealed it was removed while the link was open. The code cannot be
			// recovered, and a second open link is not allowed; the link expires on its own.
			return Offer{}, fmt.Errorf("links: opening the sealed code of link %s: %w", l.ID, err)
		}
		code = string(plain)
	} else {
		details := map[string]string{"link_id": l.ID, "kind": string(l.Kind), "connector": l.Connector, "client_id": req.Agent}
		if l.Account != "" {
			details["account"] = l.Account
		}
		env.Record(ctx, store.AuditRecord{
			Project: p.Key, Time: now, Actor: "client:" + req.Agent, Action: events.LinkCreated, Target: req.Subject,
			Details: details,
		})
	}
	return Offer{ID: l.ID, URI: URI(p, code), Kind: l.Kind, ExpiresAt: l.ExpiresAt}, nil
}

// codePurpose binds a sealed code to its own link, so a sealed value copied between rows does
// not open.
func codePurpose(project, linkID string) string {
	return "latchkey/link-code\x00" + project + "\x00" + linkID
}

package site

import (
	"context"
	"net/http"
	"net/netip"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/policy"
	"latchkey.dev/latchkey/internal/store"
)

// Decide asks the project's AccessPolicies whether req may go on (docs/policy.md), at the time
// on the injected clock. A project without AccessPolicies or decision point allows without a
// look at anything else, so a flow builds the request's person only when HasAccessPolicy.
func (e *Env) Decide(ctx context.Context, p *config.Project, req policy.Request) policy.Decision {
	req.Policies = p.AccessPolicy
	if req.Time.IsZero() {
		req.Time = e.Now()
	}
	return policy.Decide(ctx, e.Policy, req)
}

// HasAccessPolicy reports whether the project's requests need a decision at all.
func (e *Env) HasAccessPolicy(p *config.Project) bool {
	return e.Policy != nil && p.AccessPolicy != nil
}

// AgentOf is the policy model's agent for a client.
func AgentOf(c *Client) policy.Agent {
	return policy.Agent{ClientID: c.ID, Name: c.Name, Registered: c.Registered}
}

// RecordDenied writes access.denied_by_policy: the refusal of d, naming what denied.
func (e *Env) RecordDenied(ctx context.Context, p *config.Project, actor string, req policy.Request, d policy.Decision) {
	if req.Time.IsZero() {
		req.Time = e.Now()
	}
	e.Record(ctx, store.AuditRecord{
		Project: p.Key, Time: req.Time, Actor: actor, Action: events.AccessDeniedByPolicy,
		Target: req.Person.Subject, ClientID: req.Agent.ClientID, Outcome: store.OutcomeRefused, Reason: "policy",
		Details: map[string]string{"action": string(req.Action), "policy": d.Policy, "resource": string(req.Resource.Kind) + "::" + req.Resource.ID},
	})
}

// RequestAddress is the client address of r for policies (context.network.address): the
// connection's peer, or what a trusted proxy says (internal/clientaddr); invalid when unknown.
func (e *Env) RequestAddress(r *http.Request) netip.Addr {
	if r == nil {
		return netip.Addr{}
	}
	a, _ := netip.ParseAddr(e.Addresses.Address(r))
	return a
}

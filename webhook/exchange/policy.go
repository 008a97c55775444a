package exchange

import (
	"context"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/policy"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/oauth"
	"latchkey.dev/latchkey/webhook/site"
)

// policies applies the project's redirect policy to the agent, then its AccessPolicies.
func (g *Grant) policies(ctx context.Context, req *oauth.TokenRequest, subject store.Token, agent *site.Client, c *config.Connector) error {
	// The person's token is only as good as the client it was issued to: one the redirect
	// policy refuses gets nothing, on every replica, before the controller revokes anything.
	if err := g.env.RedirectPolicy(req.Project, agent.RedirectURIs); err != nil {
		g.record(ctx, req, subject.Subject, c, "only_recognised_apps", nil)
		return oauth.ErrInvalidGrant.WithDescription(err.Error())
	}
	return g.allowedByPolicy(ctx, req, subject, agent, c)
}

// allowedByPolicy asks the project's AccessPolicies whether agent may have the person's token
// at connector c (Action::"exchange", docs/policy.md). A denial is access_denied naming the
// policy, with access.denied_by_policy in the audit log; it comes after every check of who may
// exchange, so a policy can only take away, and before any connection is read.
func (g *Grant) allowedByPolicy(ctx context.Context, req *oauth.TokenRequest, subject store.Token, agent *site.Client, c *config.Connector) error {
	p := req.Project
	if !g.env.HasAccessPolicy(p) {
		return nil
	}
	person := policy.Person{Subject: subject.Subject}
	// The person's email costs a read; it is read only when a policy may look at it.
	if p.AccessPolicy.ReadsEmail() {
		if pr, err := g.store.GetPerson(ctx, p.Key, subject.Subject); err == nil {
			person.Email = pr.Email
		}
	}
	pr := policy.Request{
		Action:   policy.ActionExchange,
		Person:   person,
		Agent:    site.AgentOf(agent),
		Resource: policy.Resource{Kind: policy.KindConnector, ID: c.Audience},
		Address:  g.env.RequestAddress(req.HTTP),
		Time:     req.Now,
	}
	d := g.env.Decide(ctx, p, pr)
	if d.Allow {
		return nil
	}
	g.env.RecordDenied(ctx, p, "client:"+req.Client.ID, pr, d)
	return oauth.ErrAccessDenied.WithDescription(d.Reason)
}

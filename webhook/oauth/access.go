package oauth

import (
	"context"

	access "latchkey.dev/latchkey/internal/policy"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/site"
)

// allowedByPolicy asks the project's AccessPolicies whether the client may be issued tokens
// for person (Action::"issue", docs/policy.md), once per audience the tokens are for (the
// issuer when none). A denial is access_denied naming the policy, recorded as
// access.denied_by_policy; nothing is issued.
func allowedByPolicy(ctx context.Context, req *TokenRequest, person store.Person, audience []string) error {
	env, p := req.Env, req.Project
	if !env.HasAccessPolicy(p) {
		return nil
	}
	if len(audience) == 0 {
		audience = []string{p.Issuer}
	}
	for _, aud := range audience {
		pr := access.Request{
			Action:   access.ActionIssue,
			Person:   access.Person{Subject: person.ID, Email: person.Email},
			Agent:    site.AgentOf(req.Client),
			Resource: access.Resource{Kind: access.KindAudience, ID: aud},
			Address:  env.RequestAddress(req.HTTP),
			Time:     req.Now,
		}
		if d := env.Decide(ctx, p, pr); !d.Allow {
			env.RecordDenied(ctx, p, "client:"+req.Client.ID, pr, d)
			return ErrAccessDenied.WithDescription(d.Reason)
		}
	}
	return nil
}

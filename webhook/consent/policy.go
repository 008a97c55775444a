package consent

import (
	"net/http"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/policy"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/oauth"
	"latchkey.dev/latchkey/webhook/site"
)

// allowedByPolicy asks the project's AccessPolicies whether the person may let this agent in
// (Action::"consent", docs/policy.md), once per audience the request names (the issuer when
// none). It is asked before the consent page is shown, so a person is never asked to approve
// what would be refused, and again when they approve. A denial is access_denied naming the
// policy, sent to the verified redirect URI, and recorded as access.denied_by_policy.
func (a *authorizer) allowedByPolicy(r *http.Request, p *config.Project, req *request, person store.Person) error {
	if !a.env.HasAccessPolicy(p) {
		return nil
	}
	audience := req.Resources
	if len(audience) == 0 {
		audience = []string{p.Issuer}
	}
	for _, aud := range audience {
		pr := policy.Request{
			Action:   policy.ActionConsent,
			Person:   policy.Person{Subject: person.ID, Email: person.Email},
			Agent:    site.AgentOf(req.Client),
			Resource: policy.Resource{Kind: policy.KindAudience, ID: aud},
			Address:  a.env.RequestAddress(r),
			Time:     a.env.Now(),
		}
		if d := a.env.Decide(r.Context(), p, pr); !d.Allow {
			a.env.RecordDenied(r.Context(), p, person.ID, pr, d)
			return oauth.ErrAccessDenied.WithDescription(d.Reason)
		}
	}
	return nil
}

package ciba

import (
	"latchkey.dev/latchkey/internal/authzdetails"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/webhook/oauth"
)

// Details validates an authorization_details parameter (RFC 9396 §2) against the Project's
// declared types (internal/authzdetails, docs/authorization-details.md) and returns it in the
// canonical form stored with the request and, once approved, with its tokens: "" when absent.
// A Project that declares no types refuses every such parameter.
func Details(p *config.Project, raw string) (string, error) {
	ds, err := authzdetails.Parse(p.AuthorizationDetails, raw)
	if err != nil {
		return "", oauth.DetailsError(err)
	}
	return authzdetails.Marshal(ds), nil
}

// Describe says each stored authorization detail in words for the approvals page, in the
// page's language; plain text, which the page escapes.
func Describe(p *config.Project, stored string, pr authzdetails.Printer) []string {
	ds, err := authzdetails.Unmarshal(stored)
	if err != nil || len(ds) == 0 {
		return nil
	}
	return authzdetails.Describe(p.AuthorizationDetails, ds, pr)
}

// approved reads a request's stored details back for the tokens it is redeemed for.
func approved(stored string) ([]authzdetails.Detail, error) {
	return authzdetails.Unmarshal(stored)
}

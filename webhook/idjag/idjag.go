// Package idjag is the Identity Assertion JWT Authorization Grant (ID-JAG,
// draft-ietf-oauth-identity-assertion-authz-grant), which the MCP extension
// "Enterprise-Managed Authorization" builds on, in both directions (docs/enterprise-idjag.md):
//
//   - as the resource's authorization server, a Project redeems ID-JAGs that an enterprise
//     identity provider it trusts (spec.identityAssertions.trustedIssuers) signed, with the JWT
//     bearer grant (RFC 7523 §2.1) at its token endpoint, and issues its own access token for
//     the person, without a consent screen: the company's identity provider decided;
//   - as the company's identity provider, a Project issues ID-JAGs for the authorization
//     servers it declares (spec.identityAssertions.audiences) by token exchange (RFC 8693)
//     with requested_token_type urn:ietf:params:oauth:token-type:id-jag.
//
// Every redemption, refusal and issuance is audited (idjag.redeemed, idjag.refused,
// idjag.issued). The decisions behind the rules are in docs/decisions/0039.
package idjag

import (
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/webhook/oauth"
	"latchkey.dev/latchkey/webhook/site"
)

// Protocol identifiers.
const (
	// GrantJWTBearer is the JWT bearer authorization grant (RFC 7523 §2.1).
	GrantJWTBearer = "urn:ietf:params:oauth:grant-type:jwt-bearer"
	// TokenTypeIDJAG is the token type of an ID-JAG in token exchange.
	TokenTypeIDJAG = "urn:ietf:params:oauth:token-type:id-jag"
	// TokenTypeIDToken and TokenTypeAccessToken are the subject token types a Project accepts
	// when it issues ID-JAGs (RFC 8693 §3).
	TokenTypeIDToken     = "urn:ietf:params:oauth:token-type:id_token"
	TokenTypeAccessToken = "urn:ietf:params:oauth:token-type:access_token"
	// Typ is the JWS typ header of an ID-JAG; the media type form is accepted too (RFC 7515 §4.1.9).
	Typ = "oauth-id-jag+jwt"
)

// Audit actions, catalogued with the rest in internal/events (docs/audit.md).
const (
	ActionRedeemed = events.IDJAGRedeemed
	ActionRefused  = events.IDJAGRefused
	ActionIssued   = events.IDJAGIssued
)

// Register adds both directions to a token endpoint: handle is webhook.Server.Grant.
// exchange is the token-exchange handler already in place (webhook/exchange); token exchange
// requests for an ID-JAG are answered here and every other one is passed to it.
func Register(handle func(grantType string, h oauth.GrantHandler), env *site.Env, st Store, exchange oauth.GrantHandler) {
	keys := NewKeys(env.Now)
	handle(GrantJWTBearer, &Redeemer{env: env, store: st, keys: keys})
	handle(site.GrantTokenExchange, &Issuer{env: env, store: st, next: exchange})
}

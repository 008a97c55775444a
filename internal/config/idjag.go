package config

import (
	"net/netip"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// IdentityAssertions is a Project's part in Identity Assertion JWT Authorization Grants
// (ID-JAG, docs/enterprise-idjag.md): the enterprise identity providers whose ID-JAGs it
// redeems at its token endpoint, and the authorization servers it issues ID-JAGs for. The zero
// value does neither.
type IdentityAssertions struct {
	// Issuers whose ID-JAGs the Project redeems, by issuer identifier.
	Issuers map[string]*AssertionIssuer
	// Audiences the Project issues ID-JAGs for, by their issuer identifier.
	Audiences map[string]*AssertionAudience
	// Lifetime of the ID-JAGs the Project issues; 5 minutes by default.
	Lifetime time.Duration
}

// DefaultAssertionLifetime is the lifetime of an issued ID-JAG when the Project sets none: long
// enough to be redeemed at once, short enough that a leaked one is soon worthless.
const DefaultAssertionLifetime = 5 * time.Minute

// Subject claims an AssertionIssuer maps people by.
const (
	AssertionSubjectSub   = "sub"
	AssertionSubjectEmail = "email"
)

// AssertionIssuer is one trusted ID-JAG issuer.
type AssertionIssuer struct {
	Issuer string
	// JWKSURI is fetched (through internal/netguard, with AllowedNetworks) when JWKS is nil.
	JWKSURI string
	JWKS    *jose.JSONWebKeySet
	// Clients are the declared OAuthClients that may present this issuer's ID-JAGs;
	// AllClients admits every declared OAuthClient. Clients that registered themselves are
	// never admitted.
	Clients    []string
	AllClients bool
	// Subject is AssertionSubjectSub or AssertionSubjectEmail.
	Subject string
	// EmailDomains are the lower-cased domains whose addresses this issuer speaks for when
	// Subject is AssertionSubjectEmail.
	EmailDomains []string
	// CreatePeople creates a person the Project has not seen; otherwise only people it knows
	// are given tokens.
	CreatePeople bool
	// AllowedNetworks are the Project's spec.upstreamNetwork.allowedCIDRs.
	AllowedNetworks []netip.Prefix
}

// AssertionAudience is one authorization server the Project issues ID-JAGs for.
type AssertionAudience struct {
	// Issuer is the authorization server's issuer identifier: the ID-JAG's aud.
	Issuer string
	// Clients may request ID-JAGs for this audience, by their client id here.
	Clients map[string]AssertionClient
	// Scopes and Resources an ID-JAG for this audience may carry.
	Scopes    []string
	Resources []string
}

// AssertionClient is a client allowed to request ID-JAGs for an audience.
type AssertionClient struct {
	// ResourceClientID is the client's id at the audience: the ID-JAG's client_id.
	ResourceClientID string
}

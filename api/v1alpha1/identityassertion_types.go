package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IdentityAssertions declares the Project's part in Identity Assertion JWT Authorization
// Grants (ID-JAG, draft-ietf-oauth-identity-assertion-authz-grant).
// +kubebuilder:validation:XValidation:rule="!has(self.lifetime) || (duration(self.lifetime) >= duration('30s') && duration(self.lifetime) <= duration('10m'))",message="identityAssertions.lifetime must be between 30s and 10m"
type IdentityAssertions struct {
	// trustedIssuers are the enterprise identity providers whose ID-JAGs this Project redeems
	// with the JWT bearer grant (grant_type urn:ietf:params:oauth:grant-type:jwt-bearer) at its
	// token endpoint, issuing its own access token for the person without a consent screen.
	// Each issuer appears once. At most 8.
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=issuer
	// +optional
	TrustedIssuers []TrustedAssertionIssuer `json:"trustedIssuers,omitempty"`

	// audiences are the authorization servers this Project issues ID-JAGs for, by token
	// exchange (RFC 8693) with requested_token_type urn:ietf:params:oauth:token-type:id-jag.
	// A request naming any other audience is refused with invalid_target. Each issuer appears
	// once. At most 32.
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=issuer
	// +optional
	Audiences []AssertionAudience `json:"audiences,omitempty"`

	// lifetime of the ID-JAGs this Project issues. Defaults to 5m; at least 30s, at most 10m
	// (the longest lifetime a Project accepts when it redeems one).
	// +optional
	Lifetime *metav1.Duration `json:"lifetime,omitempty"`
}

// AssertionSubject is the claim of an ID-JAG that names the person.
// +kubebuilder:validation:Enum=sub;email
type AssertionSubject string

const (
	// AssertionSubjectSub maps the issuer's sub to a person of the issuer's own; when the issuer
	// is the Project's spec.signIn.oidc issuer, to the person who signs in there.
	AssertionSubjectSub AssertionSubject = "sub"
	// AssertionSubjectEmail maps the email claim, within emailDomains, to the person of the
	// password file with that address, or else to a person of the issuer's own.
	AssertionSubjectEmail AssertionSubject = "email"
)

// TrustedAssertionIssuer is one identity provider whose ID-JAGs the Project redeems.
// +kubebuilder:validation:XValidation:rule="has(self.jwksURI) != has(self.jwks)",message="set exactly one of jwksURI and jwks"
// +kubebuilder:validation:XValidation:rule="!has(self.subject) || self.subject != 'email' || (has(self.emailDomains) && size(self.emailDomains) > 0)",message="emailDomains is required when subject is email: it says which addresses this issuer speaks for"
// +kubebuilder:validation:XValidation:rule="!has(self.clients) || !('*' in self.clients) || size(self.clients) == 1",message="clients: '*' stands alone"
type TrustedAssertionIssuer struct {
	// issuer is the identity provider's issuer identifier, exactly as its ID-JAGs' iss claim
	// says it (e.g. https://acme.okta.com). Required.
	// +required
	Issuer EndpointURL `json:"issuer"`

	// jwksURI is where the issuer publishes its signing keys (its metadata's jwks_uri). It is
	// fetched through the same address guard as Connector endpoints (only public addresses, or
	// those in spec.upstreamNetwork.allowedCIDRs), kept 15 minutes, and fetched again, at most
	// once a minute, when an ID-JAG names a key id it does not hold. Conflicts with jwks.
	// +optional
	JWKSURI EndpointURL `json:"jwksURI,omitempty"`

	// jwks is the issuer's public signing keys as a JSON Web Key Set ({"keys":[...]}), for
	// an issuer whose keys are not fetched. Private key members are ignored. At most 16384
	// characters. Conflicts with jwksURI.
	// +kubebuilder:validation:MaxLength=16384
	// +optional
	JWKS string `json:"jwks,omitempty"`

	// clients are the OAuthClients (by client id) that may present this issuer's ID-JAGs; the
	// ID-JAG's client_id claim must also name the presenting client. "*" alone admits every
	// OAuthClient of the Project. Clients that registered themselves (dynamic registration or
	// metadata documents) are never admitted. Each client also lists the jwt-bearer grant in
	// its spec.grantTypes and authenticates. At least 1, at most 64.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=255
	// +listType=set
	// +required
	Clients []string `json:"clients"`

	// subject is the claim that names the person: sub (the default) or email. See
	// docs/enterprise-idjag.md, "Who the person is", for how each maps onto the Project's
	// people and why an email address is trusted only within emailDomains.
	// +optional
	Subject AssertionSubject `json:"subject,omitempty"`

	// emailDomains are the domains (lower case, e.g. acme.example) whose addresses this issuer
	// speaks for; required when subject is email, ignored otherwise. At most 16.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$`
	// +listType=set
	// +optional
	EmailDomains []string `json:"emailDomains,omitempty"`

	// createPeople creates a person the Project has not seen before on their first ID-JAG.
	// False by default: the person must have signed in to the Project once (or, with subject
	// email, be in its password file).
	// +optional
	CreatePeople bool `json:"createPeople,omitempty"`
}

// AssertionAudience is one authorization server this Project issues ID-JAGs for.
type AssertionAudience struct {
	// issuer is the authorization server's issuer identifier: the audience clients name and
	// the ID-JAG's aud. Required.
	// +required
	Issuer EndpointURL `json:"issuer"`

	// clients may request ID-JAGs for this audience. At least 1, at most 64.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=clientID
	// +required
	Clients []AssertionAudienceClient `json:"clients"`

	// resources are the resource identifiers (RFC 8707; e.g. an MCP server's URL) an ID-JAG
	// for this audience may name; a request for any other is refused with invalid_target.
	// At most 32.
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	// +optional
	Resources []ResourceURI `json:"resources,omitempty"`

	// scopes an ID-JAG for this audience may carry; a request for any other is refused with
	// invalid_scope. Empty: ID-JAGs carry no scope. At most 64.
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +optional
	Scopes []Scope `json:"scopes,omitempty"`
}

// AssertionAudienceClient is a client allowed to request ID-JAGs for an audience.
type AssertionAudienceClient struct {
	// clientID is the OAuthClient's client id at this Project. Required; at most 255
	// characters.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +required
	ClientID string `json:"clientID"`

	// resourceClientID is the same client's id at the audience, which the ID-JAG's client_id
	// claim carries. Defaults to clientID. At most 255 characters.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	ResourceClientID string `json:"resourceClientID,omitempty"`
}

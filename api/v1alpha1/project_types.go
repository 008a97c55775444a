package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Project condition types and reasons. The reasons double as Event reasons.
const (
	// ProjectReadyCondition is True when the Project is compiled into the server's configuration
	// and its issuer is serving, also while a broken Secret turns one feature off (then
	// ProjectDegradedCondition is True).
	ProjectReadyCondition = ReadyCondition
	// ProjectReadyReason: the Project is compiled and its issuer serves.
	ProjectReadyReason = ReadyReason
	// ProjectDegradedCondition is True when a broken Secret turns a feature of a serving Project
	// off; the reason is ProjectSecretMissingReason or ProjectSecretInvalidReason and the message
	// lists every problem, what is off and how to fix it. False with ProjectCompleteReason
	// otherwise.
	ProjectDegradedCondition = DegradedCondition
	// ProjectCompleteReason: every Secret the Project refers to exists and parses.
	ProjectCompleteReason = CompleteReason
	// ProjectSecretMissingReason (Degraded): a Secret named in the spec (password file, OIDC client secret,
	// initial access tokens, event sink HMAC key, signing keys) does not exist.
	ProjectSecretMissingReason = SecretMissingReason
	// ProjectSecretInvalidReason (Degraded): a referenced Secret lacks the key or its content is unusable
	// (for example a malformed password file); the message says which and why.
	ProjectSecretInvalidReason = SecretInvalidReason
	// ProjectSigningKeysUnavailableReason: signingKeySource is Operator but the server keeps no
	// keys Secret (started without --keys-secret); the Project issues only opaque tokens.
	ProjectSigningKeysUnavailableReason = "SigningKeysUnavailable"
	// ProjectIdentityAssertionKeysInvalidReason (Degraded): an inline jwks of
	// spec.identityAssertions.trustedIssuers does not parse as a JSON Web Key Set of public
	// keys; that issuer's ID-JAGs are refused until it is fixed.
	ProjectIdentityAssertionKeysInvalidReason = "IdentityAssertionKeysInvalid"
	// ProjectLogoMissingReason (Degraded): spec.branding.logo names a ConfigMap or Secret, or a
	// key in it, that does not exist; the pages show no logo until it does.
	ProjectLogoMissingReason = "LogoMissing"
	// ProjectLogoInvalidReason (Degraded): the logo is larger than 64 KiB or is not a PNG or WebP
	// image (SVG is refused: it can carry script); the message says which. The pages show no logo.
	ProjectLogoInvalidReason = "LogoInvalid"
	// ProjectAccentColorLowContrastReason (Degraded): spec.branding.accentColor or
	// darkAccentColor would not reach WCAG 2.2 AA contrast where the pages use it; the message
	// gives the measured ratio and the one required. The pages keep Latchkey's own colour.
	ProjectAccentColorLowContrastReason = "AccentColorLowContrast"
	// ProjectAuthorizationDetailsInvalidReason (Degraded): spec.authorizationDetails could not
	// be compiled (a declaration the schema's validation would have refused); the message says
	// which. The Project accepts no authorization_details until it is fixed.
	ProjectAuthorizationDetailsInvalidReason = "AuthorizationDetailsInvalid"
)

// RegistrationMode is who may register OAuth clients at run time through the Project's
// /register endpoint (RFC 7591 dynamic client registration).
// +kubebuilder:validation:Enum=Open;Closed;InitialAccessToken
type RegistrationMode string

const (
	// RegistrationOpen lets any client register, as MCP clients such as Claude and ChatGPT
	// expect. A client's name proves nothing, so the consent screen (which leads with where
	// access goes) and RedirectPolicies are the protection (docs/recognised-apps.md).
	RegistrationOpen RegistrationMode = "Open"
	// RegistrationClosed refuses every registration; only OAuthClient resources exist.
	RegistrationClosed RegistrationMode = "Closed"
	// RegistrationInitialAccessToken accepts a registration only with a bearer token listed in
	// spec.registration.initialAccessTokenSecretRef.
	RegistrationInitialAccessToken RegistrationMode = "InitialAccessToken"
)

// FromNamespaces says which namespaces may attach objects to a Project, after Gateway API's
// allowedRoutes.namespaces.from.
// +kubebuilder:validation:Enum=Same;All;Selector
type FromNamespaces string

const (
	// NamespacesFromSame admits only the Project's own namespace.
	NamespacesFromSame FromNamespaces = "Same"
	// NamespacesFromAll admits every namespace.
	NamespacesFromAll FromNamespaces = "All"
	// NamespacesFromSelector admits namespaces whose labels match spec.allowedNamespaces.selector
	// (and the Project's own namespace).
	NamespacesFromSelector FromNamespaces = "Selector"
)

// SigningKeySource says where a Project's JWT signing keys come from.
// +kubebuilder:validation:Enum=Secret;Operator
type SigningKeySource string

const (
	// SigningKeysFromSecret: the Secret named by spec.signingKeySecretRef, rotated by whoever
	// writes it.
	SigningKeysFromSecret SigningKeySource = "Secret"
	// SigningKeysFromOperator: keys the operator keeps in its keys Secret and rotates itself
	// (announce, then sign, then retire).
	SigningKeysFromOperator SigningKeySource = "Operator"
)

// ProjectSpec declares a set of people, how they sign in, and the rules for the apps and agents
// they use.
// +kubebuilder:validation:XValidation:rule="!has(self.signingKeySource) || self.signingKeySource != 'Operator' || !has(self.signingKeySecretRef)",message="signingKeySource Operator conflicts with signingKeySecretRef: the operator's keys are used instead"
// +kubebuilder:validation:XValidation:rule="!has(self.signingKeySource) || self.signingKeySource != 'Secret' || has(self.signingKeySecretRef)",message="signingKeySource Secret requires signingKeySecretRef"
// +kubebuilder:validation:XValidation:rule="!has(self.registration) || !has(self.registration.mode) || self.registration.mode != 'InitialAccessToken' || has(self.registration.initialAccessTokenSecretRef)",message="registration.initialAccessTokenSecretRef is required when registration.mode is InitialAccessToken"
type ProjectSpec struct {
	// displayName is what people see on the sign-in, consent and account pages ("Acme
	// Engineering"), in each page's header and title in place of "Latchkey". Defaults to the
	// Project's name. At most 100 characters. It is text, escaped on every page, and never
	// appears inside the "Where access goes" panel's verdict (docs/branding.md).
	// +kubebuilder:validation:MaxLength=100
	// +optional
	DisplayName string `json:"displayName,omitempty"`

	// signIn says how people sign in: a password file, an upstream OpenID Connect provider, or
	// both. At least one must be set.
	// +required
	SignIn SignIn `json:"signIn"`

	// lifetimes of what the Project issues. Each unset lifetime takes its documented default.
	// +optional
	Lifetimes *Lifetimes `json:"lifetimes,omitempty"`

	// registration is the dynamic client registration policy. Defaults to mode Closed without
	// client ID metadata documents.
	// +optional
	Registration *Registration `json:"registration,omitempty"`

	// allowedNamespaces says which namespaces may attach OAuthClients, Connectors and
	// RedirectPolicies to this Project. Defaults to the Project's own namespace only (from: Same).
	// +optional
	AllowedNamespaces *AllowedNamespaces `json:"allowedNamespaces,omitempty"`

	// eventSinks receive the Project's security events (for example a refused connect link) as
	// CloudEvents over HTTP, signed with HMAC-SHA256. At most 8; names must be unique.
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=name
	// +optional
	EventSinks []EventSink `json:"eventSinks,omitempty"`

	// signingKeySecretRef names a Secret of private keys that sign JWT access tokens (RFC 9068)
	// for OAuthClients with accessTokenFormat jwt; their public halves are published at the
	// issuer's /jwks.json. Each data entry is one PEM private key (PKCS#8, SEC 1 "EC PRIVATE KEY"
	// or PKCS#1 "RSA PRIVATE KEY"): an ECDSA P-256 key signs with ES256, an RSA key of at least
	// 2048 bits with RS256. The entry's name is the key id; the entry whose name sorts last signs,
	// the others stay published so tokens they signed still verify during rotation (so name
	// entries by date, e.g. "2026-07.pem"). Unset means this Project issues only opaque tokens.
	// +optional
	SigningKeySecretRef *SecretReference `json:"signingKeySecretRef,omitempty"`

	// signingKeySource says where the keys that sign this Project's JWTs come from: Secret (the
	// Secret named by signingKeySecretRef) or Operator (an ES256 key of this Project's own,
	// derived from the signing keys the operator keeps and rotates in its keys Secret: a new key
	// is published at /jwks.json before it signs, and an old one stays published until every
	// token it signed has expired; docs/operations.md, "Keys: creation and rotation"). Operator
	// conflicts with signingKeySecretRef. Unset means Secret when signingKeySecretRef is set, and
	// otherwise that the Project issues only opaque tokens.
	// +optional
	SigningKeySource SigningKeySource `json:"signingKeySource,omitempty"`

	// branding gives the Project's pages its own look: a logo, an accent colour and a link to
	// help. A logo or colour that cannot be used makes the Project Degraded and the pages keep
	// Latchkey's default look; it never stops the Project serving. What tells a person where
	// access goes and warns them cannot be restyled (docs/branding.md).
	// +optional
	Branding *Branding `json:"branding,omitempty"`

	// defaultLanguage is the BCP 47 tag of the language the Project speaks when no browser says
	// which it prefers: the connect_message of the token-exchange refusal (which an agent relays
	// to a person) and pages whose request carries no Accept-Language. One of the shipped
	// languages: "en", "de" or "fr". Default "en". A person's Accept-Language, or their choice
	// in the language switcher, wins on pages (docs/languages.md).
	// +kubebuilder:validation:Enum=en;de;fr
	// +kubebuilder:default=en
	// +optional
	DefaultLanguage string `json:"defaultLanguage,omitempty"`

	// upstreamNetwork says which addresses outside the public internet the server may call for
	// which Connectors attached to this Project. Unset, only public addresses are called: an
	// endpoint on loopback, a private range, a cluster Service or the cloud metadata service is
	// refused when it is dialled.
	// +optional
	UpstreamNetwork *UpstreamNetwork `json:"upstreamNetwork,omitempty"`

	// sharedConnections says which OAuthClients' agents may use the shared account of a
	// Connector whose spec.sharing is Organisation (docs/shared-connections.md). The Project
	// decides, not the Connector's or the client's team: the account is the organisation's.
	// A client must also list the Connector in its own spec.connectors, as for any token
	// exchange. Dynamically registered clients and clients described by metadata documents
	// never use a shared account, whatever is listed. An entry naming a Personal Connector is
	// ignored (the Connector reports Shared=False, SharingMismatch). Empty by default: no
	// client uses any shared account. At most 32 entries.
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=connector
	// +optional
	SharedConnections []SharedConnectionGrant `json:"sharedConnections,omitempty"`

	// requireDPoP makes every token request to this Project carry a DPoP proof (RFC 9449), for
	// every client, so every access token is bound to its client's key (cnf.jkt) and a copied
	// token is useless without the key. A request without a proof is refused with
	// invalid_dpop_proof. Defaults to false: proofs are accepted from any client, and required
	// only of OAuthClients that set spec.requireDPoP and of registered clients that registered
	// dpop_bound_access_tokens.
	// +optional
	RequireDPoP bool `json:"requireDPoP,omitempty"`

	// requireDPoPNonce makes every DPoP proof at the token endpoint carry a nonce the server
	// handed out (RFC 9449 §8): a proof without one, or with a stale one, is answered
	// use_dpop_nonce with a fresh DPoP-Nonce header, and the client signs again. This bounds how
	// long a proof made in advance (by malware that had the key for a moment) stays usable to
	// the nonce's lifetime, about a minute. Costs clients one more round trip the first time.
	// Defaults to false.
	// +optional
	RequireDPoPNonce bool `json:"requireDPoPNonce,omitempty"`

	// requirePushedAuthorizationRequests makes every client push its authorization requests to
	// the pushed authorization request endpoint (RFC 9126) first; /authorize then accepts only a
	// request_uri from it, and the metadata says so (require_pushed_authorization_requests).
	// Defaults to false: pushing is accepted from every client, required only of OAuthClients
	// that set spec.requirePushedAuthorizationRequests and of registered clients that registered
	// require_pushed_authorization_requests.
	// +optional
	RequirePushedAuthorizationRequests bool `json:"requirePushedAuthorizationRequests,omitempty"`

	// identityAssertions makes the Project take part in Identity Assertion JWT Authorization
	// Grants (ID-JAG, the basis of MCP Enterprise-Managed Authorization): it redeems the ID-JAGs
	// of the enterprise identity providers listed in trustedIssuers, and issues ID-JAGs for the
	// authorization servers listed in audiences (docs/enterprise-idjag.md). Unset, it does
	// neither.
	// +optional
	IdentityAssertions *IdentityAssertions `json:"identityAssertions,omitempty"`

	// authorizationDetails declares the types of rich authorization requests (RFC 9396) the
	// Project accepts: a client may send authorization_details of these types, and no other, at
	// /authorize, to the pushed authorization request endpoint and at the token endpoint; the
	// consent page shows them in words, approved details are carried in the tokens (the
	// authorization_details claim and introspection), a refresh never widens them, and a token
	// exchange for the Connector a type governs succeeds only within them
	// (docs/authorization-details.md). The metadata lists the names as
	// authorization_details_types_supported. Empty (the default): every authorization_details
	// parameter is refused with invalid_authorization_details. At most 32; types must be unique.
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=type
	// +optional
	AuthorizationDetails []AuthorizationDetailsType `json:"authorizationDetails,omitempty"`
	// accessDecisions sets how the Project's AccessPolicies are evaluated (the time zone their
	// context.time is in) and names an external decision point asked after them
	// (docs/policy.md). Unset: times are UTC and no decision point is asked.
	// +optional
	AccessDecisions *AccessDecisions `json:"accessDecisions,omitempty"`
}

// AccessDecisions are a Project's settings for deciding access (docs/policy.md).
type AccessDecisions struct {
	// timeZone is the IANA time zone ("Europe/Berlin") that context.time's hour, minute and
	// weekday are in, for the Project's AccessPolicies and its decision point. Default "UTC". A
	// name the server's time zone database does not know turns the Project's policies into a
	// refusal of everything, as an invalid policy does. At most 64 characters.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_+/-]+$`
	// +optional
	TimeZone string `json:"timeZone,omitempty"`

	// decisionPoint names an OpenID AuthZEN 1.0 Access Evaluation API endpoint
	// (https://pdp.example.com/access/v1/evaluation) asked, after the Project's own
	// AccessPolicies allow, whether to go on. It is asked with a 500 ms timeout and its answers
	// are reused for 5 seconds per identical question; no timely answer, an answer other than
	// 200 with a boolean decision, or an address the Project's spec.upstreamNetwork.allowedCIDRs
	// does not open (when it is not public) all refuse. At most 2048 characters.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="(self.startsWith('https://') || self.startsWith('http://')) && isURL(self) && size(url(self).getHostname()) > 0",message="decisionPoint must be an absolute https URL"
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('http://') || url(self).getHostname() in ['127.0.0.1', '::1', 'localhost']",message="decisionPoint may use http only to a loopback host"
	// +optional
	DecisionPoint string `json:"decisionPoint,omitempty"`
}

// AuthorizationDetailsType declares one type of authorization_details entry (RFC 9396 §2): the
// fields an entry of that type may carry, which values they may take, and the Connector it
// governs. An entry may carry only type, locations, actions, datatypes and identifier; any
// other member is refused.
// +kubebuilder:validation:XValidation:rule="!has(self.locationPrefixes) || (has(self.requireLocations) && self.requireLocations)",message="locationPrefixes requires requireLocations: true (an entry without locations would escape the prefixes)"
type AuthorizationDetailsType struct {
	// type is the value of an entry's "type" member, for example "github_repository" or a URI.
	// Letters, digits and "_-.:/", at most 128 characters; unique within the Project.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.:/-]+$`
	// +required
	Type string `json:"type"`

	// label is how the consent page names the type for people ("GitHub repository"). Text,
	// escaped on the page. At most 100 characters. Defaults to the type.
	// +kubebuilder:validation:MaxLength=100
	// +optional
	Label string `json:"label,omitempty"`

	// connector is the Connector whose token exchange this type governs, "namespace/name" or
	// "name" in the Project's namespace: when an agent's token carries entries of this type, an
	// exchange for that Connector's upstream token is allowed only within them. Unset, the type
	// governs no exchange and its entries are only carried in tokens for resource servers to
	// read. A Connector named here that does not exist or is not attached governs nothing
	// until it is.
	// +optional
	Connector ConnectorName `json:"connector,omitempty"`

	// actions are the values an entry's "actions" may take (for example read, write). When
	// set, an entry must name at least one; unset, an entry may name none. At most 32, each a
	// word of at most 64 characters.
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	// +optional
	Actions []AuthorizationDetailsValue `json:"actions,omitempty"`

	// datatypes are the values an entry's "datatypes" may take. Unset, an entry may name none.
	// At most 32.
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	// +optional
	Datatypes []AuthorizationDetailsValue `json:"datatypes,omitempty"`

	// requireLocations makes "locations" mandatory in an entry of this type: at least one
	// absolute URL of the resource. Defaults to false. Required for locationPrefixes.
	// +optional
	RequireLocations bool `json:"requireLocations,omitempty"`

	// locationPrefixes are the only places an entry's locations may be: the prefix itself, or a
	// URL below it (a "/" is added to a prefix that lacks one, so
	// "https://api.github.com/repos/acme" admits ".../repos/acme/api" and not
	// ".../repos/acme-evil"). Each is an absolute http or https URL without query or fragment.
	// A location with dot segments or escaped slashes is refused, so it cannot climb out of its
	// prefix. Unset: any absolute https URL. At most 16.
	// +kubebuilder:validation:MaxItems=16
	// +listType=set
	// +optional
	LocationPrefixes []AuthorizationDetailsLocation `json:"locationPrefixes,omitempty"`

	// identifier allows an entry to name an "identifier" (a resource's id at the API, at most
	// 512 characters without white space or control characters). Defaults to false: an entry
	// with an identifier is refused.
	// +optional
	Identifier bool `json:"identifier,omitempty"`
}

// AuthorizationDetailsValue is one allowed action or datatype: a word such as "read" or
// "read:contents", as the consent page shows it.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=64
// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.:/-]+$`
type AuthorizationDetailsValue string

// AuthorizationDetailsLocation is a location prefix: an absolute http or https URL without
// query or fragment.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=512
// +kubebuilder:validation:XValidation:rule="isURL(self) && (url(self).getScheme() == 'https' || url(self).getScheme() == 'http') && size(url(self).getHostname()) > 0",message="a location prefix must be an absolute http or https URL"
// +kubebuilder:validation:XValidation:rule="!self.contains('?') && !self.contains('#') && !self.contains('@')",message="a location prefix must have no query, fragment or userinfo"
type AuthorizationDetailsLocation string

// Branding is a Project's own look on its sign-in, consent, account and connect-link pages.
type Branding struct {
	// logo names an image in the Project's namespace: a key of a ConfigMap's binaryData (as
	// `kubectl create configmap --from-file=logo.png` writes it) or of a Secret's data. It must
	// be a PNG or WebP image of at most 64 KiB, shown at most 2.5rem high beside the display
	// name. SVG is refused because it can carry script. Latchkey serves the image itself, from
	// the Project's issuer with its content hash in the address, so pages load images only from
	// Latchkey's own origin (CSP img-src 'self'). Unset: no logo.
	// +optional
	Logo *LogoReference `json:"logo,omitempty"`

	// accentColor is the colour of the pages' main buttons in light mode, as #rrggbb. Button
	// text is white, so it must have a contrast ratio of at least 4.5:1 against white (WCAG 2.2
	// AA, 1.4.3), which also gives the 3:1 a control needs against the white card (1.4.11). A
	// colour that fails is refused: the Project becomes Degraded with reason
	// AccentColorLowContrast and the measured ratio, and the pages keep the default #2454d6.
	// Unset: the default.
	// +kubebuilder:validation:MaxLength=7
	// +kubebuilder:validation:XValidation:rule="self.matches('^#[0-9a-fA-F]{6}$')",message="accentColor must be a hex colour #rrggbb"
	// +optional
	AccentColor string `json:"accentColor,omitempty"`

	// darkAccentColor is the colour of the main buttons in dark mode, as #rrggbb. Button text is
	// near-black (#0b1020) there, so it must have a contrast ratio of at least 4.5:1 against
	// that text and 3:1 against the dark card (#1d2125). Refused like accentColor when it fails.
	// Unset: dark mode keeps the default #6c95ff (a light brand colour rarely reads well on a dark
	// page, so accentColor is not reused).
	// +kubebuilder:validation:MaxLength=7
	// +kubebuilder:validation:XValidation:rule="self.matches('^#[0-9a-fA-F]{6}$')",message="darkAccentColor must be a hex colour #rrggbb"
	// +optional
	DarkAccentColor string `json:"darkAccentColor,omitempty"`

	// supportURL is where the pages' "Help" link goes, for example the organisation's help desk.
	// An absolute https URL, at most 2048 characters. Unset: no Help link.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() == 'https' && size(url(self).getHostname()) > 0",message="supportURL must be an absolute https URL"
	// +kubebuilder:validation:XValidation:rule="!self.contains('#')",message="supportURL must not contain a fragment (#)"
	// +optional
	SupportURL string `json:"supportURL,omitempty"`
}

// LogoSourceKind is the kind of object a logo is read from.
// +kubebuilder:validation:Enum=ConfigMap;Secret
type LogoSourceKind string

const (
	// LogoFromConfigMap reads the logo from a ConfigMap's binaryData.
	LogoFromConfigMap LogoSourceKind = "ConfigMap"
	// LogoFromSecret reads the logo from a Secret's data.
	LogoFromSecret LogoSourceKind = "Secret"
)

// LogoReference names one key of a ConfigMap or Secret in the Project's namespace.
type LogoReference struct {
	// kind is ConfigMap (the image is in binaryData) or Secret (in data).
	// +required
	Kind LogoSourceKind `json:"kind"`

	// name of the ConfigMap or Secret, in the Project's namespace. It may be created before or
	// after the Project; until it exists the Project is Degraded with reason LogoMissing. At most
	// 253 characters.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	Name string `json:"name"`

	// key within binaryData (ConfigMap) or data (Secret). At most 253 characters of letters,
	// digits, '-', '_' and '.'.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +required
	Key string `json:"key"`
}

// SharedConnectionGrant lets some OAuthClients use one Connector's shared account.
type SharedConnectionGrant struct {
	// connector is the Organisation Connector, "namespace/name", or "name" in the Project's
	// namespace.
	// +required
	Connector ConnectorName `json:"connector"`

	// clients are the OAuthClients whose agents may use the shared account, each
	// "namespace/name", or "name" in the Project's namespace. At least 1, at most 64.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +required
	Clients []OAuthClientName `json:"clients"`
}

// OAuthClientName names an OAuthClient: "name" in the referring object's namespace, or
// "namespace/name".
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=317
// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
type OAuthClientName string

// UpstreamNetwork lets a Project's Connectors reach a service that is not on the public
// internet, such as an identity provider running in the cluster. Each range is opened only to
// the Connectors the Project's administrator names: the ranges of allowedCIDRs to those in the
// Project's own namespace, those of a grant to the Connectors it names or whose namespace it
// admits (docs/decisions/0052).
type UpstreamNetwork struct {
	// allowedCIDRs are address ranges, in CIDR notation ("10.96.12.34/32", "fd00:10:96::/112"),
	// that the server may dial for the token, userinfo, OIDC discovery and key, and revocation
	// endpoints of the Connectors in the Project's own namespace, and for the Project's own calls
	// (the keys of spec.identityAssertions' trusted issuers). A Connector in another namespace
	// does not get them: open a range to it with grants. Public addresses are always allowed;
	// any other address is refused at dial time, after DNS resolution, unless it is in a range
	// opened to the Connector. Link-local ranges (169.254.0.0/16 and fe80::/10, where cloud
	// metadata services answer), multicast and the unspecified address are never dialled,
	// whatever is listed. List the narrowest range that holds the provider (its Service's
	// ClusterIP as a /32). Empty by default. At most 16.
	// +kubebuilder:validation:MaxItems=16
	// +listType=set
	// +optional
	AllowedCIDRs []CIDR `json:"allowedCIDRs,omitempty"`

	// grants open address ranges to Connectors outside the Project's own namespace: each to the
	// Connectors it names, and to those in the namespaces it admits. A Connector dials only the
	// ranges of the grants that reach it (and, in the Project's namespace, allowedCIDRs). At
	// most 16.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	Grants []UpstreamNetworkGrant `json:"grants,omitempty"`
}

// UpstreamNetworkGrant opens address ranges to some of a Project's Connectors.
// +kubebuilder:validation:XValidation:rule="(has(self.connectors) && size(self.connectors) > 0) || has(self.namespaces)",message="a grant names connectors, namespaces, or both"
type UpstreamNetworkGrant struct {
	// cidrs are the address ranges the grant opens, in CIDR notation, under the rules of
	// allowedCIDRs (link-local, multicast and the unspecified address are never dialled). At
	// least 1, at most 16.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=set
	// +required
	CIDRs []CIDR `json:"cidrs"`

	// connectors the ranges are opened to, each "namespace/name", or "name" in the Project's
	// namespace. At most 32.
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	// +optional
	Connectors []ConnectorName `json:"connectors,omitempty"`

	// namespaces whose Connectors the ranges are opened to: Same (the Project's namespace), All
	// (every namespace the Project admits) or Selector (the namespaces selector matches, and the
	// Project's namespace).
	// +optional
	Namespaces *AllowedClientNamespaces `json:"namespaces,omitempty"`
}

// CIDR is an IPv4 or IPv6 address range in CIDR notation.
// +kubebuilder:validation:MaxLength=43
// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="must be an address range in CIDR notation, such as 10.96.12.34/32 or fd00:10:96::/112"
// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || !cidr(self).ip().isLinkLocalUnicast()",message="must not be a link-local range: cloud metadata services answer there, and it is never dialled"
type CIDR string

// SignIn is how people prove who they are to the Project.
// +kubebuilder:validation:XValidation:rule="has(self.passwordSecretRef) || has(self.oidc)",message="signIn must set passwordSecretRef, oidc, or both"
type SignIn struct {
	// passwordSecretRef names a password file: one key of a Secret holding a YAML or JSON list of
	// people, each {email, name, hash}, for example
	//
	//   - email: alice@example.com
	//     name: Alice
	//     hash: $2a$10$…
	//
	// email is matched case-insensitively and must be unique; hash is a bcrypt hash ("$2a$",
	// "$2b$" or "$2y$") or an argon2id PHC string ("$argon2id$v=19$m=…,t=…,p=…$salt$hash").
	// Plain passwords are refused. Editing the Secret takes effect without a restart.
	// +optional
	PasswordSecretRef *SecretKeyReference `json:"passwordSecretRef,omitempty"`

	// oidc signs people in with the organisation's OpenID Connect provider.
	// +optional
	OIDC *OIDCSignIn `json:"oidc,omitempty"`

	// requirePhishingResistant makes the recent sign-in that connecting an account (connect
	// links, the account page's Connect, confirming a callback in another browser) and changing
	// passkeys ask for a sign-in with a passkey: a person who signed in with a password or with
	// the OpenID provider is asked to sign in again with a passkey first. People who have no
	// passkey yet enrol their first one after a recent sign-in with the OpenID provider, never
	// after a password sign-in; on a Project without a provider, people enrol before this is
	// turned on (docs/passkeys.md). Default false: any recent sign-in will do.
	// +optional
	RequirePhishingResistant bool `json:"requirePhishingResistant,omitempty"`
}

// OIDCSignIn is an upstream OpenID Connect provider people sign in with.
type OIDCSignIn struct {
	// issuer is the provider's issuer URL, as in its discovery document; https, or http only to a
	// loopback host.
	// +required
	Issuer EndpointURL `json:"issuer"`

	// clientID is the client id Latchkey was registered with at the provider. At most 256
	// characters.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +required
	ClientID string `json:"clientID"`

	// clientSecretRef names the Secret key holding the client secret registered at the provider.
	// +required
	ClientSecretRef SecretKeyReference `json:"clientSecretRef"`

	// scopes requested from the provider. Defaults to openid, email and profile; "openid" must be
	// included. At most 16.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="'openid' in self",message="oidc.scopes must include openid"
	// +listType=set
	// +optional
	Scopes []Scope `json:"scopes,omitempty"`

	// label is the sign-in button's text. Defaults to "Sign in with SSO". At most 64 characters.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Label string `json:"label,omitempty"`

	// recheckInterval turns on re-checking people at the provider, so that someone disabled there
	// loses access within this long even if the provider sends no back-channel logout. When an
	// agent refreshes a token of a person whom the provider last confirmed longer ago than this,
	// Latchkey first refreshes that person's own provider token (kept, sealed, from their
	// sign-in); if the provider refuses it, the person's sessions and tokens end and the agent
	// gets invalid_grant. With it set, Latchkey also asks for the offline_access scope at
	// sign-in: the provider must issue refresh tokens for it. If the provider cannot be reached,
	// refreshes go on until the last confirmation is twice this old, then wait for the provider.
	// A Go duration, 1m to 24h. Unset (the default): no re-check, because not every provider
	// issues refresh tokens to every client (docs/leavers.md).
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1m') && duration(self) <= duration('24h')",message="oidc.recheckInterval must be between 1m and 24h"
	// +optional
	RecheckInterval *metav1.Duration `json:"recheckInterval,omitempty"`

	// allowedEmailDomains, when set, admits only people whose ID token carries an email in one
	// of these domains and email_verified true: the part after the email's last "@", lower-cased,
	// must equal a listed domain exactly (no subdomains, no wildcards). Anyone else is refused
	// at sign-in. Lower-case domain names, at most 64 (docs/projects-and-clients.md).
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +optional
	AllowedEmailDomains []EmailDomain `json:"allowedEmailDomains,omitempty"`

	// allowedGroups, when set, admits only people whose ID token's groupsClaim names at least
	// one of these groups, compared exactly. A token without the claim is refused. At most 64.
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +optional
	AllowedGroups []SignInGroup `json:"allowedGroups,omitempty"`

	// groupsClaim is the ID token claim that lists a person's groups, read when allowedGroups is
	// set: a list of strings, or one string. Defaults to "groups".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[!-~]+$`
	// +optional
	GroupsClaim string `json:"groupsClaim,omitempty"`
}

// EmailDomain is a lower-case DNS domain name such as "example.com": no "@", no wildcard, no
// trailing dot.
// +kubebuilder:validation:MinLength=3
// +kubebuilder:validation:MaxLength=253
// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)+[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`
type EmailDomain string

// SignInGroup is a group name as the provider writes it in its groups claim.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=256
type SignInGroup string

// Lifetimes of what a Project issues. Values are Go durations ("90s", "15m", "720h").
type Lifetimes struct {
	// session is how long a browser stays signed in. Defaults to 12h; 5m to 720h (30 days).
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('5m') && duration(self) <= duration('720h')",message="lifetimes.session must be between 5m and 720h"
	// +kubebuilder:default="12h"
	// +optional
	Session *metav1.Duration `json:"session,omitempty"`

	// recentSignIn is how recently a person must have signed in to open a connect link or change
	// a connection, so that a browser left signed in on a shared computer is not enough (check 4
	// of a connect link, docs/connections-for-agents.md). Defaults to 15m; 1m to 24h.
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1m') && duration(self) <= duration('24h')",message="lifetimes.recentSignIn must be between 1m and 24h"
	// +kubebuilder:default="15m"
	// +optional
	RecentSignIn *metav1.Duration `json:"recentSignIn,omitempty"`

	// authCode is how long an authorization code may wait to be redeemed. Defaults to 1m; 10s to
	// 10m (RFC 6749 §4.1.2 recommends at most ten minutes).
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('10s') && duration(self) <= duration('10m')",message="lifetimes.authCode must be between 10s and 10m"
	// +kubebuilder:default="1m"
	// +optional
	AuthCode *metav1.Duration `json:"authCode,omitempty"`

	// accessToken is the lifetime of access tokens. Defaults to 1h; 1m to 24h.
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1m') && duration(self) <= duration('24h')",message="lifetimes.accessToken must be between 1m and 24h"
	// +kubebuilder:default="1h"
	// +optional
	AccessToken *metav1.Duration `json:"accessToken,omitempty"`

	// refreshToken is the lifetime of refresh tokens. Defaults to 720h (30 days); 1h to 8760h
	// (365 days).
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1h') && duration(self) <= duration('8760h')",message="lifetimes.refreshToken must be between 1h and 8760h"
	// +kubebuilder:default="720h"
	// +optional
	RefreshToken *metav1.Duration `json:"refreshToken,omitempty"`

	// refreshGrace is how long after a refresh token was rotated a repeat of the same refresh
	// (a retry, a second tab) gets the same answer instead of counting as reuse and ending the
	// grant (docs/recognised-apps.md). Defaults to 10s; 0s (no grace) to 2m.
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('0s') && duration(self) <= duration('2m')",message="lifetimes.refreshGrace must be between 0s and 2m"
	// +kubebuilder:default="10s"
	// +optional
	RefreshGrace *metav1.Duration `json:"refreshGrace,omitempty"`

	// link is how long a connect link stays open. It clears away requests nobody finished; the
	// checks when the link is opened keep the wrong person out (docs/connections-for-agents.md).
	// Defaults to 30m; 1m to 24h.
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1m') && duration(self) <= duration('24h')",message="lifetimes.link must be between 1m and 24h"
	// +kubebuilder:default="30m"
	// +optional
	Link *metav1.Duration `json:"link,omitempty"`

	// callbackState is how long an upstream authorization (state, PKCE verifier, binding cookie)
	// may take before its callback is refused (docs/connectors-for-admins.md). Defaults to 10m;
	// 1m to 1h.
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1m') && duration(self) <= duration('1h')",message="lifetimes.callbackState must be between 1m and 1h"
	// +kubebuilder:default="10m"
	// +optional
	CallbackState *metav1.Duration `json:"callbackState,omitempty"`
}

// Registration is the Project's dynamic client registration policy.
type Registration struct {
	// mode is who may register: Open (anyone, as MCP clients expect), Closed (nobody; only
	// OAuthClient resources) or InitialAccessToken (bearers of a token from
	// initialAccessTokenSecretRef). Defaults to Closed.
	// +kubebuilder:default=Closed
	// +optional
	Mode RegistrationMode `json:"mode,omitempty"`

	// initialAccessTokenSecretRef names a Secret whose every data value is an accepted initial
	// access token (several at once allow rotation). Required when mode is InitialAccessToken;
	// ignored otherwise.
	// +optional
	InitialAccessTokenSecretRef *SecretReference `json:"initialAccessTokenSecretRef,omitempty"`

	// clientIDMetadataDocuments accepts an https URL as client_id and fetches the client's
	// metadata from it, as MCP clients do, without prior registration. Defaults to false.
	// +optional
	ClientIDMetadataDocuments bool `json:"clientIDMetadataDocuments,omitempty"`

	// clientCredentials is what a client that registered itself may get with the
	// client_credentials grant: a token for itself, which names no person. Unset (the default),
	// such a token names no resource server and carries no scope; the client can only introspect
	// it. Declared OAuthClients are limited by their own spec.resources and spec.scopes instead.
	// +optional
	ClientCredentials *RegisteredClientCredentials `json:"clientCredentials,omitempty"`

	// scopes are the only scopes a client that registered itself (or is described by a client ID
	// metadata document) may ask a person for at the authorization endpoint, further limited to
	// the scope it registered (when it registered one); any other is refused with invalid_scope
	// before the consent page. List the scopes of the MCP servers such clients call, tool scopes
	// included, and the OpenID Connect ones they need. Unset (the default): any scope, which
	// the person's consent alone decides on. At most 64.
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +optional
	Scopes []Scope `json:"scopes,omitempty"`
}

// RegisteredClientCredentials bounds the client_credentials tokens of clients that registered
// themselves (RFC 7591) or are described by a client ID metadata document. Anyone who can
// register gets what is listed here, so list only resource servers built to serve machines.
type RegisteredClientCredentials struct {
	// resources are the resource URLs (RFC 8707) such a client may name in a client_credentials
	// request; any other is refused with invalid_target. Empty means none. Each is https, or
	// http to a loopback host; no fragment. At most 16.
	// +kubebuilder:validation:MaxItems=16
	// +listType=set
	// +optional
	Resources []ResourceURI `json:"resources,omitempty"`

	// scopes such a token may carry, further limited to the scope the client registered (when it
	// registered one); any other is refused with invalid_scope. Empty means none. At most 64.
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +optional
	Scopes []Scope `json:"scopes,omitempty"`
}

// AllowedNamespaces says which namespaces may attach objects to a Project.
// +kubebuilder:validation:XValidation:rule="(has(self.from) && self.from == 'Selector') == has(self.selector)",message="allowedNamespaces.selector is required when allowedNamespaces.from is Selector, and not allowed otherwise"
type AllowedNamespaces struct {
	// from is Same (only the Project's namespace), All (every namespace) or Selector (the
	// namespaces selector matches). The Project's own namespace is always admitted. Defaults to
	// Same.
	// +kubebuilder:default=Same
	// +optional
	From FromNamespaces `json:"from,omitempty"`

	// selector matches the labels of admitted namespaces. Required when from is Selector and not
	// allowed otherwise.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// EventSink is an HTTP endpoint that receives the Project's audit events (docs/audit.md).
type EventSink struct {
	// name identifies the sink in metrics and the event outbox. A DNS label, at most 63
	// characters; unique within the Project.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +required
	Name string `json:"name"`

	// url receives a POST per event (CloudEvents structured mode); https, or http only to a
	// loopback host.
	// +required
	URL EndpointURL `json:"url"`

	// hmacSecretRef names the Secret key that signs each delivery the Standard Webhooks way
	// (webhook-id, webhook-timestamp, webhook-signature headers), so the receiver can tell the
	// events came from Latchkey: one or two Standard Webhooks secrets ("whsec_" + base64 of at
	// least 24 bytes, separated by white space; two while rotating, both sign), or a raw key of
	// at least 32 bytes. docs/audit.md shows how a receiver verifies.
	// +required
	HMACSecretRef SecretKeyReference `json:"hmacSecretRef"`

	// types limits the sink to these event types (docs/audit.md lists them): an exact type
	// ("token.exchanged") or a family ending in ".*" ("signin.*", "admin.*"). Empty, the
	// default, sends every event. A change applies to events recorded from then on. At most 64.
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +optional
	Types []EventType `json:"types,omitempty"`
}

// EventType names an audit event type ("signin.failed") or a family of them ("signin.*").
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=64
// +kubebuilder:validation:Pattern=`^[a-z][a-z_]*\.([a-z][a-z_]*|\*)$`
type EventType string

// ProjectStatus is what the controller observed.
type ProjectStatus struct {
	// conditions: Ready says whether the Project is serving, and if not, why.
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// issuer is the Project's OAuth issuer, {publicURL}/{namespace}/{name}; clients discover
	// every endpoint from {issuer}/.well-known/oauth-authorization-server.
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	Issuer string `json:"issuer,omitempty"`

	// observedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Project is a set of people and the apps and agents they sign in to: one OAuth issuer, how
// people sign in, token lifetimes, registration policy, and which namespaces may attach
// OAuthClients, Connectors and RedirectPolicies.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=latchkey
// +kubebuilder:printcolumn:name="Issuer",type=string,JSONPath=`.status.issuer`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Degraded",type=string,JSONPath=`.status.conditions[?(@.type=="Degraded")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Degraded Because",type=string,JSONPath=`.status.conditions[?(@.type=="Degraded")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Project struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired Project.
	// +required
	Spec ProjectSpec `json:"spec"`

	// status is what the controller observed.
	// +optional
	Status ProjectStatus `json:"status,omitempty"`
}

// ProjectList is a list of Projects.
// +kubebuilder:object:root=true
type ProjectList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Project `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Project{}, &ProjectList{})
}

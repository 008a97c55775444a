package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Connector condition types and reasons. The reasons double as Event reasons.
const (
	// ConnectorReadyCondition is True when people of the Project can connect this service.
	ConnectorReadyCondition = ReadyCondition
	// ConnectorReadyReason: the connector is in use.
	ConnectorReadyReason = ReadyReason
	// ConnectorSecretMissingReason: the Secret of spec.clientSecretRef does not exist (yet), or
	// does not carry the label latchkey.dev/use=connector; the message reads the same for both.
	ConnectorSecretMissingReason = SecretMissingReason
	// ConnectorSecretInvalidReason: the Secret exists but lacks spec.clientSecretRef.key, or the
	// value is empty.
	ConnectorSecretInvalidReason = SecretInvalidReason
	// ConnectorProjectNotFoundReason: spec.projectRef names no Project.
	ConnectorProjectNotFoundReason = ProjectNotFoundReason
	// ConnectorProjectNotReadyReason: the Project is not Ready.
	ConnectorProjectNotReadyReason = ProjectNotReadyReason
	// ConnectorNotAllowedReason: the Project does not admit this namespace.
	ConnectorNotAllowedReason = NotAllowedReason
	// ConnectorAudienceConflictReason: an older Connector of the same Project already uses this
	// audience; set spec.audience to tell them apart.
	ConnectorAudienceConflictReason = "AudienceConflict"
)

// ConnectorUnknownPresetReason: spec.preset names no preset of Latchkey's catalog
// (docs/providers/README.md).
const ConnectorUnknownPresetReason = "UnknownPreset"

// ConnectorPresetParameterMissingReason: the preset's endpoints need a value the Connector does
// not give (spec.tenant for the microsoft preset, spec.baseURL for github-enterprise-server).
const ConnectorPresetParameterMissingReason = "PresetParameterMissing"

// ConnectorPresetParameterInvalidReason: spec.baseURL is not a clean https base URL, or the
// preset (or the Connector without one) has no endpoint that starts with it.
const ConnectorPresetParameterInvalidReason = "PresetParameterInvalid"

// ConnectorInvalidProxyReason: spec.proxy cannot be used as written: its apiBaseURL is not an
// absolute https URL (or http to a loopback host), neither it nor the preset gives one, or a
// rule's pathPrefix could mean another path than the one written (docs/token-proxy.md).
const ConnectorInvalidProxyReason = "InvalidProxy"

// ConnectorInvalidUserInfoReason: spec.userInfo.body is not a JSON document.
const ConnectorInvalidUserInfoReason = "InvalidUserInfo"

// ConnectorInvalidAPIKeyReason: spec.apiKey cannot be used as written: it is set together with
// OAuth fields, its checkURL is not an absolute https URL (or http to a loopback host), or its
// format does not hold "{key}" exactly once. The message says which (docs/api-key-connectors.md).
const ConnectorInvalidAPIKeyReason = "InvalidAPIKey"

// APIKeyPlaceholder stands for the person's key in spec.apiKey.format.
const APIKeyPlaceholder = "{key}"

// ConnectorAPIKey declares a service that issues API keys or personal access tokens instead of
// OAuth: the person pastes a key on a Latchkey page, Latchkey checks it with one call, and
// keeps it sealed like an OAuth token (docs/api-key-connectors.md).
// +kubebuilder:validation:XValidation:rule="!has(self.format) || (self.format.contains('{key}') && self.format.indexOf('{key}') == self.format.lastIndexOf('{key}'))",message="apiKey.format must hold {key} exactly once"
// +kubebuilder:validation:XValidation:rule="!has(self.header) || !(self.header.lowerAscii() in ['content-type', 'content-length', 'cookie', 'host', 'connection', 'transfer-encoding', 'te', 'upgrade', 'proxy-authorization', 'traceparent', 'tracestate'])",message="apiKey.header must not be Content-Type, Content-Length, Cookie, Host, a hop-by-hop header, traceparent or tracestate"
type ConnectorAPIKey struct {
	// checkURL is the one call Latchkey makes with a pasted key to check it and to read which
	// account it belongs to, such as the service's "current user" endpoint. It answers 200 with
	// a JSON object for a good key, and 401 or 403 for a wrong one. An https URL, or http to a
	// loopback host; like every endpoint of a Connector it is dialled only at public addresses,
	// plus the ranges the Project's spec.upstreamNetwork grants this Connector.
	// +required
	CheckURL EndpointURL `json:"checkURL"`

	// method of the check call: GET (the default) or POST with an empty body.
	// +optional
	Method HTTPMethod `json:"method,omitempty"`

	// header is the HTTP header the key is sent in, on the check call and wherever it is used.
	// Defaults to Authorization. At most 64 letters, digits or '-'.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9-]{1,64}$`
	// +optional
	Header string `json:"header,omitempty"`

	// format is the header's value, with {key} where the key goes, exactly once: "Bearer {key}"
	// (the default for Authorization), "token {key}", or "{key}" (the default for any other
	// header). At most 128 printable characters.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[ -~]*$`
	// +optional
	Format string `json:"format,omitempty"`

	// idField is the dotted path of the account's stable id in the check call's JSON answer
	// ("id", "data.user.id"); reconnecting the same account keeps its permissions. Defaults to
	// "id". At most 128 characters.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.-]+$`
	// +optional
	IDField string `json:"idField,omitempty"`

	// nameField is the dotted path of the name people know the account by, shown on their
	// account page. Defaults to "name", then "login", "email", else the id. At most 128
	// characters.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.-]+$`
	// +optional
	NameField string `json:"nameField,omitempty"`

	// hint is shown above the key field: where at the service a person makes a key and which
	// permissions it needs ("Settings → API keys; read access is enough"). Plain text, at most
	// 500 characters.
	// +kubebuilder:validation:MaxLength=500
	// +optional
	Hint string `json:"hint,omitempty"`
}

// ConnectorPreset names a well-known service in Latchkey's catalog of presets
// (docs/providers/README.md). The controller checks the name against the catalog, not the
// schema, so new presets need no CRD change.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`
type ConnectorPreset string

const (
	// PresetGitHub is GitHub's OAuth apps: https://github.com/login/oauth/authorize,
	// https://github.com/login/oauth/access_token and https://api.github.com/user; accounts are
	// named by their login.
	PresetGitHub ConnectorPreset = "github"
)

// UpstreamAuthMethod is how Latchkey authenticates to a service's token endpoint (RFC 6749
// §2.3.1, the names of RFC 7591).
// +kubebuilder:validation:Enum=client_secret_basic;client_secret_post;none;private_key_jwt
type UpstreamAuthMethod string

const (
	// UpstreamAuthBasic sends the client id and secret in an HTTP Basic Authorization header.
	UpstreamAuthBasic UpstreamAuthMethod = "client_secret_basic"
	// UpstreamAuthPost sends them as client_id and client_secret form parameters.
	UpstreamAuthPost UpstreamAuthMethod = "client_secret_post"
	// UpstreamAuthNone sends only client_id: a public client, kept apart by PKCE alone.
	UpstreamAuthNone UpstreamAuthMethod = "none"
	// UpstreamAuthPrivateKeyJWT sends client_id and a client assertion (RFC 7523 §2.2) signed
	// with the private key in spec.clientSecretRef; no secret leaves the cluster.
	UpstreamAuthPrivateKeyJWT UpstreamAuthMethod = "private_key_jwt"
)

// ConnectorInvalidClientKeyReason: spec.tokenEndpointAuthMethod is private_key_jwt and the
// Secret's value is not a PEM private key Latchkey can sign with (RSA of at least 2048 bits, or
// ECDSA P-256), spec.clientAssertion.algorithm does not fit the key, or the certificate of
// spec.clientAssertion.certificateKey is missing, not PEM, or not the key's.
const ConnectorInvalidClientKeyReason = "InvalidClientKey"

// ConnectorInvalidTenantsReason: spec.allowedTenants is set on a Connector whose ID tokens are
// not checked per tenant (no OIDC issuer, or no tenantClaim from the spec or its preset).
const ConnectorInvalidTenantsReason = "InvalidTenants"

// ClientAssertionAlgorithm is the JWS algorithm of a private_key_jwt client assertion.
// +kubebuilder:validation:Enum=RS256;PS256;ES256
type ClientAssertionAlgorithm string

// ConnectorClientAssertion says how the client assertion of private_key_jwt is made. The
// private key itself is the value of spec.clientSecretRef.
type ConnectorClientAssertion struct {
	// algorithm signs the assertion: RS256 or PS256 for an RSA key, ES256 for an ECDSA P-256
	// key. Defaults to RS256 for RSA and ES256 for ECDSA. A value that does not fit the key
	// reports Ready=False with reason InvalidClientKey.
	// +optional
	Algorithm ClientAssertionAlgorithm `json:"algorithm,omitempty"`

	// keyID is sent as the assertion's kid header, for a service that finds the key by id
	// (a JWKS registered with it). Defaults to the key's JWK thumbprint (RFC 7638) when
	// certificateKey is unset, and to no kid when it is set. At most 128 printable characters.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[!-~]+$`
	// +optional
	KeyID string `json:"keyID,omitempty"`

	// certificateKey names a key of the same Secret as spec.clientSecretRef holding the PEM
	// certificate of the private key (tls.crt of a kubernetes.io/tls Secret). The assertion then
	// carries the certificate's SHA-256 and SHA-1 thumbprints as x5t#S256 and x5t, which is how
	// Microsoft Entra ID finds an app's certificate credential. The certificate must be the
	// key's. At most 253 characters.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +optional
	CertificateKey string `json:"certificateKey,omitempty"`
}

// ScopeSeparator joins the scopes of an authorization request.
// +kubebuilder:validation:Enum=space;comma
type ScopeSeparator string

const (
	// ScopeSeparatorSpace is RFC 6749's: "read write".
	ScopeSeparatorSpace ScopeSeparator = "space"
	// ScopeSeparatorComma is what some services want instead: "read,write" (Linear).
	ScopeSeparatorComma ScopeSeparator = "comma"
)

// RevocationStyle is how a service revokes tokens at endpoints.revocationURL.
// +kubebuilder:validation:Enum=RFC7009;GitHubGrant;Bearer
type RevocationStyle string

const (
	// RevocationRFC7009 posts each token held (refresh token first) as RFC 7009 says.
	RevocationRFC7009 RevocationStyle = "RFC7009"
	// RevocationGitHubGrant is GitHub's DELETE /applications/{client_id}/grant with the app's
	// Basic credentials and the access token in a JSON body; it also withdraws the approval.
	RevocationGitHubGrant RevocationStyle = "GitHubGrant"
	// RevocationBearer posts with the access token as the Bearer credential and no body, which
	// revokes that token and its refresh token (Dropbox's auth/token/revoke). An access token
	// that has expired is refreshed first, so the refresh token is revoked too.
	RevocationBearer RevocationStyle = "Bearer"
)

// HTTPMethod is GET or POST.
// +kubebuilder:validation:Enum=GET;POST
type HTTPMethod string

// HeaderValue is the value of one extra HTTP header: printable ASCII and spaces.
// +kubebuilder:validation:MaxLength=256
// +kubebuilder:validation:Pattern=`^[ -~]*$`
type HeaderValue string

// ConnectorUserInfo says how the account is read from endpoints.userInfoURL.
// +kubebuilder:validation:XValidation:rule="!(has(self.body) && has(self.graphQLQuery))",message="userInfo: set body or graphQLQuery, not both"
// +kubebuilder:validation:XValidation:rule="!(has(self.method) && self.method == 'GET' && (has(self.body) || has(self.graphQLQuery)))",message="userInfo: a GET request has no body; use method POST"
type ConnectorUserInfo struct {
	// method is GET (the default) or POST. A body or graphQLQuery implies POST.
	// +optional
	Method HTTPMethod `json:"method,omitempty"`

	// body is a JSON document sent as the request body (Content-Type: application/json). At
	// most 4096 characters.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Body string `json:"body,omitempty"`

	// graphQLQuery is a GraphQL query sent as {"query": ...} in a JSON POST body, for services
	// whose API is GraphQL (Linear: "{ viewer { id name email } }"); account fields are then
	// dotted paths into the answer ("data.viewer.id"). At most 4096 characters.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	GraphQLQuery string `json:"graphQLQuery,omitempty"`
}

// AuthParamValue is the value of one extra authorization request parameter.
// +kubebuilder:validation:MaxLength=256
type AuthParamValue string

// ConnectorSpec declares an upstream OAuth service people connect their accounts at, or, with
// apiKey, a service people connect by pasting an API key.
// +kubebuilder:validation:XValidation:rule="has(self.apiKey) || has(self.preset) || (has(self.endpoints) && has(self.endpoints.authorizationURL) && has(self.endpoints.tokenURL) && (has(self.endpoints.userInfoURL) || has(self.endpoints.oidcIssuer)))",message="endpoints: a Connector without a preset or apiKey needs endpoints.authorizationURL, endpoints.tokenURL, and endpoints.userInfoURL or endpoints.oidcIssuer"
// +kubebuilder:validation:XValidation:rule="has(self.apiKey) || (has(self.clientID) && has(self.clientSecretRef))",message="clientID and clientSecretRef are required unless apiKey is set"
// +kubebuilder:validation:XValidation:rule="!has(self.apiKey) || !(has(self.preset) || has(self.endpoints) || has(self.clientID) || has(self.clientSecretRef) || has(self.scopes) || has(self.authParams) || has(self.userInfo) || has(self.account))",message="apiKey: an API-key Connector has no preset, endpoints, clientID, clientSecretRef, scopes, authParams, userInfo or account"
// +kubebuilder:validation:XValidation:rule="!has(self.clientAssertion) || (has(self.tokenEndpointAuthMethod) && self.tokenEndpointAuthMethod == 'private_key_jwt')",message="clientAssertion is only for tokenEndpointAuthMethod private_key_jwt"
type ConnectorSpec struct {
	// projectRef is the Project whose people connect this service.
	// +required
	ProjectRef ProjectReference `json:"projectRef"`

	// displayName is the service's name on the account and connect-link pages ("GitHub").
	// Defaults to the preset's ("GitHub" for github), else the resource's name. At most 100
	// characters.
	// +kubebuilder:validation:MaxLength=100
	// +optional
	DisplayName string `json:"displayName,omitempty"`

	// preset fills the endpoints, token endpoint dialect, user info request and account fields
	// of a well-known service from Latchkey's catalog (docs/providers/README.md, a page per
	// provider): airtable, asana, atlassian, bitbucket, box, dropbox, figma, github,
	// github-enterprise-server, gitlab, google, hubspot, linear, microsoft, notion, salesforce,
	// slack, zendesk, zoom. A name not in the catalog reports Ready=False with reason
	// UnknownPreset; a later release's catalog may have more names than this list. Fields set in
	// the spec override the preset's, which is how tests and `make run` point the github preset
	// at a fake GitHub on a loopback address. Without a preset, endpoints must be given.
	// +optional
	Preset ConnectorPreset `json:"preset,omitempty"`

	// endpoints of a generic OAuth 2.0 or OpenID Connect service, or overrides of the preset's.
	// Without a preset, authorizationURL, tokenURL and one of userInfoURL or oidcIssuer are
	// required.
	// +optional
	Endpoints *ConnectorEndpoints `json:"endpoints,omitempty"`

	// clientID is the client id of the OAuth app registered at the service, with
	// status.callbackURL as its callback. Required unless apiKey is set. At most 256 characters.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +optional
	ClientID string `json:"clientID,omitempty"`

	// clientSecretRef names the Secret key holding that app's client secret, or, when
	// tokenEndpointAuthMethod is private_key_jwt, the PEM private key (PKCS #8, PKCS #1 or SEC 1)
	// that signs its client assertions. The Secret must carry the label
	// latchkey.dev/use=connector: its value goes to (or signs for) this Connector's token
	// endpoint, so only a Secret its owner opted in may be named. Until such a Secret exists the
	// Connector reports Ready=False with reason SecretMissing, which reads the same for a Secret
	// that exists without the label; no secret is invented. Required unless apiKey is set.
	// +optional
	ClientSecretRef SecretKeyReference `json:"clientSecretRef,omitzero"`

	// apiKey makes this a Connector for a service that issues API keys or personal access
	// tokens instead of OAuth: the person pastes a key on a Latchkey page (never into an agent),
	// Latchkey checks it with the one call declared here and seals it like an OAuth token, and
	// token exchange hands it out as one (docs/api-key-connectors.md). It excludes every OAuth
	// field: preset, endpoints, clientID, clientSecretRef, scopes, authParams, userInfo and
	// account. headers, displayName, audience and allowedClientNamespaces apply as to any
	// Connector.
	// +optional
	APIKey *ConnectorAPIKey `json:"apiKey,omitempty"`

	// scopes requested from the service (for GitHub, e.g. "repo", "read:user"). Empty sends no
	// scope parameter, which GitHub reads as public read-only access. At most 32.
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	// +optional
	Scopes []Scope `json:"scopes,omitempty"`

	// pkce sends a PKCE S256 code challenge with every authorization (RFC 7636). Defaults to
	// true; turn off only for a service that rejects the parameters.
	// +kubebuilder:default=true
	// +optional
	PKCE *bool `json:"pkce,omitempty"`

	// authParams are extra parameters added to the authorization request (for example
	// prompt=consent, or GitHub's allow_signup=false). They cannot set the parameters Latchkey
	// controls: response_type, client_id, redirect_uri, scope, state, code_challenge,
	// code_challenge_method. At most 16.
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[A-Za-z0-9_.-]{1,64}$'))",message="authParams keys must be 1 to 64 letters, digits, '_', '.' or '-'"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !(k in ['response_type', 'client_id', 'redirect_uri', 'scope', 'state', 'code_challenge', 'code_challenge_method']))",message="authParams must not set response_type, client_id, redirect_uri, scope, state, code_challenge or code_challenge_method"
	// +optional
	AuthParams map[string]AuthParamValue `json:"authParams,omitempty"`

	// account says which fields of the service's user info name the connected account.
	// +optional
	Account *ConnectorAccount `json:"account,omitempty"`

	// tenant fills "{tenant}" in the preset's endpoints: the directory (tenant) id or domain of
	// the microsoft preset, or "organizations" / "common" for apps of several tenants. A preset
	// whose endpoints need it reports PresetParameterMissing until it is set. At most 128
	// characters.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9.-]*$`
	// +optional
	Tenant string `json:"tenant,omitempty"`

	// baseURL fills "{baseURL}" in the preset's endpoints: the address of a server of your own
	// (https://github.example.com for github-enterprise-server, https://gitlab.example.com or
	// https://example.com/gitlab for gitlab, a My Domain or https://test.salesforce.com for
	// salesforce). https only, a host and at most a path of plain segments: no user info,
	// query, fragment, percent-encoding, or "." or ".." segment. A preset that has a default
	// (gitlab.com, login.salesforce.com) uses it when unset; one without reports
	// PresetParameterMissing until it is set; a preset whose endpoints do not start with
	// {baseURL} reports PresetParameterInvalid when it is set. At most 256 characters.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	BaseURL string `json:"baseURL,omitempty"`

	// tokenEndpointAuthMethod is how Latchkey authenticates to the token endpoint:
	// client_secret_post (client_id and client_secret in the form; the default without a
	// preset), client_secret_basic (an HTTP Basic header), none (client_id only; PKCE keeps
	// the code bound), or private_key_jwt (client_id and a client assertion signed with the
	// private key of clientSecretRef, RFC 7523; see clientAssertion). Revocation requests
	// authenticate the same way. Overrides the preset's.
	// +optional
	TokenEndpointAuthMethod UpstreamAuthMethod `json:"tokenEndpointAuthMethod,omitempty"`

	// clientAssertion says how private_key_jwt assertions are signed: algorithm, kid, and the
	// certificate whose thumbprints Microsoft needs. Only with tokenEndpointAuthMethod
	// private_key_jwt.
	// +optional
	ClientAssertion *ConnectorClientAssertion `json:"clientAssertion,omitempty"`

	// allowedTenants, for a multi-tenant identity provider whose ID tokens name their tenant
	// (the microsoft preset with tenant "organizations" or "common": the tid claim), are the
	// only tenants whose accounts may connect; an ID token of any other tenant is refused.
	// Unset admits every tenant the identity provider signs for. Needs an OIDC issuer and a
	// tenantClaim (the microsoft preset has both), else Ready=False with reason InvalidTenants.
	// At most 64, each at most 128 characters.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9][A-Za-z0-9.-]*$`
	// +listType=set
	// +optional
	AllowedTenants []string `json:"allowedTenants,omitempty"`

	// tenantClaim names the ID token claim that says which tenant signed the person in ("tid"
	// at Microsoft). With it, the issuer of the OIDC discovery document may be a template
	// holding "{tenantid}" (Microsoft's common and organizations documents are): an ID token is
	// accepted only when its iss is that issuer with {tenantid} replaced by the token's own
	// tenant claim, so a token that names one tenant in iss and another in the claim is
	// refused. Overrides the preset's. At most 64 characters.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]+$`
	// +optional
	TenantClaim string `json:"tenantClaim,omitempty"`

	// tokenRequestFormat is how the token request's parameters are sent: form
	// (application/x-www-form-urlencoded, RFC 6749; the default without a preset) or json (an
	// object of the same string parameters, as Notion wants). Overrides the preset's.
	// +kubebuilder:validation:Enum=form;json
	// +optional
	TokenRequestFormat string `json:"tokenRequestFormat,omitempty"`

	// accessTokenField is the dotted path of the access token in the token endpoint's JSON
	// answer, for services that do not put it at the top level (Slack's user token:
	// "authed_user.access_token"). refresh_token, expires_in, token_type and scope are then read
	// from the same object. Defaults to "access_token". At most 128 characters.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`
	// +optional
	AccessTokenField string `json:"accessTokenField,omitempty"`

	// scopeSeparator joins scopes in the authorization request: space (RFC 6749, the default
	// without a preset) or comma. Overrides the preset's.
	// +optional
	ScopeSeparator ScopeSeparator `json:"scopeSeparator,omitempty"`

	// scopeParameter is the authorization request parameter that carries the scopes. Defaults
	// to "scope"; Slack's user scopes go in "user_scope". authParams cannot set it. At most 64
	// characters.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.-]+$`
	// +kubebuilder:validation:XValidation:rule="!(self in ['response_type', 'client_id', 'redirect_uri', 'state', 'code_challenge', 'code_challenge_method'])",message="scopeParameter must not be a parameter Latchkey sets otherwise"
	// +optional
	ScopeParameter string `json:"scopeParameter,omitempty"`

	// userInfo says how endpoints.userInfoURL is asked: method, and a JSON body or GraphQL query.
	// Overrides the preset's.
	// +optional
	UserInfo *ConnectorUserInfo `json:"userInfo,omitempty"`

	// headers are extra HTTP headers sent on every call to the service (token, user info,
	// revocation), such as Notion's "Notion-Version: 2022-06-28". They add to the preset's and
	// win over them. They cannot set Authorization, Content-Type, Content-Length, Cookie, Host or
	// hop-by-hop headers, which Latchkey or HTTP own. At most 8.
	// +kubebuilder:validation:MaxProperties=8
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[A-Za-z0-9-]{1,64}$'))",message="header names must be 1 to 64 letters, digits or '-'"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !(k.lowerAscii() in ['authorization', 'content-type', 'content-length', 'cookie', 'host', 'connection', 'transfer-encoding', 'te', 'upgrade', 'proxy-authorization', 'traceparent', 'tracestate']))",message="headers must not set Authorization, Content-Type, Content-Length, Cookie, Host, Connection, Transfer-Encoding, TE, Upgrade, Proxy-Authorization, traceparent or tracestate"
	// +optional
	Headers map[string]HeaderValue `json:"headers,omitempty"`

	// revocationStyle is how endpoints.revocationURL is called on disconnect: RFC7009 (the
	// default without a preset: each token posted, the client authenticated as at the token
	// endpoint), GitHubGrant (DELETE with Basic credentials and the token in a JSON body), or
	// Bearer (the access token as the credential, no body). "{client_id}" in the URL is
	// replaced by the client id whatever the style. Overrides the preset's.
	// +optional
	RevocationStyle RevocationStyle `json:"revocationStyle,omitempty"`

	// audience is the identifier agents send as `audience` in token exchange (RFC 8693) to get a
	// token for this service. Defaults to the preset's name ("github") or, without a preset, the
	// Connector's name. Must be unique within the Project: a younger Connector with the same
	// audience reports AudienceConflict. At most 253 printable characters without spaces.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[!-~]+$`
	// +optional
	Audience string `json:"audience,omitempty"`

	// allowedClientNamespaces says which namespaces' OAuthClients may list this Connector in
	// their spec.connectors, and so exchange tokens for it: the owner of a Connector grants its
	// use, after Gateway API's allowedRoutes and ReferenceGrant. OAuthClients in the Connector's
	// own namespace are always allowed. Defaults to from: Same (no other namespace). A refused
	// OAuthClient reports ConnectorsResolved=False with reason ConnectorNotAllowed and cannot
	// exchange for this Connector. To name namespaces, use from: Selector with the label every
	// namespace carries, kubernetes.io/metadata.name.
	// +optional
	AllowedClientNamespaces *AllowedClientNamespaces `json:"allowedClientNamespaces,omitempty"`

	// sharing says whose account agents use through this Connector. Personal (the default):
	// each person connects their own account, and an agent gets the token of the person it acts
	// for. Organisation: people connect nothing; an administrator connects one account (a
	// service account) for the whole Project through the admin API (kubectl latchkey shared
	// connect), and the agents of the OAuthClients the Project names for this Connector in its
	// spec.sharedConnections get that account's token in token exchange, only for a person
	// whose access is live. Dynamically registered clients never do
	// (docs/shared-connections.md). Changing it leaves stored connections in place; they are
	// no longer used until it is changed back.
	// +optional
	Sharing ConnectorSharing `json:"sharing,omitempty"`

	// proxy lets agents call the service's API through Latchkey's token proxy,
	// {issuer}/proxy/{audience}/{path}, and through gateways that ask Latchkey's Envoy external
	// authorization service: Latchkey adds the person's token, so it never reaches the agent
	// (docs/token-proxy.md). Unset, the proxy refuses every call for this Connector.
	// +optional
	Proxy *ConnectorProxy `json:"proxy,omitempty"`
}

// ConnectorProxy says where the token proxy forwards and which calls it forwards.
type ConnectorProxy struct {
	// apiBaseURL is the service's API address the proxy forwards to, joined with the path
	// after {issuer}/proxy/{audience}. Defaults to the preset's (https://api.github.com for
	// github; {baseURL}/api/v3 for github-enterprise-server). https, or http to a loopback
	// host; dialled only at public addresses plus the ranges the Project's
	// spec.upstreamNetwork grants this Connector.
	// +optional
	APIBaseURL EndpointURL `json:"apiBaseURL,omitempty"`

	// allow lists the calls the proxy forwards: a call passes when a rule has its method and
	// its path starts with the rule's pathPrefix. Empty takes the rules the preset proposes
	// (docs/providers/README.md); a Connector without a preset and without rules forwards
	// nothing. At most 32.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	Allow []ProxyRule `json:"allow,omitempty"`
}

// ProxyMethod is an HTTP method the token proxy may forward.
// +kubebuilder:validation:Enum=GET;HEAD;POST;PUT;PATCH;DELETE
type ProxyMethod string

// ProxyRule admits calls with one of its methods to paths under its prefix.
type ProxyRule struct {
	// methods the rule admits. At least 1, at most 6.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=6
	// +listType=set
	// +required
	Methods []ProxyMethod `json:"methods"`

	// pathPrefix is matched against the request's path segment by segment: "/user" admits
	// /user and /user/repos, never /users. It starts with "/", and has no "." or ".." segment,
	// no "//", no percent-encoding and no query. At most 256 characters.
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^/[A-Za-z0-9._~!$&'()*+,;=:@/-]*$`
	// +kubebuilder:validation:XValidation:rule="!self.contains('//') && !self.contains('/./') && !self.contains('/../') && !self.endsWith('/.') && !self.endsWith('/..')",message="pathPrefix must not hold '//', '.' or '..' segments"
	// +required
	PathPrefix string `json:"pathPrefix"`
}

// ConnectorSharing is whose account a Connector's tokens come from.
// +kubebuilder:validation:Enum=Personal;Organisation
type ConnectorSharing string

const (
	// SharingPersonal: each person connects their own account.
	SharingPersonal ConnectorSharing = "Personal"
	// SharingOrganisation: one account an administrator connected serves the Project's
	// allowed agents (docs/shared-connections.md).
	SharingOrganisation ConnectorSharing = "Organisation"
)

// ConnectorSharedCondition reports how a Connector's spec.sharing and the Project's
// spec.sharedConnections fit together. It is absent on a Personal Connector the Project does
// not name; True with reason ConnectorSharedReason on an Organisation Connector some
// OAuthClient may use; False with ConnectorNoSharedClientsReason on one no OAuthClient may
// use, and with ConnectorSharingMismatchReason on a Personal Connector the Project names.
const ConnectorSharedCondition = "Shared"

const (
	// ConnectorSharedReason: the Project lets some OAuthClients use the shared account.
	ConnectorSharedReason = "Shared"
	// ConnectorNoSharedClientsReason: the Connector is Organisation, but the Project's
	// spec.sharedConnections lets no OAuthClient use its shared account, so no agent gets it.
	ConnectorNoSharedClientsReason = "NoSharedClients"
	// ConnectorSharingMismatchReason: the Project's spec.sharedConnections names this Connector,
	// but its spec.sharing is Personal: the entry is ignored and each person connects their own
	// account.
	ConnectorSharingMismatchReason = "SharingMismatch"
)

// AllowedClientNamespaces says which namespaces a grant reaches: a Connector's
// spec.allowedClientNamespaces (whose OAuthClients may use it), an OAuthClient's
// spec.resourceSharing (whose OAuthClients may also serve its resources), or the namespaces of
// a Project's spec.upstreamNetwork.grants (whose Connectors may dial the grant's ranges).
// +kubebuilder:validation:XValidation:rule="(has(self.from) && self.from == 'Selector') == has(self.selector)",message="selector is required when from is Selector, and not allowed otherwise"
type AllowedClientNamespaces struct {
	// from is Same (only the namespace of the object that holds the grant), All (every namespace
	// admitted to the Project) or Selector (the namespaces selector matches). The holder's own
	// namespace is always allowed. Defaults to Same.
	// +kubebuilder:default=Same
	// +optional
	From FromNamespaces `json:"from,omitempty"`

	// selector matches the labels of the namespaces the grant reaches, for example
	// matchExpressions on kubernetes.io/metadata.name to name them. Required when from is
	// Selector and not allowed otherwise.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// ConnectorEndpoints are a service's OAuth endpoints. Each is https, or http only to a loopback
// host.
type ConnectorEndpoints struct {
	// authorizationURL is where people approve access (the authorization endpoint).
	// +optional
	AuthorizationURL EndpointURL `json:"authorizationURL,omitempty"`

	// tokenURL is where Latchkey redeems codes and refreshes tokens (the token endpoint).
	// +optional
	TokenURL EndpointURL `json:"tokenURL,omitempty"`

	// userInfoURL returns the connected account as JSON, read with the access token. Needed
	// unless oidcIssuer is set.
	// +optional
	UserInfoURL EndpointURL `json:"userInfoURL,omitempty"`

	// revocationURL revokes upstream tokens on disconnect (RFC 7009). Unset means disconnecting
	// only forgets them. "{client_id}" in it is replaced by the client id (GitHub's
	// https://api.github.com/applications/{client_id}/grant).
	// +optional
	RevocationURL EndpointURL `json:"revocationURL,omitempty"`

	// refreshURL is where refresh requests go, for a service that refreshes at another
	// endpoint than tokenURL (Figma). Unset refreshes at tokenURL.
	// +optional
	RefreshURL EndpointURL `json:"refreshURL,omitempty"`

	// oidcIssuer makes the connector OpenID Connect: the account is read from the verified ID
	// token of this issuer instead of userInfoURL.
	// +optional
	OIDCIssuer EndpointURL `json:"oidcIssuer,omitempty"`
}

// ConnectorAccount names the fields of the service's user info (or ID token) that identify an
// account. A field is a dotted path into nested objects ("data.viewer.id", Dropbox's
// "name.display_name") or a top-level name; a top-level name that itself contains dots wins
// over the path.
type ConnectorAccount struct {
	// idField holds the account's stable id; reconnecting the same account keeps its
	// permissions. Defaults to "sub" when endpoints.oidcIssuer is set, else the preset's, else
	// "id" (GitHub's numeric user id). At most 128 characters.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.-]+$`
	// +optional
	IDField string `json:"idField,omitempty"`

	// nameField holds the name people know the account by, shown on their account page.
	// Defaults to the preset's (GitHub: "login"), else "email". At most 128 characters.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.-]+$`
	// +optional
	NameField string `json:"nameField,omitempty"`
}

// ConnectorStatus is what the controller observed.
type ConnectorStatus struct {
	// conditions: Ready says whether people can connect the service, and if not, why.
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// callbackURL is this Connector's own fixed upstream callback,
	// {issuer}/connectors/{namespace}/{name}/callback. Register it as the callback (redirect) URL
	// of the OAuth app at the service: no other Connector shares it, so a code the service issues
	// can only be redeemed at this Connector's token endpoint. Shown as soon as the Project is
	// found, even while the client secret is still missing.
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	CallbackURL string `json:"callbackURL,omitempty"`

	// audience is the effective token-exchange audience (spec.audience or its default).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Audience string `json:"audience,omitempty"`

	// observedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Connector is an upstream OAuth service (GitHub, or any OAuth 2.0 / OpenID Connect service)
// people of a Project connect their accounts at, so agents can exchange a person's token for
// that person's token at the service.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=latchkey
// +kubebuilder:printcolumn:name="Project",type=string,JSONPath=`.spec.projectRef.name`
// +kubebuilder:printcolumn:name="Preset",type=string,JSONPath=`.spec.preset`
// +kubebuilder:printcolumn:name="Audience",type=string,JSONPath=`.status.audience`
// +kubebuilder:printcolumn:name="Callback URL",type=string,JSONPath=`.status.callbackURL`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Connector struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired connector.
	// +required
	Spec ConnectorSpec `json:"spec"`

	// status is what the controller observed.
	// +optional
	Status ConnectorStatus `json:"status,omitempty"`
}

// ConnectorList is a list of Connectors.
// +kubebuilder:object:root=true
type ConnectorList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Connector `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Connector{}, &ConnectorList{})
}

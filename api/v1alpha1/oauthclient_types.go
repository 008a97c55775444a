package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// OAuthClient condition types and reasons. The reasons double as Event reasons.
const (
	// OAuthClientReadyCondition is True when the client is compiled into its Project's
	// configuration and its credentials are in status.secretName.
	OAuthClientReadyCondition = ReadyCondition
	// OAuthClientConnectorsResolvedCondition is True when every entry of spec.connectors names a
	// Ready Connector of the same Project. While it is False the client still works; token
	// exchange for the unresolved connectors is refused.
	OAuthClientConnectorsResolvedCondition = "ConnectorsResolved"
	// OAuthClientDegradedCondition is True when the client serves (Ready=True) but a listed
	// connector is not usable, with the ConnectorsResolved reason and message; False with
	// CompleteReason otherwise. A client that is not Ready has none.
	OAuthClientDegradedCondition = DegradedCondition
	// OAuthClientResourcesOwnedCondition is True when the client may serve every URL of its
	// spec.resources: it is the first Ready OAuthClient of the Project to list each (by creation
	// time, then namespace/name), or that first one shares it with this client's namespace
	// (its spec.resourceSharing). A URL it may not serve is left out of the compiled client: no
	// client_credentials token for it, and a person's token for it does not make this client
	// its audience at token exchange. The client still serves with the others.
	OAuthClientResourcesOwnedCondition = "ResourcesOwned"

	// OAuthClientClientIDConflictReason: the client's id (spec.clientID, or the one Latchkey
	// derived) is held by an older OAuthClient of the Project (creation time, then
	// namespace/name), or by another namespace, whose OAuthClient had it first. The client is
	// not served; the message names the holder.
	OAuthClientClientIDConflictReason = "ClientIDConflict"
	// OAuthClientSecretMissingReason: the Secret of spec.clientSecretRef does not exist, or is
	// not labelled latchkey.dev/use=oauthclient; the two read alike.
	OAuthClientSecretMissingReason = SecretMissingReason

	// OAuthClientReadyReason: the client is in use.
	OAuthClientReadyReason = ReadyReason
	// OAuthClientProjectNotFoundReason: spec.projectRef names no Project.
	OAuthClientProjectNotFoundReason = ProjectNotFoundReason
	// OAuthClientProjectNotReadyReason: the Project is not Ready, so none of its clients serve.
	OAuthClientProjectNotReadyReason = ProjectNotReadyReason
	// OAuthClientNotAllowedReason: the Project does not admit this namespace.
	OAuthClientNotAllowedReason = NotAllowedReason
	// OAuthClientSecretPendingReason: the credentials Secret has not been written yet.
	OAuthClientSecretPendingReason = "SecretPending"
	// OAuthClientSecretConflictReason: the Secret named by spec.secretName was not created by
	// Latchkey for this client (it lacks the managed-by label or this client as its controller),
	// so the controller leaves it untouched.
	OAuthClientSecretConflictReason = "SecretConflict"
	// OAuthClientSecretInvalidReason: the credentials Secret, or the key of spec.clientSecretRef,
	// holds a client secret too short to be safe (fewer than 32 characters), or the key is
	// missing or empty.
	OAuthClientSecretInvalidReason = SecretInvalidReason
	// OAuthClientInvalidRedirectURIReason: a redirect URI passes the CRD's checks but not the
	// server's stricter ones (userinfo, upper-case scheme, characters outside RFC 3986, …), which
	// dynamic registration applies too.
	OAuthClientInvalidRedirectURIReason = "InvalidRedirectURI"
	// OAuthClientInvalidJWKSReason: spec.jwks is not a JSON Web Key Set of public signing keys
	// (EC, RSA of 2048 bits or more, Ed25519), or holds private key material.
	OAuthClientInvalidJWKSReason = "InvalidJWKS"
	// OAuthClientSigningKeyRequiredReason: accessTokenFormat is jwt but the Project has neither
	// spec.signingKeySource: Operator nor spec.signingKeySecretRef.
	OAuthClientSigningKeyRequiredReason = "SigningKeyRequired"
	// OAuthClientWorkloadNotAllowedReason: spec.workloadIdentity.serviceAccount names a
	// ServiceAccount in a namespace the Project does not admit (spec.allowedNamespaces). The
	// client is not served: otherwise whoever may create an OAuthClient could make another
	// namespace's workloads its credentials.
	OAuthClientWorkloadNotAllowedReason = "WorkloadNotAllowed"
	// OAuthClientTrustBundleMissingReason: the ConfigMap of
	// spec.workloadIdentity.trustBundle.configMapRef does not exist, is not labelled
	// latchkey.dev/use=spiffe-bundle, or lacks the key; the three read alike. For
	// spec.workloadIdentity.trustBundle.endpointURL: no bundle was fetched yet, or the last
	// good one is more than a day old.
	OAuthClientTrustBundleMissingReason = "TrustBundleMissing"
	// OAuthClientTrustBundleStaleReason (Degraded): the last refresh of the trust bundle
	// endpoint failed (unreachable, refused by the address guard, malformed, oversized, no
	// JWT-SVID key); the client serves with the last good bundle, for at most a day after it was
	// fetched.
	OAuthClientTrustBundleStaleReason = "TrustBundleStale"
	// OAuthClientTrustBundleInvalidReason: the trust bundle does not parse as a SPIFFE bundle
	// with at least one JWT-SVID key.
	OAuthClientTrustBundleInvalidReason = "TrustBundleInvalid"
	// OAuthClientConnectorsResolvedReason: every listed connector resolved.
	OAuthClientConnectorsResolvedReason = "Resolved"
	// OAuthClientConnectorNotFoundReason: a listed connector does not exist, is not Ready, or
	// belongs to another Project.
	OAuthClientConnectorNotFoundReason = "ConnectorNotFound"
	// OAuthClientConnectorNotAllowedReason: a listed connector in another namespace does not
	// allow OAuthClients from this namespace (its spec.allowedClientNamespaces); the client
	// cannot exchange tokens for it. The message names the connector.
	OAuthClientConnectorNotAllowedReason = "ConnectorNotAllowed"
	// OAuthClientResourcesOwnedReason: the client may serve every listed resource.
	OAuthClientResourcesOwnedReason = "Owned"
	// OAuthClientResourceConflictReason: a listed resource belongs to an older OAuthClient of
	// the Project that does not share it with this client's namespace. The message names the
	// resource and its owner.
	OAuthClientResourceConflictReason = "ResourceConflict"

	// OAuthClientRefusedByPolicyCondition is True when a RedirectPolicy of the client's Project
	// turns onlyRecognisedApps on and at least one of the client's redirect URIs is not
	// recognised (status.redirects says which: classification Other). The server then refuses
	// the client at consent, at refresh and wherever its tokens are used, and the policy has
	// revoked its live tokens. Every registered redirect counts, not only the one in use.
	OAuthClientRefusedByPolicyCondition = "RefusedByPolicy"
	// OAuthClientUnrecognisedRedirectReason: RefusedByPolicy is True; the message lists the
	// unrecognised redirect URIs. Also the reason of the Warning Event.
	OAuthClientUnrecognisedRedirectReason = "UnrecognisedRedirect"
	// OAuthClientAllRecognisedReason: RefusedByPolicy is False; every redirect URI is recognised.
	OAuthClientAllRecognisedReason = "AllRecognised"
	// OAuthClientPolicyNotEnforcedReason: RefusedByPolicy is False; no RedirectPolicy of the
	// Project turns onlyRecognisedApps on, so unrecognised websites get a warning and a tick box
	// on the consent screen instead.
	OAuthClientPolicyNotEnforcedReason = "NotEnforced"
)

// Keys of the credentials Secret the controller writes for each OAuthClient.
const (
	// ClientIDSecretKey holds the client id (every client).
	ClientIDSecretKey = "client_id"
	// ClientSecretSecretKey holds the client secret (confidential clients only). An
	// administrator may replace it to rotate; the controller keeps whatever is there.
	ClientSecretSecretKey = "client_secret"
)

// GrantType is an OAuth grant type the client may use at the token endpoint.
// +kubebuilder:validation:Enum=authorization_code;refresh_token;client_credentials;"urn:ietf:params:oauth:grant-type:token-exchange";"urn:ietf:params:oauth:grant-type:jwt-bearer";"urn:openid:params:grant-type:ciba"
type GrantType string

const (
	GrantAuthorizationCode GrantType = "authorization_code"
	GrantRefreshToken      GrantType = "refresh_token"
	GrantClientCredentials GrantType = "client_credentials"
	// GrantTokenExchange (RFC 8693) lets an agent trade a person's token for that person's
	// token at a Connector; until the person has connected and allowed it, the refusal carries
	// a connect link (docs/connections-for-agents.md).
	GrantTokenExchange GrantType = "urn:ietf:params:oauth:grant-type:token-exchange"
	// GrantJWTBearer (RFC 7523) lets a confidential client redeem an identity assertion (ID-JAG)
	// of an issuer the Project trusts for it in spec.identityAssertions.trustedIssuers
	// (docs/enterprise-idjag.md).
	GrantJWTBearer GrantType = "urn:ietf:params:oauth:grant-type:jwt-bearer"
	// GrantCIBA (OpenID CIBA Core 1.0) lets a confidential client ask a person to approve a
	// request on their account page and redeem the approval for a token (docs/approvals.md).
	GrantCIBA GrantType = "urn:openid:params:grant-type:ciba"
)

// BackchannelTokenDeliveryMode is how a CIBA client learns the person answered.
// +kubebuilder:validation:Enum=poll;ping
type BackchannelTokenDeliveryMode string

const (
	// BackchannelPoll: the client polls the token endpoint.
	BackchannelPoll BackchannelTokenDeliveryMode = "poll"
	// BackchannelPing: Latchkey also calls the client's notification endpoint when the person
	// answers, and the client then fetches the token.
	BackchannelPing BackchannelTokenDeliveryMode = "ping"
)

// Backchannel is a CIBA client's registration (OpenID CIBA Core 1.0 §4).
// +kubebuilder:validation:XValidation:rule="self.tokenDeliveryMode != 'ping' || has(self.clientNotificationEndpoint)",message="clientNotificationEndpoint: tokenDeliveryMode ping needs a notification endpoint"
type Backchannel struct {
	// tokenDeliveryMode is poll (default) or ping. Push is not offered.
	// +kubebuilder:default=poll
	// +optional
	TokenDeliveryMode BackchannelTokenDeliveryMode `json:"tokenDeliveryMode,omitempty"`

	// clientNotificationEndpoint is where Latchkey POSTs {"auth_req_id": …} with the request's
	// client_notification_token as bearer token once the person answered, for tokenDeliveryMode
	// ping: an https URL on a public address (internal/netguard). At most 2048 characters.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://') && isURL(self) && size(url(self).getHostname()) > 0",message="clientNotificationEndpoint must be an https URL"
	// +optional
	ClientNotificationEndpoint string `json:"clientNotificationEndpoint,omitempty"`
}

// TokenEndpointAuthMethod is how the client authenticates at the token endpoint (RFC 7591).
// +kubebuilder:validation:Enum=client_secret_basic;client_secret_post;client_secret_jwt;private_key_jwt;workload_identity;none
type TokenEndpointAuthMethod string

const (
	AuthClientSecretBasic TokenEndpointAuthMethod = "client_secret_basic"
	AuthClientSecretPost  TokenEndpointAuthMethod = "client_secret_post"
	// AuthClientSecretJWT: a JWT signed with HS256 under the client secret (RFC 7523 §2.2,
	// OpenID Connect Core §9), so the secret itself never crosses the wire.
	AuthClientSecretJWT TokenEndpointAuthMethod = "client_secret_jwt"
	// AuthPrivateKeyJWT: a JWT signed with one of the client's private keys (RFC 7523 §2.2),
	// whose public halves spec.jwks or spec.jwksURI publishes. The client gets no secret.
	AuthPrivateKeyJWT TokenEndpointAuthMethod = "private_key_jwt"
	// AuthWorkloadIdentity: a JWT the workload already holds from its platform, as a client
	// assertion: a projected Kubernetes ServiceAccount token or a SPIFFE JWT-SVID
	// (spec.workloadIdentity, docs/workload-identity.md). The client gets no secret and no
	// credentials Secret.
	AuthWorkloadIdentity TokenEndpointAuthMethod = "workload_identity"
	// AuthNone makes the client public: it gets no secret and must use PKCE.
	AuthNone TokenEndpointAuthMethod = "none"
)

// AccessTokenFormat is the shape of access tokens issued to the client.
// +kubebuilder:validation:Enum=opaque;jwt
type AccessTokenFormat string

const (
	// AccessTokenOpaque tokens are random strings checked by introspection.
	AccessTokenOpaque AccessTokenFormat = "opaque"
	// AccessTokenJWT tokens are signed JWTs (RFC 9068) checkable offline with the issuer's keys.
	AccessTokenJWT AccessTokenFormat = "jwt"
)

// RedirectURI is one redirect URI, matched exactly (the same string, not a prefix or origin).
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=2048
// +kubebuilder:validation:XValidation:rule="!self.contains('#')",message="redirectURIs: a redirect URI must not contain a fragment (#)"
// +kubebuilder:validation:XValidation:rule="((self.startsWith('https://') || self.startsWith('http://')) && isURL(self) && size(url(self).getHostname()) > 0) || self.matches('^[a-zA-Z][a-zA-Z0-9+-]*([.][a-zA-Z0-9+-]+)+:/[^/]')",message="redirectURIs: a redirect URI must be absolute: https://…, http:// to a loopback host, or a private-use reverse-domain scheme such as com.example.app:/callback"
// +kubebuilder:validation:XValidation:rule="!self.startsWith('http://') || (isURL(self) && url(self).getHostname() in ['127.0.0.1', '::1', 'localhost'])",message="redirectURIs: http is allowed only to a loopback host (127.0.0.1, [::1], localhost); use https"
type RedirectURI string

// ResourceURI is a resource server URL (RFC 8707 resource indicator).
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=2048
// +kubebuilder:validation:XValidation:rule="!self.contains('#')",message="resources: a resource URL must not contain a fragment (#)"
// +kubebuilder:validation:XValidation:rule="(self.startsWith('https://') || (self.startsWith('http://') && isURL(self) && url(self).getHostname() in ['127.0.0.1', '::1', 'localhost'])) && isURL(self) && size(url(self).getHostname()) > 0",message="resources: a resource URL must be https://…, or http:// to a loopback host"
type ResourceURI string

// ConnectorName names a Connector: "name" in the OAuthClient's namespace, or "namespace/name".
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=317
// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
type ConnectorName string

// ClientID is a client id chosen by whoever declares the OAuthClient: "lkc_" followed by 1 to
// 124 letters, digits, '-', '.', '_' or '~' (RFC 3986 unreserved characters, so it needs no
// escaping in a URL, a form or HTTP Basic authentication). The prefix is the one Latchkey
// gives the ids it derives, so an id taken from status.clientID fits, and no declared id can
// ever have the shape of a dynamically registered client's id (32 hexadecimal digits) or a
// client ID metadata document's (an https URL).
// +kubebuilder:validation:MinLength=5
// +kubebuilder:validation:MaxLength=128
// +kubebuilder:validation:Pattern=`^lkc_[A-Za-z0-9._~-]+$`
type ClientID string

// ServiceAccountReference names a Kubernetes ServiceAccount.
type ServiceAccountReference struct {
	// namespace of the ServiceAccount. Defaults to the OAuthClient's namespace. Another namespace
	// must be one the Project admits (its spec.allowedNamespaces); otherwise the client reports
	// Ready=False with reason WorkloadNotAllowed and is not served. At most 63 characters.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// name of the ServiceAccount. At most 253 characters.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	Name string `json:"name"`
}

// ConfigMapKeyReference names a key of a ConfigMap in the namespace of the object that refers
// to it.
type ConfigMapKeyReference struct {
	// name of the ConfigMap, in the same namespace. It must opt in with the label
	// latchkey.dev/use=spiffe-bundle; until it exists with the label, the client reports
	// Ready=False with reason TrustBundleMissing. At most 253 characters.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	Name string `json:"name"`

	// key within the ConfigMap's data. At most 253 characters of letters, digits, '-', '_' and '.'.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +required
	Key string `json:"key"`
}

// SPIFFETrustBundle is where the keys of a SPIFFE trust domain's JWT-SVIDs come from: a SPIFFE
// bundle (a JSON Web Key Set whose JWT-SVID keys have "use": "jwt-svid"). Exactly one of
// configMapRef and endpointURL.
// +kubebuilder:validation:XValidation:rule="has(self.configMapRef) != has(self.endpointURL)",message="trustBundle needs exactly one of configMapRef and endpointURL"
type SPIFFETrustBundle struct {
	// configMapRef names the key of a ConfigMap in this namespace holding the bundle. Latchkey
	// follows the ConfigMap: the keys it holds now are the only ones accepted.
	// +optional
	ConfigMapRef *ConfigMapKeyReference `json:"configMapRef,omitempty"`

	// endpointURL is the trust domain's SPIFFE bundle endpoint (https_web profile: the bundle
	// served over TLS with a certificate of the Web PKI or the operator's --ca-bundle). The
	// controllers fetch it on a public address, or one the Project's
	// spec.upstreamNetwork.allowedCIDRs admits, never following a redirect, with a 5-second
	// timeout and a 64 KiB limit, and again after its spiffe_refresh_hint (kept between one
	// minute and one hour; five minutes without one). A failed refresh keeps the last good
	// bundle (Degraded, reason TrustBundleStale) for at most a day after it was fetched. At most
	// 2048 characters.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://') && isURL(self) && size(url(self).getHostname()) > 0",message="endpointURL must be an https URL"
	// +optional
	EndpointURL string `json:"endpointURL,omitempty"`
}

// WorkloadIdentity is the platform identity a client proves itself with instead of a secret:
// exactly one of serviceAccount and spiffeID (docs/workload-identity.md).
// +kubebuilder:validation:XValidation:rule="has(self.serviceAccount) != has(self.spiffeID)",message="workloadIdentity needs exactly one of serviceAccount and spiffeID"
// +kubebuilder:validation:XValidation:rule="has(self.spiffeID) == has(self.trustBundle)",message="spiffeID needs trustBundle, and trustBundle is used only with spiffeID"
type WorkloadIdentity struct {
	// serviceAccount is the Kubernetes ServiceAccount whose projected token (audience: the
	// Project's issuer) the client sends as its client assertion. The server asks the cluster
	// (TokenReview) whether the token is valid, so a token of a deleted ServiceAccount, or of a
	// deleted pod it was bound to, is refused at once.
	// +optional
	ServiceAccount *ServiceAccountReference `json:"serviceAccount,omitempty"`

	// spiffeID is the SPIFFE ID (spiffe://trust-domain/path) whose JWT-SVIDs (audience: the
	// Project's issuer) the client sends as its client assertion, verified with trustBundle's
	// keys for the ID's trust domain. At most 2048 characters.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('spiffe://')",message="spiffeID must start with spiffe://"
	// +optional
	SPIFFEID string `json:"spiffeID,omitempty"`

	// trustBundle is where the keys of spiffeID's trust domain come from.
	// +optional
	TrustBundle *SPIFFETrustBundle `json:"trustBundle,omitempty"`
}

// OAuthClientSpec declares one OAuth client of a Project.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.clientID) || (has(self.clientID) && self.clientID == oldSelf.clientID)",message="clientID cannot be changed or removed once set: agents hold it, and people's grants and tokens are stored under it; create a new OAuthClient for a new id"
// +kubebuilder:validation:XValidation:rule="!has(self.clientSecretRef) || !has(self.secretName)",message="clientSecretRef and secretName conflict: a client whose secret comes from clientSecretRef gets no credentials Secret from Latchkey"
// +kubebuilder:validation:XValidation:rule="has(self.workloadIdentity) == (has(self.tokenEndpointAuthMethod) && self.tokenEndpointAuthMethod == 'workload_identity')",message="workloadIdentity and tokenEndpointAuthMethod workload_identity go together"
// +kubebuilder:validation:XValidation:rule="!has(self.workloadIdentity) || (!has(self.secretName) && !has(self.clientSecretRef))",message="workloadIdentity conflicts with secretName and clientSecretRef: such a client has no secret and Latchkey writes no credentials Secret for it"
// +kubebuilder:validation:XValidation:rule="!has(self.clientSecretRef) || !has(self.tokenEndpointAuthMethod) || !(self.tokenEndpointAuthMethod in ['none', 'private_key_jwt', 'workload_identity'])",message="clientSecretRef needs a client with a secret: tokenEndpointAuthMethod client_secret_basic, client_secret_post or client_secret_jwt"
// +kubebuilder:validation:XValidation:rule="!has(self.tokenEndpointAuthMethod) || self.tokenEndpointAuthMethod != 'private_key_jwt' || has(self.jwks) != has(self.jwksURI)",message="tokenEndpointAuthMethod private_key_jwt needs exactly one of jwks and jwksURI"
// +kubebuilder:validation:XValidation:rule="(!has(self.jwks) && !has(self.jwksURI)) || (has(self.tokenEndpointAuthMethod) && self.tokenEndpointAuthMethod == 'private_key_jwt')",message="jwks and jwksURI are used only with tokenEndpointAuthMethod private_key_jwt"
// +kubebuilder:validation:XValidation:rule="!has(self.grantTypes) || !('client_credentials' in self.grantTypes) || !has(self.tokenEndpointAuthMethod) || self.tokenEndpointAuthMethod != 'none'",message="grantTypes: client_credentials needs a confidential client; set tokenEndpointAuthMethod to client_secret_basic or client_secret_post"
// +kubebuilder:validation:XValidation:rule="!has(self.grantTypes) || !('authorization_code' in self.grantTypes) || (has(self.redirectURIs) && size(self.redirectURIs) > 0)",message="redirectURIs: grant type authorization_code needs at least one redirect URI"
// +kubebuilder:validation:XValidation:rule="!has(self.grantTypes) || !('refresh_token' in self.grantTypes) || 'authorization_code' in self.grantTypes || 'urn:ietf:params:oauth:grant-type:token-exchange' in self.grantTypes || 'urn:openid:params:grant-type:ciba' in self.grantTypes",message="grantTypes: refresh_token needs authorization_code, token-exchange or ciba, which issue refresh tokens"
// +kubebuilder:validation:XValidation:rule="!has(self.grantTypes) || !('urn:openid:params:grant-type:ciba' in self.grantTypes) || !has(self.tokenEndpointAuthMethod) || self.tokenEndpointAuthMethod != 'none'",message="grantTypes: the ciba grant needs a confidential client (OpenID CIBA Core 1.0 §4)"
// +kubebuilder:validation:XValidation:rule="!has(self.connectors) || size(self.connectors) == 0 || !has(self.tokenEndpointAuthMethod) || self.tokenEndpointAuthMethod != 'none'",message="connectors: a public client (tokenEndpointAuthMethod none) cannot exchange tokens, because token exchange always authenticates the client (RFC 8693 section 5); set tokenEndpointAuthMethod to client_secret_basic or client_secret_post"
type OAuthClientSpec struct {
	// projectRef is the Project this client belongs to.
	// +required
	ProjectRef ProjectReference `json:"projectRef"`

	// clientID is the client id, instead of the one Latchkey derives from the resource's uid
	// (status.clientID). Declare it so that the same resources applied to another cluster give
	// the client the id its agents already hold, and the grants and tokens stored under it (when
	// the database moves too) stay the client's (docs/cluster-move.md). To keep the id a client
	// has now, set it to its status.clientID. "lkc_" followed by 1 to 124 of A-Z a-z 0-9 - . _ ~.
	// Unique within the Project: when another OAuthClient of the Project has the same id
	// (declared, or the one Latchkey derived for it), the older of the two (creation time, then
	// namespace/name) keeps it and the other reports Ready=False with reason ClientIDConflict and
	// is not served. An id stays with the namespace that first served it, also after its
	// OAuthClient is deleted, since what people gave that client is stored under it: an
	// OAuthClient of another namespace declaring it reports ClientIDConflict. Cannot be changed
	// or removed once set (docs/decisions/0067).
	// +optional
	ClientID ClientID `json:"clientID,omitempty"`

	// clientSecretRef names a key of a Secret in this namespace that holds the client secret, for
	// a client whose secret is kept outside the cluster (a secret manager, a sealed Secret in Git)
	// so that it survives a move to another cluster. The Secret must opt in with the label
	// latchkey.dev/use=oauthclient; until it exists with the label, the client reports
	// Ready=False with reason SecretMissing. The value must have at least 32 characters (reason
	// SecretInvalid otherwise). Latchkey stores only its hash (the plaintext too, in memory, for
	// client_secret_jwt), writes no credentials Secret for the client, and follows the Secret:
	// once its value changes the new secret is the only one accepted. Conflicts with secretName;
	// not for tokenEndpointAuthMethod none or private_key_jwt, which have no secret.
	// +optional
	ClientSecretRef *SecretKeyReference `json:"clientSecretRef,omitempty"`

	// displayName is the client's name on the consent and account pages. Defaults to the
	// resource's name. At most 100 characters.
	// +kubebuilder:validation:MaxLength=100
	// +optional
	DisplayName string `json:"displayName,omitempty"`

	// redirectURIs are where authorization codes may be sent, compared as exact strings. Each is
	// https, http only to a loopback host (127.0.0.1, [::1], localhost), or a private-use
	// reverse-domain scheme such as com.example.app:/callback (RFC 8252 §7.1); never with a
	// fragment. Required (at least one) for grant type authorization_code. At most 20.
	// +kubebuilder:validation:MaxItems=20
	// +listType=set
	// +optional
	RedirectURIs []RedirectURI `json:"redirectURIs,omitempty"`

	// grantTypes the client may use. Defaults to authorization_code and refresh_token.
	// client_credentials needs a confidential client; refresh_token needs authorization_code or
	// token-exchange.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=4
	// +kubebuilder:default={authorization_code,refresh_token}
	// +listType=set
	// +optional
	GrantTypes []GrantType `json:"grantTypes,omitempty"`

	// scopes the client may ask for. Empty means any scope the Project offers. At most 64.
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +optional
	Scopes []Scope `json:"scopes,omitempty"`

	// tokenEndpointAuthMethod is how the client authenticates at the token, introspection,
	// revocation and pushed authorization request endpoints: client_secret_basic (default),
	// client_secret_post, client_secret_jwt (an HS256 JWT under the client secret), private_key_jwt
	// (a JWT signed with a key of spec.jwks or spec.jwksURI; the client gets no secret), or none.
	// none makes the client public: it gets only a client id (no secret), must use PKCE, and
	// cannot use client_credentials. The JWT methods are RFC 7523 §2.2 client assertions
	// (docs/enterprise.md).
	// +kubebuilder:default=client_secret_basic
	// +optional
	TokenEndpointAuthMethod TokenEndpointAuthMethod `json:"tokenEndpointAuthMethod,omitempty"`

	// workloadIdentity is the platform identity a client with tokenEndpointAuthMethod
	// workload_identity proves itself with: a Kubernetes ServiceAccount's projected token, or a
	// SPIFFE JWT-SVID, sent as client_assertion (RFC 7523; docs/workload-identity.md). Such a
	// client has no secret: client secrets are refused, Latchkey writes no credentials Secret
	// for it, and its agent learns its id from spec.clientID or status.clientID. Required with
	// tokenEndpointAuthMethod workload_identity, not allowed otherwise; conflicts with
	// secretName and clientSecretRef.
	// +optional
	WorkloadIdentity *WorkloadIdentity `json:"workloadIdentity,omitempty"`

	// jwks is the client's public keys as a JSON Web Key Set document ({"keys":[…]}), for
	// tokenEndpointAuthMethod private_key_jwt. Keys are EC P-256, RSA (2048 bits or more) or
	// Ed25519, public only. Conflicts with jwksURI. At most 16384 characters.
	// +kubebuilder:validation:MaxLength=16384
	// +optional
	JWKS string `json:"jwks,omitempty"`

	// jwksURI is where the client publishes its JSON Web Key Set, for tokenEndpointAuthMethod
	// private_key_jwt: an https URL the server fetches on a public address (internal/netguard),
	// caches for five minutes, and fetches again, at most once a minute, when an assertion names
	// a key id it does not hold, so the client can rotate keys without an edit here. Conflicts
	// with jwks. At most 2048 characters.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://') && isURL(self) && size(url(self).getHostname()) > 0",message="jwksURI must be an https URL"
	// +optional
	JWKSURI string `json:"jwksURI,omitempty"`

	// requireDPoP makes every token request of this client carry a DPoP proof (RFC 9449), so its
	// access tokens (and, for a public client, its refresh tokens) are bound to the client's key
	// and useless to whoever copies them. A request without a proof is refused with
	// invalid_dpop_proof. The Project's spec.requireDPoP turns it on for every client. Defaults
	// to false: a proof is accepted, never required.
	// +optional
	RequireDPoP bool `json:"requireDPoP,omitempty"`

	// requirePushedAuthorizationRequests makes this client push every authorization request to
	// the pushed authorization request endpoint first (RFC 9126); /authorize then accepts only a
	// request_uri from it. The Project's spec.requirePushedAuthorizationRequests turns it on for
	// every client. Defaults to false.
	// +optional
	RequirePushedAuthorizationRequests bool `json:"requirePushedAuthorizationRequests,omitempty"`

	// accessTokenFormat is opaque (default; checked by introspection) or jwt (RFC 9068; needs
	// the Project's spec.signingKeySource: Operator or spec.signingKeySecretRef, else the client
	// reports SigningKeyRequired).
	// +kubebuilder:default=opaque
	// +optional
	AccessTokenFormat AccessTokenFormat `json:"accessTokenFormat,omitempty"`

	// connectors this client may exchange a person's token for (RFC 8693 token exchange, with the
	// Connector's audience), each "name" in this namespace or "namespace/name". They must attach
	// to the same Project, and a Connector in another namespace must allow this namespace in its
	// spec.allowedClientNamespaces. Empty means none. Not allowed for a public client
	// (tokenEndpointAuthMethod none): token exchange always authenticates the client. At most 32.
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	// +optional
	Connectors []ConnectorName `json:"connectors,omitempty"`

	// resources are the URLs this client serves as a resource server (RFC 8707), e.g. an MCP
	// server's endpoint "https://mcp.example.com/mcp". An access token whose audience holds one
	// of them was issued for this client, so the client may introspect it and exchange it for the
	// person's token at a listed connector (an MCP server exchanging its caller's token). They
	// are also the only resources this client may name in a client_credentials request (a token
	// the client gets for itself, which names no person); any other is refused with
	// invalid_target. A URL belongs to the first Ready OAuthClient of the Project that lists it
	// (by creation time, then namespace/name); another client may serve it only when that owner
	// shares it with the other client's namespace (spec.resourceSharing), and otherwise reports
	// ResourcesOwned=False and is compiled without it. Each is https, or http to a loopback host;
	// no fragment. At most 8.
	// +kubebuilder:validation:MaxItems=8
	// +listType=set
	// +optional
	Resources []ResourceURI `json:"resources,omitempty"`

	// mayAct is the client id (another OAuthClient's status.clientID) of the one agent that may
	// exchange the tokens this client gets for people (RFC 8693 token exchange): those tokens
	// carry it as their may_act claim (RFC 8693 §4.4), and any other client presenting one as a
	// subject token is refused with invalid_grant, even one the token's audience names. This
	// client exchanging its own tokens is unaffected. Unset lets every client the token is for
	// exchange it (docs/delegation.md). Only declared ids (lkc_…) are accepted: a client that
	// registered itself chose its own name.
	// +optional
	MayAct ClientID `json:"mayAct,omitempty"`

	// resourceSharing says which namespaces' OAuthClients may also list the resources this client
	// owns (spec.resources), for example the same MCP server's client in a second namespace.
	// OAuthClients in this client's own namespace always may. Defaults to from: Same (no other
	// namespace): a client elsewhere that lists one of them reports ResourcesOwned=False with
	// reason ResourceConflict and gets no token for it. To name namespaces, use from: Selector
	// with the label every namespace carries, kubernetes.io/metadata.name.
	// +optional
	ResourceSharing *AllowedClientNamespaces `json:"resourceSharing,omitempty"`

	// secretName is the Secret in this namespace the controller writes the credentials into:
	// client_id, and client_secret for confidential clients (256 random bits). The controller
	// creates it with an owner reference to this OAuthClient and never replaces an existing
	// client_secret, so rotation is the administrator's choice (edit or delete the key). An
	// existing Secret it did not create for this client is left untouched (reason
	// SecretConflict), even one nobody owns. Defaults to "<name>-credentials". Not used with
	// clientSecretRef, whose clients get no credentials Secret. At most 253 characters.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	SecretName string `json:"secretName,omitempty"`

	// backchannel registers how a client with grant type urn:openid:params:grant-type:ciba learns
	// that the person answered its approval request (docs/approvals.md). Unset means poll.
	// +optional
	Backchannel *Backchannel `json:"backchannel,omitempty"`
}

// RedirectClassification is how the server reads a redirect URI on the consent screen, under
// "Where access goes" (docs/recognised-apps.md).
// +kubebuilder:validation:Enum=Claude;ChatGPT;Named;Loopback;AppScheme;Other
type RedirectClassification string

const (
	RedirectClaude    RedirectClassification = "Claude"
	RedirectChatGPT   RedirectClassification = "ChatGPT"
	RedirectNamed     RedirectClassification = "Named"
	RedirectLoopback  RedirectClassification = "Loopback"
	RedirectAppScheme RedirectClassification = "AppScheme"
	// RedirectOther is any other website: a warning and a tick box on consent, refused when the
	// Project only allows recognised apps.
	RedirectOther RedirectClassification = "Other"
)

// RedirectStatus is one registered redirect URI as the Project's RedirectPolicies read it.
type RedirectStatus struct {
	// uri is the redirect URI as registered.
	// +kubebuilder:validation:MaxLength=2048
	// +required
	URI string `json:"uri"`

	// classification says where access goes through this URI; unset until classified.
	// +optional
	Classification RedirectClassification `json:"classification,omitempty"`

	// name is the recognised callback's name, for classification Named.
	// +kubebuilder:validation:MaxLength=100
	// +optional
	Name string `json:"name,omitempty"`
}

// OAuthClientStatus is what the controller observed.
type OAuthClientStatus struct {
	// conditions: Ready says whether the client is in use; ConnectorsResolved whether every
	// listed connector was found; ResourcesOwned whether it may serve every listed resource.
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// clientID is the client id the client is served under, also in the credentials Secret:
	// spec.clientID when set, otherwise derived from the resource's uid, so it never changes
	// while the resource exists and is never given to another resource by Latchkey. Set once
	// the id is the client's (no older OAuthClient of the Project has it, and no other
	// namespace held it first); empty while it is not, and the client is then not served.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	ClientID string `json:"clientID,omitempty"`

	// secretName is the Secret holding the credentials: the one Latchkey writes, or the Secret
	// of spec.clientSecretRef.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	SecretName string `json:"secretName,omitempty"`

	// redirects lists the registered redirect URIs with how the Project's RedirectPolicies
	// classify them (Claude, ChatGPT, Named, Loopback, AppScheme or Other): where access goes
	// through each, as the consent screen shows it.
	// +kubebuilder:validation:MaxItems=20
	// +listType=atomic
	// +optional
	Redirects []RedirectStatus `json:"redirects,omitempty"`

	// observedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// OAuthClient is an OAuth client of a Project declared by an app team or GitOps: its redirect
// URIs, grant types, scopes and authentication method. The controller writes its client id and
// secret into a Secret.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=latchkey
// +kubebuilder:printcolumn:name="Project",type=string,JSONPath=`.spec.projectRef.name`
// +kubebuilder:printcolumn:name="Client ID",type=string,JSONPath=`.status.clientID`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Degraded",type=string,JSONPath=`.status.conditions[?(@.type=="Degraded")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Refused",type=string,JSONPath=`.status.conditions[?(@.type=="RefusedByPolicy")].status`
// +kubebuilder:printcolumn:name="Refused Because",type=string,JSONPath=`.status.conditions[?(@.type=="RefusedByPolicy")].message`,priority=1
// +kubebuilder:printcolumn:name="Secret",type=string,JSONPath=`.status.secretName`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type OAuthClient struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired client.
	// +required
	Spec OAuthClientSpec `json:"spec"`

	// status is what the controller observed.
	// +optional
	Status OAuthClientStatus `json:"status,omitempty"`
}

// OAuthClientList is a list of OAuthClients.
// +kubebuilder:object:root=true
type OAuthClientList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []OAuthClient `json:"items"`
}

func init() {
	SchemeBuilder.Register(&OAuthClient{}, &OAuthClientList{})
}

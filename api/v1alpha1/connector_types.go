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

// ConnectorPreset is a well-known service whose endpoints and account fields Latchkey knows.
// +kubebuilder:validation:Enum=github
type ConnectorPreset string

const (
	// PresetGitHub is GitHub's OAuth apps: https://github.com/login/oauth/authorize,
	// https://github.com/login/oauth/access_token and https://api.github.com/user; accounts are
	// named by their login.
	PresetGitHub ConnectorPreset = "github"
)

// AuthParamValue is the value of one extra authorization request parameter.
// +kubebuilder:validation:MaxLength=256
type AuthParamValue string

// ConnectorSpec declares an upstream OAuth service people connect their accounts at.
// +kubebuilder:validation:XValidation:rule="has(self.preset) || (has(self.endpoints) && has(self.endpoints.authorizationURL) && has(self.endpoints.tokenURL) && (has(self.endpoints.userInfoURL) || has(self.endpoints.oidcIssuer)))",message="endpoints: a Connector without a preset needs endpoints.authorizationURL, endpoints.tokenURL, and endpoints.userInfoURL or endpoints.oidcIssuer"
type ConnectorSpec struct {
	// projectRef is the Project whose people connect this service.
	// +required
	ProjectRef ProjectReference `json:"projectRef"`

	// displayName is the service's name on the account and connect-link pages ("GitHub").
	// Defaults to "GitHub" for the github preset, else the resource's name. At most 100
	// characters.
	// +kubebuilder:validation:MaxLength=100
	// +optional
	DisplayName string `json:"displayName,omitempty"`

	// preset fills the endpoints and account fields of a well-known service: github. Fields set
	// in endpoints and account override the preset's, which is how tests and `make run` point the
	// github preset at a fake GitHub on a loopback address. Without a preset, endpoints must be
	// given.
	// +optional
	Preset ConnectorPreset `json:"preset,omitempty"`

	// endpoints of a generic OAuth 2.0 or OpenID Connect service, or overrides of the preset's.
	// Without a preset, authorizationURL, tokenURL and one of userInfoURL or oidcIssuer are
	// required.
	// +optional
	Endpoints *ConnectorEndpoints `json:"endpoints,omitempty"`

	// clientID is the client id of the OAuth app registered at the service, with
	// status.callbackURL as its callback. At most 256 characters.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +required
	ClientID string `json:"clientID"`

	// clientSecretRef names the Secret key holding that app's client secret. The Secret must
	// carry the label latchkey.dev/use=connector: its value goes to this Connector's token
	// endpoint, so only a Secret its owner opted in may be named. Until such a Secret exists the
	// Connector reports Ready=False with reason SecretMissing, which reads the same for a Secret
	// that exists without the label; no secret is invented.
	// +required
	ClientSecretRef SecretKeyReference `json:"clientSecretRef"`

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
}

// AllowedClientNamespaces says which namespaces' OAuthClients may use a Connector.
// +kubebuilder:validation:XValidation:rule="(has(self.from) && self.from == 'Selector') == has(self.selector)",message="allowedClientNamespaces.selector is required when allowedClientNamespaces.from is Selector, and not allowed otherwise"
type AllowedClientNamespaces struct {
	// from is Same (only the Connector's namespace), All (every namespace admitted to the
	// Project) or Selector (the namespaces selector matches). The Connector's own namespace is
	// always allowed. Defaults to Same.
	// +kubebuilder:default=Same
	// +optional
	From FromNamespaces `json:"from,omitempty"`

	// selector matches the labels of the namespaces whose OAuthClients may use the Connector,
	// for example matchExpressions on kubernetes.io/metadata.name to name them. Required when
	// from is Selector and not allowed otherwise.
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
	// only forgets them.
	// +optional
	RevocationURL EndpointURL `json:"revocationURL,omitempty"`

	// oidcIssuer makes the connector OpenID Connect: the account is read from the verified ID
	// token of this issuer instead of userInfoURL.
	// +optional
	OIDCIssuer EndpointURL `json:"oidcIssuer,omitempty"`
}

// ConnectorAccount names the fields of the service's user info (or ID token) that identify an
// account. Top-level JSON field names only.
type ConnectorAccount struct {
	// idField holds the account's stable id; reconnecting the same account keeps its
	// permissions. Defaults to "sub" when endpoints.oidcIssuer is set, else "id" (GitHub's
	// numeric user id). At most 64 characters.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.-]+$`
	// +optional
	IDField string `json:"idField,omitempty"`

	// nameField holds the name people know the account by, shown on their account page.
	// Defaults to "login" for the github preset, else "email". At most 64 characters.
	// +kubebuilder:validation:MaxLength=64
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

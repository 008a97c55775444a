package v1alpha1

// ReadyCondition is the condition type every Latchkey kind reports. True means the object is part
// of the configuration the server is using right now; False means it is not, and the reason and
// message say why (for example a referenced Secret does not exist yet).
const ReadyCondition = "Ready"

// DegradedCondition is the condition type of a kind that can serve in part. True means the object
// serves (Ready=True) but something it refers to is broken and a feature is off; the reason says
// what kind of problem (SecretMissing, SecretInvalid, …) and the message names each one, what is
// off and how to fix it. False (reason Complete) means nothing is off. An object that does not
// serve at all is Ready=False and has no Degraded condition. GitOps tools read Ready for health,
// so a serving object stays Ready=True while degraded; see docs/gitops.md and
// docs/decisions/0028-ready-while-serving-degraded-when-partly.md.
const DegradedCondition = "Degraded"

// CompleteReason is the reason of Degraded=False: everything the object refers to resolved.
const CompleteReason = "Complete"

// SecretUseLabel is the label by which a Secret opts in to being read by Latchkey; the
// operator neither caches nor reads a Secret without it. Its value says which objects may use
// the Secret (docs/security.md, "Which Secrets Latchkey reads"; docs/decisions/0051):
//
//	kubectl label secret github-oauth-app latchkey.dev/use=connector
const SecretUseLabel = "latchkey.dev/use"

const (
	// SecretUseConnector lets every Connector in the Secret's namespace send the Secret's values
	// to its own token endpoint. A Connector's author chooses that endpoint, so a Connector uses
	// only Secrets labelled with this value.
	SecretUseConnector = "connector"
	// SecretUseProject marks a Secret a Project refers to (password file, OIDC client secret,
	// signing keys, initial access tokens, event sink keys, logo). A Project is written by an
	// administrator, so it may use a Secret with any value of SecretUseLabel; this one says what
	// the Secret is for.
	SecretUseProject = "project"
	// SecretUseOAuthClient lets every OAuthClient in the Secret's namespace take a client secret
	// from it (spec.clientSecretRef). No other Secret may serve as one, so whoever may write
	// OAuthClients cannot make Latchkey accept, as a client secret, a value from a Secret its
	// owner did not give for that use.
	SecretUseOAuthClient = "oauthclient"
	// SecretUseLatchkey is set by Latchkey on the Secrets it creates (OAuthClient credentials,
	// its keys, the admin API's certificate). No Connector may use such a Secret.
	SecretUseLatchkey = "latchkey"
	// ConfigMapUseSPIFFEBundle, as the value of SecretUseLabel on a ConfigMap, lets every
	// OAuthClient in its namespace take a SPIFFE trust bundle from it
	// (spec.workloadIdentity.trustBundle.configMapRef). Latchkey keeps the text data of no other
	// ConfigMap.
	ConfigMapUseSPIFFEBundle = "spiffe-bundle"
)

// SecretKeyReference names one key of a Secret in the namespace of the object that refers to it.
type SecretKeyReference struct {
	// name of the Secret, in the same namespace as the object that refers to it. The Secret may be
	// created before or after the object; until it exists the object reports Ready=False with
	// reason SecretMissing. At most 253 characters.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	Name string `json:"name"`

	// key within the Secret's data. At most 253 characters of letters, digits, '-', '_' and '.'.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +required
	Key string `json:"key"`
}

// SecretReference names a whole Secret in the namespace of the object that refers to it.
type SecretReference struct {
	// name of the Secret, in the same namespace as the object that refers to it. Until it exists
	// the object reports Ready=False with reason SecretMissing. At most 253 characters.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	Name string `json:"name"`
}

// ProjectReference points an OAuthClient, Connector or RedirectPolicy at the Project it belongs
// to.
type ProjectReference struct {
	// name of the Project. At most 253 characters.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +required
	Name string `json:"name"`

	// namespace of the Project. Defaults to the namespace of the referring object. A Project in
	// another namespace accepts the reference only if its spec.allowedNamespaces admits the
	// referring object's namespace; otherwise the referring object reports Ready=False with
	// reason NotAllowed. At most 63 characters.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// Reasons shared by the kinds that attach to a Project (OAuthClient, Connector, RedirectPolicy).
// Each kind re-exports the ones it uses under its own name (ConnectorNotAllowedReason, …).
const (
	// ReadyReason: the object is valid and in use.
	ReadyReason = "Ready"
	// ProjectNotFoundReason: spec.projectRef names a Project that does not exist.
	ProjectNotFoundReason = "ProjectNotFound"
	// ProjectNotReadyReason: the Project exists but is not Ready itself.
	ProjectNotReadyReason = "ProjectNotReady"
	// NotAllowedReason: the Project's spec.allowedNamespaces does not admit the object's
	// namespace.
	NotAllowedReason = "NotAllowed"
	// SecretMissingReason: a referenced Secret does not exist (yet), or Latchkey may not use it:
	// it lacks the SecretUseLabel (or, for a Connector, its value SecretUseConnector). The two
	// read alike, so a condition never tells whoever wrote the object whether a Secret they may
	// not read exists.
	SecretMissingReason = "SecretMissing"
	// SecretInvalidReason: a referenced Secret exists but lacks the key, or its content cannot be
	// used; the message names the Secret and the problem.
	SecretInvalidReason = "SecretInvalid"
)

// EndpointURL is an absolute URL Latchkey calls or sends people to: https with a host, or plain
// http only to a loopback host (127.0.0.1, [::1], localhost) so tests and local development can
// use a server on the same machine. A fragment is never allowed.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=2048
// +kubebuilder:validation:XValidation:rule="!self.contains('#')",message="must not contain a fragment (#)"
// +kubebuilder:validation:XValidation:rule="isURL(self) && ((url(self).getScheme() == 'https' && size(url(self).getHostname()) > 0) || (url(self).getScheme() == 'http' && url(self).getHostname() in ['127.0.0.1', '::1', 'localhost']))",message="must be an absolute https URL, or http to a loopback host (127.0.0.1, [::1], localhost)"
type EndpointURL string

// Scope is one OAuth scope token (RFC 6749 §3.3): printable ASCII without spaces, '"' or '\'.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=128
// +kubebuilder:validation:Pattern=`^[!#-\[\]-~]+$`
type Scope string

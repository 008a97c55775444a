package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RedirectPolicy condition types and reasons. The reasons double as Event reasons.
const (
	// RedirectPolicyReadyCondition is True when the policy is part of its Project's rules.
	RedirectPolicyReadyCondition = ReadyCondition
	// RedirectPolicyReadyReason: the policy is in force.
	RedirectPolicyReadyReason = ReadyReason
	// RedirectPolicyProjectNotFoundReason: spec.projectRef names no Project.
	RedirectPolicyProjectNotFoundReason = ProjectNotFoundReason
	// RedirectPolicyProjectNotReadyReason: the Project is not Ready.
	RedirectPolicyProjectNotReadyReason = ProjectNotReadyReason
	// RedirectPolicyNotAllowedReason: the Project does not admit this namespace.
	RedirectPolicyNotAllowedReason = NotAllowedReason
	// RedirectPolicyIgnoredFieldsCondition is True when part of a policy in force is not: the
	// policy is outside its Project's namespace, where a policy may only narrow the Project's
	// rules (turn onlyRecognisedApps on, turn built-ins off), so its recognised entries and any
	// built-in it would turn on are ignored. The message names them. Absent while not Ready.
	RedirectPolicyIgnoredFieldsCondition = "IgnoredFields"
	// RedirectPolicyOutsideProjectNamespaceReason: IgnoredFields is True; the message says which
	// fields are ignored. Also the reason of the Warning Event recorded when it turns True.
	RedirectPolicyOutsideProjectNamespaceReason = "OutsideProjectNamespace"
	// RedirectPolicyNoneIgnoredReason: IgnoredFields is False; all of the policy is in force.
	RedirectPolicyNoneIgnoredReason = "NoneIgnored"
	// RedirectPolicyTokensRevokedReason is the reason of the Event recorded when enforcing
	// onlyRecognisedApps ended live tokens ("revoked 12 tokens held by 3 clients").
	RedirectPolicyTokensRevokedReason = "TokensRevoked"
)

// RecognisedURI is a callback the organisation vouches for: an exact redirect URI, or one whose
// path has a single "{placeholder}" segment matching any one non-empty segment.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=2048
// +kubebuilder:validation:XValidation:rule="!self.contains('#')",message="recognised[].uri must not contain a fragment (#)"
// +kubebuilder:validation:XValidation:rule="((self.startsWith('https://') || self.startsWith('http://')) && isURL(self) && size(url(self).getHostname()) > 0) || self.matches('^[a-zA-Z][a-zA-Z0-9+-]*([.][a-zA-Z0-9+-]+)+:/[^/]')",message="recognised[].uri must be absolute: https://…, http:// to a loopback host, or a private-use reverse-domain scheme such as com.example.app:/callback"
// +kubebuilder:validation:XValidation:rule="!self.startsWith('http://') || (isURL(self) && url(self).getHostname() in ['127.0.0.1', '::1', 'localhost'])",message="recognised[].uri may use http only to a loopback host (127.0.0.1, [::1], localhost)"
// +kubebuilder:validation:XValidation:rule="self.matches('^[^{}]*$') || self.matches('^[^{}?]*/[{][a-zA-Z0-9_]+[}](/[^{}]*)?$')",message="recognised[].uri may hold at most one {placeholder}, and only as a whole path segment"
type RecognisedURI string

// RedirectPolicySpec declares which callbacks a Project recognises and whether it refuses apps
// with any other.
type RedirectPolicySpec struct {
	// projectRef is the Project the policy applies to. Several policies may attach to one
	// Project. Policies in the Project's own namespace decide: their recognised entries are
	// combined, a built-in is recognised if any of them enables it, and onlyRecognisedApps is on
	// if any turns it on. A policy from another namespace the Project admits may only narrow:
	// its onlyRecognisedApps and the built-ins it turns off count, its recognised entries and
	// any built-in it would turn on are ignored (condition IgnoredFields).
	// +required
	ProjectRef ProjectReference `json:"projectRef"`

	// builtins switches the built-in recognised callbacks. Each defaults to true.
	// +optional
	Builtins *Builtins `json:"builtins,omitempty"`

	// recognised are the organisation's own callbacks, shown on the consent screen by name. At
	// most 64; names must be unique.
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	// +optional
	Recognised []RecognisedRedirect `json:"recognised,omitempty"`

	// onlyRecognisedApps refuses, at the consent step and at refresh, every client with any
	// registered redirect URI that is not recognised: every registered redirect must pass, not
	// only the one used, since a token does not remember which redirect its code went to.
	// Turning it on ends the live tokens of clients it now refuses; status.revokedTokens reports
	// how many. Defaults to false: other websites get a warning and a tick box on the consent
	// screen instead.
	// +optional
	OnlyRecognisedApps bool `json:"onlyRecognisedApps,omitempty"`
}

// Builtins are the callbacks Latchkey recognises without configuration.
type Builtins struct {
	// claude recognises Claude's own OAuth callbacks. Defaults to true.
	// +kubebuilder:default=true
	// +optional
	Claude *bool `json:"claude,omitempty"`

	// chatgpt recognises ChatGPT's own OAuth callbacks. Defaults to true.
	// +kubebuilder:default=true
	// +optional
	ChatGPT *bool `json:"chatgpt,omitempty"`

	// loopback recognises http://127.0.0.1, http://[::1] and http://localhost callbacks: an app
	// on the person's own computer, where a phisher elsewhere cannot receive the code. Defaults
	// to true.
	// +kubebuilder:default=true
	// +optional
	Loopback *bool `json:"loopback,omitempty"`

	// appSchemes recognises private-use URI schemes (com.example.app:/callback): an installed app
	// on the person's device. Defaults to true.
	// +kubebuilder:default=true
	// +optional
	AppSchemes *bool `json:"appSchemes,omitempty"`
}

// RecognisedRedirect is one callback the organisation vouches for.
type RecognisedRedirect struct {
	// name is what the consent screen calls this destination ("Acme internal portal"). At most
	// 100 characters; unique within the policy.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=100
	// +required
	Name string `json:"name"`

	// uri is the callback: exact, or with one "{placeholder}" path segment that matches any one
	// non-empty segment (https://portal.example.com/tenants/{tenant}/callback).
	// +required
	URI RecognisedURI `json:"uri"`
}

// RedirectPolicyStatus is what the controller observed.
type RedirectPolicyStatus struct {
	// conditions: Ready says whether the policy is in force; IgnoredFields, which parts of it
	// are not because the policy is outside the Project's namespace.
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// revokedTokens counts the live tokens this policy has ended since it was created: every
	// token held by a client it refuses, ended when onlyRecognisedApps is turned on (and any
	// found later). Turning the policy off or deleting it never brings them back.
	// +optional
	RevokedTokens int64 `json:"revokedTokens,omitempty"`

	// refusedClients names the clients (client ids: OAuthClients' status.clientID, dynamically
	// registered clients, client ID metadata document URLs holding tokens) the policy currently
	// refuses, sorted; at most 100 are listed. Empty while onlyRecognisedApps is off.
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=2048
	// +listType=atomic
	// +optional
	RefusedClients []string `json:"refusedClients,omitempty"`

	// observedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// RedirectPolicy says which OAuth callbacks a Project recognises (built-ins for Claude, ChatGPT,
// loopback and app schemes, plus the organisation's own), and whether the Project only allows
// recognised apps to connect.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=latchkey
// +kubebuilder:printcolumn:name="Project",type=string,JSONPath=`.spec.projectRef.name`
// +kubebuilder:printcolumn:name="Only Recognised",type=boolean,JSONPath=`.spec.onlyRecognisedApps`
// +kubebuilder:printcolumn:name="Revoked",type=integer,JSONPath=`.status.revokedTokens`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RedirectPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired policy.
	// +required
	Spec RedirectPolicySpec `json:"spec"`

	// status is what the controller observed.
	// +optional
	Status RedirectPolicyStatus `json:"status,omitempty"`
}

// RedirectPolicyList is a list of RedirectPolicies.
// +kubebuilder:object:root=true
type RedirectPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RedirectPolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&RedirectPolicy{}, &RedirectPolicyList{})
}

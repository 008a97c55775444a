package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AccessPolicy condition types and reasons. The reasons double as Event reasons.
const (
	// AccessPolicyReadyCondition is True when the policy is part of its Project's policies.
	AccessPolicyReadyCondition = ReadyCondition
	// AccessPolicyReadyReason: the policy is in force.
	AccessPolicyReadyReason = ReadyReason
	// AccessPolicyProjectNotFoundReason: spec.projectRef names no Project.
	AccessPolicyProjectNotFoundReason = ProjectNotFoundReason
	// AccessPolicyProjectNotReadyReason: the Project is not Ready.
	AccessPolicyProjectNotReadyReason = ProjectNotReadyReason
	// AccessPolicyNotAllowedReason: the Project does not admit this namespace; the policy
	// reaches nothing.
	AccessPolicyNotAllowedReason = NotAllowedReason
	// AccessPolicyInvalidReason: spec.policies is not valid Cedar (the message says where), or
	// repeats an @id. While it is, the Project it is attached to refuses every consent, token
	// and token exchange, naming this AccessPolicy: a policy that was meant to restrict is
	// never dropped silently (docs/policy.md).
	AccessPolicyInvalidReason = "PolicyInvalid"
	// AccessPolicyPermitsIgnoredReason: Ready is True, but the policy is outside its Project's
	// namespace, where it may only narrow: its permit policies, named in the message, are
	// ignored and its forbid policies are in force.
	AccessPolicyPermitsIgnoredReason = "PermitsIgnored"
)

// AccessPolicySpec holds Cedar policies that decide, at consent, at token issuance and at token
// exchange, whether an agent may act for a person (docs/policy.md).
type AccessPolicySpec struct {
	// projectRef is the Project the policies apply to. Several AccessPolicies may attach to one
	// Project; their policies are evaluated together. An AccessPolicy in another namespace the
	// Project admits (spec.allowedNamespaces) may only narrow: its forbid policies count, its
	// permit policies are ignored (reason PermitsIgnored).
	// +required
	ProjectRef ProjectReference `json:"projectRef"`

	// description says what the policies are for, for whoever reads them next. At most 1024
	// characters.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Description string `json:"description,omitempty"`

	// policies is Cedar policy text: one or more permit and forbid statements over the entity
	// model of docs/policy.md (principal Person, resource Connector or Audience, actions
	// "consent", "issue" and "exchange", context.agent, context.time, context.network,
	// context.authorization_details). Name each policy with an @id("…") annotation: a refusal
	// and its audit record name the policy that denied as "namespace/name/id" (unnamed policies
	// are policy0, policy1, … by position). Text that does not parse makes the Project refuse
	// everything until it is fixed (reason PolicyInvalid). At most 65536 characters.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=65536
	// +required
	Policies string `json:"policies"`
}

// AccessPolicyStatus is what the controller observed.
type AccessPolicyStatus struct {
	// conditions: Ready says whether the policy is in force, and if not why (PolicyInvalid with
	// the line and column Cedar stopped at).
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// policyIDs are the ids of the policies in force from this AccessPolicy, in order. Empty
	// while it is not Ready. At most 256 are listed.
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=128
	// +listType=atomic
	// +optional
	PolicyIDs []string `json:"policyIDs,omitempty"`

	// observedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// AccessPolicy holds Cedar policies that a Project evaluates, in process, before a person's
// consent, every token it issues for a person and every token exchange: who may let which
// agent reach which connected service, when and from where.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=latchkey
// +kubebuilder:printcolumn:name="Project",type=string,JSONPath=`.spec.projectRef.name`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AccessPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired policy.
	// +required
	Spec AccessPolicySpec `json:"spec"`

	// status is what the controller observed.
	// +optional
	Status AccessPolicyStatus `json:"status,omitempty"`
}

// AccessPolicyList is a list of AccessPolicies.
// +kubebuilder:object:root=true
type AccessPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AccessPolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&AccessPolicy{}, &AccessPolicyList{})
}

// Package v1alpha1 holds the Latchkey API: Project, OAuthClient, RedirectPolicy and Connector in
// the API group latchkey.dev.
//
// A Project is the root: people sign in to it and it has one issuer. OAuthClients, Connectors and
// RedirectPolicies attach to a Project through spec.projectRef, from the Project's own namespace
// or from any namespace the Project's spec.allowedNamespaces admits.
//
// +kubebuilder:object:generate=true
// +groupName=latchkey.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "latchkey.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

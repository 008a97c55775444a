// Package controllers reconciles Latchkey's resources and compiles them into the configuration
// the HTTP server reads.
//
// One reconciler per kind (Project, OAuthClient, Connector, RedirectPolicy) reports status,
// conditions and Events, and writes the only thing the controllers create: each OAuthClient's
// credentials Secret. They run on the leader. The Compiler runs on every replica and publishes a
// config.Snapshot built from the informer cache. Reconcilers and compiler share one resolver, so
// "Ready" in status and "in the snapshot" always agree. Nothing here writes spec.
//
// Without a cluster, Standalone runs the same status phases and compile function on objects
// read from files (docs/no-cluster.md). What the phases, the resolver and the compiler read
// goes through Reader, Latchkey's own: the manager's cache in a cluster (clusterReader), a
// memReader without one. The reconcilers, the Compiler runnable and the watch mappings are in
// files the latchkey_local build leaves out (reconcilers.go), so that build links no
// Kubernetes client (docs/decisions/0085).
//
// Regenerate deep copies, CRDs and RBAC with `go generate ./controllers/` from the repository
// root (the command below), and commit the result.
//
//go:generate go tool controller-gen object paths=../api/... crd paths=../api/... rbac:roleName=latchkey-manager paths=./... output:crd:artifacts:config=../config/crd/bases output:rbac:artifacts:config=../config/rbac
package controllers

// Everything the controllers and the compiler read, and the little they write. RBAC cannot
// grant Secrets by label: the cache lists and watches only Secrets labelled latchkey.dev/use
// (CacheOptions), get serves only the metadata read of a credentials Secret the cache does not
// hold, and the chart's ValidatingAdmissionPolicy refuses any Secret write without Latchkey's
// managed-by label (docs/decisions/0051).
//
// +kubebuilder:rbac:groups=latchkey.dev,resources=projects;oauthclients;connectors;redirectpolicies;accesspolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=latchkey.dev,resources=projects/status;oauthclients/status;connectors/status;redirectpolicies/status;accesspolicies/status,verbs=get;patch
// +kubebuilder:rbac:groups=latchkey.dev,resources=oauthclients/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
//
// The HTTP server asks the cluster whether a workload_identity client's ServiceAccount token is
// valid (internal/workload, docs/decisions/0078):
//
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create

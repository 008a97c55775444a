//go:build !latchkey_local

package controllers

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
)

// Setup registers the field indexes, the four reconcilers and the compiler with mgr. The
// reconcilers run on the leader only; the compiler runs on every replica, since every replica
// serves requests from its own snapshot.
func Setup(mgr ctrl.Manager, opts Options) error {
	_, err := SetupWithCompiler(mgr, opts)
	return err
}

// SetupWithCompiler is Setup, also returning the compiler so /-/readyz can wait for the first
// snapshot (Compiler.Checker, Compiler.WaitForFirst).
func SetupWithCompiler(mgr ctrl.Manager, opts Options) (*Compiler, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	ctx := context.Background()
	if err := addIndexes(ctx, clusterIndexer{mgr.GetFieldIndexer()}); err != nil {
		return nil, err
	}
	b := base{
		reader:    clusterReader{mgr.GetClient()},
		recorder:  mgr.GetEventRecorder("latchkey"),
		publicURL: opts.PublicURL,
		clock:     opts.Clock,
		projects:  &projectMemo{},
		signing:   opts.SigningKeys,
		bundles:   opts.SPIFFEBundles,
		audit:     opts.Store,
		recorded:  &sync.Map{},
	}
	deps := &dependents{c: clusterReader{mgr.GetClient()}}
	copts := controller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles}
	if err := (&ProjectReconciler{projectPhases: projectPhases{base: b}, kube: mgr.GetClient(), deps: deps}).SetupWithManager(mgr, copts); err != nil {
		return nil, fmt.Errorf("setting up the Project controller: %w", err)
	}
	quiet := b
	quiet.quietFirstReady = true
	ocr := &OAuthClientReconciler{clientPhases: clientPhases{base: quiet}, kube: mgr.GetClient(), deps: deps, live: mgr.GetAPIReader()}
	if opts.Store != nil {
		ocr.holders = opts.Store
	}
	if err := ocr.SetupWithManager(mgr, copts); err != nil {
		return nil, fmt.Errorf("setting up the OAuthClient controller: %w", err)
	}
	if err := (&ConnectorReconciler{connectorPhases: connectorPhases{base: b}, kube: mgr.GetClient(), deps: deps}).SetupWithManager(mgr, copts); err != nil {
		return nil, fmt.Errorf("setting up the Connector controller: %w", err)
	}
	if err := (&RedirectPolicyReconciler{
		policyPhases: policyPhases{base: b, store: opts.Store, documents: opts.ClientDocuments}, kube: mgr.GetClient(), deps: deps}).SetupWithManager(mgr, copts); err != nil {
		return nil, fmt.Errorf("setting up the RedirectPolicy controller: %w", err)
	}
	if err := (&AccessPolicyReconciler{base: b, kube: mgr.GetClient(), deps: deps}).SetupWithManager(mgr, copts); err != nil {
		return nil, fmt.Errorf("setting up the AccessPolicy controller: %w", err)
	}
	c := NewCompiler(mgr.GetCache(), opts)
	if err := mgr.Add(c); err != nil {
		return nil, fmt.Errorf("adding the compiler: %w", err)
	}
	return c, nil
}

// keptBundleData is what the cache keeps of a ConfigMap's text data: only that of a SPIFFE
// trust bundle's ConfigMap (v1alpha1.ConfigMapUseSPIFFEBundle), each key cut one byte past
// the largest bundle accepted.
func keptBundleData(cm *corev1.ConfigMap) map[string]string {
	if cm.Labels[v1alpha1.SecretUseLabel] != v1alpha1.ConfigMapUseSPIFFEBundle || len(cm.Data) == 0 {
		return nil
	}
	out := make(map[string]string, len(cm.Data))
	for k, v := range cm.Data {
		out[k] = v[:min(len(v), maxBundleBytes+1)]
	}
	return out
}

// CacheOptions returns cache options suited to these controllers. Only Secrets that opted in to
// Latchkey (the label v1alpha1.SecretUseLabel, which Latchkey also sets on the Secrets it
// creates) are listed, watched and held: the informer asks the API server for those alone, so
// the process never holds the cluster's other Secrets, and a read of any other Secret through
// the manager's client finds nothing rather than reaching past the cache
// (docs/decisions/0051). Managed fields and kubectl's last-applied-configuration annotation are
// dropped from every cached object (they are large, never read, and the annotation repeats the
// whole object: for a Secret applied with kubectl, its data). Callers may restrict
// cache.Options.DefaultNamespaces further.
func CacheOptions() cache.Options {
	stripFields := cache.TransformStripManagedFields()
	strip := func(o any) (any, error) {
		o, err := stripFields(o)
		if m, ok := o.(metav1.Object); ok && err == nil {
			if a := m.GetAnnotations(); a[lastAppliedAnnotation] != "" {
				a = maps.Clone(a)
				delete(a, lastAppliedAnnotation)
				m.SetAnnotations(a)
			}
		}
		return o, err
	}
	return cache.Options{
		DefaultTransform: strip,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}: {Transform: func(o any) (any, error) {
				o, err := strip(o)
				if cm, ok := o.(*corev1.ConfigMap); ok && err == nil {
					// Latchkey reads only a Project's logo from a ConfigMap, and only from
					// binaryData: the cache keeps no text data (CA bundles, dashboards and
					// scripts, the bulk of ConfigMaps in most clusters), and of binaryData
					// only one byte more than a logo may have, enough to refuse one too large.
					// A ConfigMap opted in as a SPIFFE trust bundle keeps its text data, as
					// much of each key as a bundle may have and one byte more.
					cm.Data = keptBundleData(cm)
					if len(cm.BinaryData) > 0 {
						bd := make(map[string][]byte, len(cm.BinaryData))
						for k, v := range cm.BinaryData {
							bd[k] = v[:min(len(v), config.LogoMaxBytes+1)]
						}
						cm.BinaryData = bd
					}
				}
				return o, err
			}},
			&corev1.Secret{}: {Label: SecretSelector(), Transform: func(o any) (any, error) {
				o, err := strip(o)
				if s, ok := o.(*corev1.Secret); ok && err == nil && !readableSecretType(s.Type) {
					// Helm releases, service-account tokens and registry credentials are the
					// largest Secrets in most clusters and never hold what a Latchkey resource
					// refers to; keeping only their metadata bounds the operator's memory. A
					// reference to one reports SecretInvalid (its key is absent).
					s.Data, s.StringData = nil, nil
				}
				return o, err
			}},
		},
	}
}

// SecretSelector selects the Secrets Latchkey may read: those carrying v1alpha1.SecretUseLabel,
// whatever its value (the resolver checks the value where it matters).
func SecretSelector() labels.Selector {
	req, err := labels.NewRequirement(v1alpha1.SecretUseLabel, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant key: cannot fail
	}
	return labels.NewSelector().Add(*req)
}

// lastAppliedAnnotation is where client-side `kubectl apply` keeps a copy of what it applied.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// readableSecretType reports whether Secrets of type t may hold what Latchkey reads: client
// secrets, password files, keys (Opaque, or an unset type, in practice).
func readableSecretType(t corev1.SecretType) bool {
	switch t {
	case "helm.sh/release.v1", corev1.SecretTypeServiceAccountToken, corev1.SecretTypeDockercfg,
		corev1.SecretTypeDockerConfigJson, corev1.SecretTypeBootstrapToken:
		return false
	}
	return true
}

// ---------------------------------------------------------------------------------------------
// Watch mappings: which objects to reconcile again when something they depend on changes.

// dependents maps a changed object to the objects whose readiness may follow from it. Lookups go
// through the field indexes, so a change costs what it affects, not the size of the cluster.
type dependents struct {
	c Reader
}

func requests[T any, PT interface {
	*T
	Object
}](items []T) []reconcile.Request {
	out := make([]reconcile.Request, len(items))
	for i := range items {
		o := PT(&items[i])
		out[i] = reconcile.Request{NamespacedName: objectKey(o)}
	}
	return out
}

// list runs one indexed List and logs, rather than fails, on error: a map function cannot
// return one, and the periodic resync of the cache recovers.
func (d *dependents) list(ctx context.Context, l ObjectList, opts ...ListOption) bool {
	if err := d.c.List(ctx, l, append(opts, noCopy)...); err != nil {
		log.FromContext(ctx).Error(err, "listing dependents")
		return false
	}
	return true
}

// projectKeysForSecret returns the Projects a Secret matters to: those that read it, and those
// whose Connectors read it.
func (d *dependents) projectKeysForSecret(ctx context.Context, sec Object) map[string]bool {
	keys := map[string]bool{}
	var projects v1alpha1.ProjectList
	if d.list(ctx, &projects, readersOf(sec)...) {
		for i := range projects.Items {
			keys[objectKey(&projects.Items[i]).String()] = true
		}
	}
	var conns v1alpha1.ConnectorList
	if d.list(ctx, &conns, readersOf(sec)...) {
		for i := range conns.Items {
			c := &conns.Items[i]
			keys[projectKeyOf(c.Spec.ProjectRef, c.Namespace).String()] = true
		}
	}
	return keys
}

func (d *dependents) projectsForSecret(ctx context.Context, sec client.Object) []reconcile.Request {
	return listed(ctx, d, projectItems, readersOf(sec)...)
}

// projectsForConfigMap: the Projects whose logo the ConfigMap holds. Attached objects do not
// depend on a Project's look, so nothing else is reconciled.
func (d *dependents) projectsForConfigMap(ctx context.Context, cm client.Object) []reconcile.Request {
	return listed(ctx, d, projectItems, InNamespace(cm.GetNamespace()), MatchingFields{configMapIndex: cm.GetName()})
}

// clientsForConfigMap: the OAuthClients whose SPIFFE trust bundle the ConfigMap holds.
func (d *dependents) clientsForConfigMap(ctx context.Context, cm client.Object) []reconcile.Request {
	return listed(ctx, d, clientItems, InNamespace(cm.GetNamespace()), MatchingFields{configMapIndex: cm.GetName()})
}

// listed lists the objects of one kind that opts select, and returns a request for each.
func listed[T any, PT interface {
	*T
	Object
}, L interface {
	ObjectList
	*LT
}, LT any](ctx context.Context, d *dependents, items func(L) []T, opts ...ListOption) []reconcile.Request {
	l := L(new(LT))
	if !d.list(ctx, l, opts...) {
		return nil
	}
	return requests[T, PT](items(l))
}

// attached lists the objects of one kind attached to the given Projects.
func attached[T any, PT interface {
	*T
	Object
}, L interface {
	ObjectList
	*LT
}, LT any](ctx context.Context, d *dependents, projectKeys map[string]bool, items func(L) []T) []reconcile.Request {
	var out []reconcile.Request
	for key := range projectKeys {
		out = append(out, listed[T, PT](ctx, d, items, MatchingFields{projectIndex: key})...)
	}
	return out
}

// readersOf selects the objects that refer to the Secret sec.
func readersOf(sec Object) []ListOption {
	return []ListOption{InNamespace(sec.GetNamespace()), MatchingFields{secretIndex: sec.GetName()}}
}

func projectItems(l *v1alpha1.ProjectList) []v1alpha1.Project              { return l.Items }
func connectorItems(l *v1alpha1.ConnectorList) []v1alpha1.Connector        { return l.Items }
func clientItems(l *v1alpha1.OAuthClientList) []v1alpha1.OAuthClient       { return l.Items }
func policyItems(l *v1alpha1.RedirectPolicyList) []v1alpha1.RedirectPolicy { return l.Items }
func projectKeySet(o Object) map[string]bool {
	return map[string]bool{objectKey(o).String(): true}
}

// connectorsForSecret: every Connector of a Project the Secret matters to (the Connector that
// reads it, and its siblings, whose audience contest may change), plus Connectors that read it
// but point at a missing Project.
func (d *dependents) connectorsForSecret(ctx context.Context, sec client.Object) []reconcile.Request {
	out := attached[v1alpha1.Connector](ctx, d, d.projectKeysForSecret(ctx, sec), connectorItems)
	return append(out, listed(ctx, d, connectorItems, readersOf(sec)...)...)
}

func (d *dependents) connectorsForProject(ctx context.Context, p client.Object) []reconcile.Request {
	return attached[v1alpha1.Connector](ctx, d, projectKeySet(p), connectorItems)
}

func (d *dependents) connectorsForNamespace(ctx context.Context, ns client.Object) []reconcile.Request {
	return listed(ctx, d, connectorItems, InNamespace(ns.GetName()))
}

// connectorSiblings: the other Connectors of the same Project, whose audience contest may
// change when this one appears, changes or goes.
func (d *dependents) connectorSiblings(ctx context.Context, o client.Object) []reconcile.Request {
	c := o.(*v1alpha1.Connector)
	key := projectKeyOf(c.Spec.ProjectRef, c.Namespace).String()
	return attached[v1alpha1.Connector](ctx, d, map[string]bool{key: true}, connectorItems)
}

// clientsForSecret: the OAuthClients writing that Secret, those of Projects it matters to, and
// those listing a Connector that reads it.
func (d *dependents) clientsForSecret(ctx context.Context, sec client.Object) []reconcile.Request {
	out := attached[v1alpha1.OAuthClient](ctx, d, d.projectKeysForSecret(ctx, sec), clientItems)
	out = append(out, listed(ctx, d, clientItems, readersOf(sec)...)...)
	if owner, ok := strings.CutSuffix(sec.GetName(), defaultSecretSuffix); ok && owner != "" {
		// The client whose default credentials Secret this is, if it has no spec.secretName.
		oc := &v1alpha1.OAuthClient{}
		key := types.NamespacedName{Namespace: sec.GetNamespace(), Name: owner}
		if err := d.c.Get(ctx, key, oc, noCopy); err == nil && oc.Spec.SecretName == "" {
			out = append(out, reconcile.Request{NamespacedName: key})
		}
	}
	var conns v1alpha1.ConnectorList
	if d.list(ctx, &conns, readersOf(sec)...) {
		for i := range conns.Items {
			out = append(out, d.clientsForConnector(ctx, &conns.Items[i])...)
		}
	}
	return out
}

func (d *dependents) clientsForProject(ctx context.Context, p client.Object) []reconcile.Request {
	return attached[v1alpha1.OAuthClient](ctx, d, projectKeySet(p), clientItems)
}

func (d *dependents) clientsForConnector(ctx context.Context, c client.Object) []reconcile.Request {
	return listed(ctx, d, clientItems, MatchingFields{connectorIndex: objectKey(c).String()})
}

// clientsForNamespace: OAuthClients in the namespace, those whose ServiceAccount is there, and
// those listing a Connector there.
func (d *dependents) clientsForNamespace(ctx context.Context, ns client.Object) []reconcile.Request {
	out := listed(ctx, d, clientItems, InNamespace(ns.GetName()))
	out = append(out, listed(ctx, d, clientItems, MatchingFields{workloadNamespaceIndex: ns.GetName()})...)
	var conns v1alpha1.ConnectorList
	if d.list(ctx, &conns, InNamespace(ns.GetName())) {
		for i := range conns.Items {
			out = append(out, d.clientsForConnector(ctx, &conns.Items[i])...)
		}
	}
	return out
}

func (d *dependents) policiesForSecret(ctx context.Context, sec client.Object) []reconcile.Request {
	return attached[v1alpha1.RedirectPolicy](ctx, d, d.projectKeysForSecret(ctx, sec), policyItems)
}

func (d *dependents) policiesForProject(ctx context.Context, p client.Object) []reconcile.Request {
	return attached[v1alpha1.RedirectPolicy](ctx, d, projectKeySet(p), policyItems)
}

func (d *dependents) policiesForNamespace(ctx context.Context, ns client.Object) []reconcile.Request {
	return listed(ctx, d, policyItems, InNamespace(ns.GetName()))
}
func (d *dependents) accessPoliciesForProject(ctx context.Context, p client.Object) []reconcile.Request {
	return attached[v1alpha1.AccessPolicy](ctx, d, projectKeySet(p), accessPolicyItems)
}

func (d *dependents) accessPoliciesForNamespace(ctx context.Context, ns client.Object) []reconcile.Request {
	return listed(ctx, d, accessPolicyItems, InNamespace(ns.GetName()))
}

// clientsSharingClientID: the other OAuthClients with o's client id, which may take the id when
// o goes, or lose it when o appears. The mapping runs for the old and the new object of an
// update.
func (d *dependents) clientsSharingClientID(ctx context.Context, o client.Object) []reconcile.Request {
	oc, ok := o.(*v1alpha1.OAuthClient)
	if !ok {
		return nil
	}
	var out []reconcile.Request
	for _, req := range listed(ctx, d, clientItems, MatchingFields{clientIDIndex: clientIDIndexValue(oc)}) {
		if req.NamespacedName != objectKey(oc) {
			out = append(out, req)
		}
	}
	return out
}

// policySiblings: every RedirectPolicy of the same Project, since the rules they enforce are
// the union of all of them.
func (d *dependents) policySiblings(ctx context.Context, o client.Object) []reconcile.Request {
	p := o.(*v1alpha1.RedirectPolicy)
	key := projectKeyOf(p.Spec.ProjectRef, p.Namespace).String()
	return attached[v1alpha1.RedirectPolicy](ctx, d, map[string]bool{key: true}, policyItems)
}

// policiesForClient: the RedirectPolicies of an OAuthClient's Project, which must look at its
// redirects again.
func (d *dependents) policiesForClient(ctx context.Context, o client.Object) []reconcile.Request {
	oc := o.(*v1alpha1.OAuthClient)
	key := projectKeyOf(oc.Spec.ProjectRef, oc.Namespace).String()
	return attached[v1alpha1.RedirectPolicy](ctx, d, map[string]bool{key: true}, policyItems)
}

// clientsForPolicy: the OAuthClients of a RedirectPolicy's Project, whose classification
// follows the policy.
func (d *dependents) clientsForPolicy(ctx context.Context, o client.Object) []reconcile.Request {
	p := o.(*v1alpha1.RedirectPolicy)
	key := projectKeyOf(p.Spec.ProjectRef, p.Namespace).String()
	return attached[v1alpha1.OAuthClient](ctx, d, map[string]bool{key: true}, clientItems)
}

// clientsSharingResources: the other OAuthClients listing a URL o lists, whose ownership may
// change when o appears, changes, becomes Ready or not, or goes. The mapping runs for the old
// and the new object of an update, so a URL o stops listing counts too.
func (d *dependents) clientsSharingResources(ctx context.Context, o client.Object) []reconcile.Request {
	oc, ok := o.(*v1alpha1.OAuthClient)
	if !ok {
		return nil
	}
	var out []reconcile.Request
	for _, key := range resourceIndexValues(oc) {
		for _, req := range listed(ctx, d, clientItems, MatchingFields{resourceIndex: key}) {
			if req.NamespacedName != objectKey(oc) {
				out = append(out, req)
			}
		}
	}
	return out
}

func accessPolicyItems(l *v1alpha1.AccessPolicyList) []v1alpha1.AccessPolicy { return l.Items }

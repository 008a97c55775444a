package controllers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/clientdoc"
	"latchkey.dev/latchkey/internal/config"
	lkkeys "latchkey.dev/latchkey/internal/keys"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/workload"
)

// Store is the part of the runtime state the controllers use: RedirectPolicy enforcement
// lists a project's registered clients, counts the live tokens of each, and revokes those of
// clients a policy refuses; policy changes are written to the audit log.
type Store interface {
	ListClients(ctx context.Context, project string) ([]store.Client, error)
	CountLiveTokens(ctx context.Context, project string, now time.Time) (map[string]int64, error)
	RevokeClientTokens(ctx context.Context, project string, clientIDs []string, now time.Time) (map[string]int64, error)
	// AppendAudit writes policy.changed when a Project's or a RedirectPolicy's spec changes.
	AppendAudit(ctx context.Context, r store.AuditRecord) error
	// HoldClientID records which namespace holds each OAuthClient id (clientids.go).
	HoldClientID(ctx context.Context, project, clientID, namespace string, now time.Time) (string, error)
}

// Options configures the controllers and the compiler.
type Options struct {
	// PublicURL is the server's external base URL (scheme, host, optional path prefix); issuers
	// are {PublicURL}/{namespace}/{project}. Required.
	PublicURL string
	// Config receives every compiled Snapshot. Required.
	Config *config.Holder
	// Store is the runtime state; RedirectPolicy enforcement revokes the tokens of clients a
	// policy refuses in it. May be nil (refused clients are then reported, not revoked).
	Store Store
	// ClientDocuments reads the client ID metadata documents of clients holding tokens, for
	// enforcement; nil means a clientdoc.Fetcher with production defaults.
	ClientDocuments *clientdoc.Fetcher
	// Clock stamps condition transitions. Defaults to time.Now.
	Clock func() time.Time
	// MaxConcurrentReconciles per kind. Defaults to 16: a reconcile mostly waits on API writes
	// (the credentials Secret, status), so overlapping them is what lets thousands of
	// OAuthClients converge quickly.
	MaxConcurrentReconciles int
	// SigningKeys are the operator's signing keys, for Projects with signingKeySource
	// Operator; nil refuses such Projects. Call Compiler.Kick when they change.
	SigningKeys *lkkeys.Signing
	// SPIFFEBundles fetches the SPIFFE bundle endpoints OAuthClients name
	// (spec.workloadIdentity.trustBundle.endpointURL); nil means one with production defaults.
	SPIFFEBundles *workload.Bundles
	// WaitFor, when set, is waited for before the first compilation: the server publishes no
	// configuration (and so serves no project) until the keys are loaded.
	WaitFor func(context.Context) error
	// Debounce is how long the compiler waits after a change for more changes before it
	// compiles. Defaults to 100ms.
	Debounce time.Duration
}

func (o *Options) defaults() error {
	if o.Config == nil {
		return errors.New("controllers: Options.Config is required")
	}
	u, err := url.Parse(o.PublicURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("controllers: Options.PublicURL %q must be an absolute http(s) URL without query or fragment", o.PublicURL)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.MaxConcurrentReconciles <= 0 {
		o.MaxConcurrentReconciles = 16
	}
	if o.Debounce <= 0 {
		o.Debounce = 100 * time.Millisecond
	}
	if o.SPIFFEBundles == nil {
		o.SPIFFEBundles = workload.NewBundles(workload.BundleOptions{Log: ctrl.Log.WithName("spiffe-bundles")})
	}
	return nil
}

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
	if err := addIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return nil, err
	}
	b := base{
		client:    mgr.GetClient(),
		recorder:  mgr.GetEventRecorder("latchkey"),
		publicURL: opts.PublicURL,
		clock:     opts.Clock,
		projects:  &projectMemo{},
		signing:   opts.SigningKeys,
		bundles:   opts.SPIFFEBundles,
		audit:     opts.Store,
		recorded:  &sync.Map{},
	}
	deps := &dependents{c: mgr.GetClient()}
	copts := controller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles}
	if err := (&ProjectReconciler{base: b, deps: deps}).SetupWithManager(mgr, copts); err != nil {
		return nil, fmt.Errorf("setting up the Project controller: %w", err)
	}
	quiet := b
	quiet.quietFirstReady = true
	ocr := &OAuthClientReconciler{base: quiet, deps: deps, live: mgr.GetAPIReader()}
	if opts.Store != nil {
		ocr.holders = opts.Store
	}
	if err := ocr.SetupWithManager(mgr, copts); err != nil {
		return nil, fmt.Errorf("setting up the OAuthClient controller: %w", err)
	}
	if err := (&ConnectorReconciler{base: b, deps: deps}).SetupWithManager(mgr, copts); err != nil {
		return nil, fmt.Errorf("setting up the Connector controller: %w", err)
	}
	if err := (&RedirectPolicyReconciler{base: b, deps: deps, store: opts.Store, documents: opts.ClientDocuments}).SetupWithManager(mgr, copts); err != nil {
		return nil, fmt.Errorf("setting up the RedirectPolicy controller: %w", err)
	}
	if err := (&AccessPolicyReconciler{base: b, deps: deps}).SetupWithManager(mgr, copts); err != nil {
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
// Field indexes

const (
	// projectIndex indexes OAuthClients, Connectors and RedirectPolicies by "namespace/name" of
	// the Project they refer to.
	projectIndex = "spec.projectRef"
	// secretIndex indexes Projects, Connectors and OAuthClients by the names of the Secrets (in
	// their own namespace) they read or write.
	secretIndex = "secretRefs"
	// configMapIndex indexes Projects and OAuthClients by the names of the ConfigMaps (in their
	// own namespace) they read: logos, SPIFFE trust bundles.
	configMapIndex = "configMapRefs"
	// workloadNamespaceIndex indexes OAuthClients by the namespace of the ServiceAccount of
	// their spec.workloadIdentity, when it is another than their own: that namespace's labels
	// decide whether the Project admits it.
	workloadNamespaceIndex = "workloadNamespace"
	// connectorIndex indexes OAuthClients by the "namespace/name" of every Connector they list.
	connectorIndex = "spec.connectors"
)

func addIndexes(ctx context.Context, fi client.FieldIndexer) error {
	indexes := []struct {
		obj   client.Object
		field string
		fn    client.IndexerFunc
	}{
		{&v1alpha1.OAuthClient{}, projectIndex, func(o client.Object) []string {
			oc := o.(*v1alpha1.OAuthClient)
			return []string{projectKeyOf(oc.Spec.ProjectRef, oc.Namespace).String()}
		}},
		{&v1alpha1.Connector{}, projectIndex, func(o client.Object) []string {
			c := o.(*v1alpha1.Connector)
			return []string{projectKeyOf(c.Spec.ProjectRef, c.Namespace).String()}
		}},
		{&v1alpha1.RedirectPolicy{}, projectIndex, func(o client.Object) []string {
			p := o.(*v1alpha1.RedirectPolicy)
			return []string{projectKeyOf(p.Spec.ProjectRef, p.Namespace).String()}
		}},
		{&v1alpha1.AccessPolicy{}, projectIndex, func(o client.Object) []string {
			p := o.(*v1alpha1.AccessPolicy)
			return []string{projectKeyOf(p.Spec.ProjectRef, p.Namespace).String()}
		}},
		{&v1alpha1.Project{}, secretIndex, func(o client.Object) []string {
			return projectSecretNames(o.(*v1alpha1.Project))
		}},
		{&v1alpha1.Project{}, configMapIndex, func(o client.Object) []string {
			return projectConfigMapNames(o.(*v1alpha1.Project))
		}},
		{&v1alpha1.OAuthClient{}, workloadNamespaceIndex, func(o client.Object) []string {
			oc := o.(*v1alpha1.OAuthClient)
			if wi := oc.Spec.WorkloadIdentity; wi != nil && wi.ServiceAccount != nil && wi.ServiceAccount.Namespace != "" &&
				wi.ServiceAccount.Namespace != oc.Namespace {
				return []string{wi.ServiceAccount.Namespace}
			}
			return nil
		}},
		{&v1alpha1.OAuthClient{}, configMapIndex, func(o client.Object) []string {
			if wi := o.(*v1alpha1.OAuthClient).Spec.WorkloadIdentity; wi != nil && wi.TrustBundle != nil && wi.TrustBundle.ConfigMapRef != nil {
				return []string{wi.TrustBundle.ConfigMapRef.Name}
			}
			return nil
		}},
		{&v1alpha1.Connector{}, secretIndex, func(o client.Object) []string {
			// An API-key Connector names no Secret.
			if name := o.(*v1alpha1.Connector).Spec.ClientSecretRef.Name; name != "" {
				return []string{name}
			}
			return nil
		}},
		// Only a Secret named in spec.secretName is indexed: one index entry per client costs
		// two small sets each (the namespaced and the all-namespaces key), a sixth of the
		// operator's heap at ten thousand clients. clientsForSecret finds a default-named
		// Secret's client by its name.
		{&v1alpha1.OAuthClient{}, secretIndex, func(o client.Object) []string {
			oc := o.(*v1alpha1.OAuthClient)
			if ref := oc.Spec.ClientSecretRef; ref != nil {
				return []string{ref.Name}
			}
			if n := oc.Spec.SecretName; n != "" {
				return []string{n}
			}
			return nil
		}},
		{&v1alpha1.OAuthClient{}, clientIDIndex, func(o client.Object) []string {
			return []string{clientIDIndexValue(o.(*v1alpha1.OAuthClient))}
		}},
		{&v1alpha1.OAuthClient{}, resourceIndex, func(o client.Object) []string {
			return resourceIndexValues(o.(*v1alpha1.OAuthClient))
		}},
		{&v1alpha1.OAuthClient{}, connectorIndex, func(o client.Object) []string {
			oc := o.(*v1alpha1.OAuthClient)
			out := make([]string, len(oc.Spec.Connectors))
			for i, name := range oc.Spec.Connectors {
				out[i] = connectorKey(string(name), oc.Namespace).String()
			}
			return out
		}},
	}
	for _, ix := range indexes {
		if err := fi.IndexField(ctx, ix.obj, ix.field, ix.fn); err != nil {
			return fmt.Errorf("indexing %T by %s: %w", ix.obj, ix.field, err)
		}
	}
	return nil
}

// projectSecretNames lists every Secret a Project reads.
func projectSecretNames(p *v1alpha1.Project) []string {
	var out []string
	if r := p.Spec.SignIn.PasswordSecretRef; r != nil {
		out = append(out, r.Name)
	}
	if o := p.Spec.SignIn.OIDC; o != nil {
		out = append(out, o.ClientSecretRef.Name)
	}
	if reg := p.Spec.Registration; reg != nil && reg.InitialAccessTokenSecretRef != nil {
		out = append(out, reg.InitialAccessTokenSecretRef.Name)
	}
	for _, s := range p.Spec.EventSinks {
		out = append(out, s.HMACSecretRef.Name)
	}
	if r := p.Spec.SigningKeySecretRef; r != nil {
		out = append(out, r.Name)
	}
	if b := p.Spec.Branding; b != nil && b.Logo != nil && b.Logo.Kind == v1alpha1.LogoFromSecret {
		out = append(out, b.Logo.Name)
	}
	return out
}

// projectConfigMapNames lists every ConfigMap a Project reads: its logo's, if any.
func projectConfigMapNames(p *v1alpha1.Project) []string {
	if b := p.Spec.Branding; b != nil && b.Logo != nil && b.Logo.Kind == v1alpha1.LogoFromConfigMap {
		return []string{b.Logo.Name}
	}
	return nil
}

// ---------------------------------------------------------------------------------------------
// Watch mappings: which objects to reconcile again when something they depend on changes.

// dependents maps a changed object to the objects whose readiness may follow from it. Lookups go
// through the field indexes, so a change costs what it affects, not the size of the cluster.
type dependents struct {
	c client.Reader
}

func requests[T any, PT interface {
	*T
	client.Object
}](items []T) []reconcile.Request {
	out := make([]reconcile.Request, len(items))
	for i := range items {
		o := PT(&items[i])
		out[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)}
	}
	return out
}

// list runs one indexed List and logs, rather than fails, on error: a map function cannot
// return one, and the periodic resync of the cache recovers.
func (d *dependents) list(ctx context.Context, l client.ObjectList, opts ...client.ListOption) bool {
	if err := d.c.List(ctx, l, append(opts, noCopy)...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing dependents")
		return false
	}
	return true
}

// projectKeysForSecret returns the Projects a Secret matters to: those that read it, and those
// whose Connectors read it.
func (d *dependents) projectKeysForSecret(ctx context.Context, sec client.Object) map[string]bool {
	keys := map[string]bool{}
	var projects v1alpha1.ProjectList
	if d.list(ctx, &projects, readersOf(sec)...) {
		for i := range projects.Items {
			keys[client.ObjectKeyFromObject(&projects.Items[i]).String()] = true
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
	return listed(ctx, d, projectItems, client.InNamespace(cm.GetNamespace()), client.MatchingFields{configMapIndex: cm.GetName()})
}

// clientsForConfigMap: the OAuthClients whose SPIFFE trust bundle the ConfigMap holds.
func (d *dependents) clientsForConfigMap(ctx context.Context, cm client.Object) []reconcile.Request {
	return listed(ctx, d, clientItems, client.InNamespace(cm.GetNamespace()), client.MatchingFields{configMapIndex: cm.GetName()})
}

// listed lists the objects of one kind that opts select, and returns a request for each.
func listed[T any, PT interface {
	*T
	client.Object
}, L interface {
	client.ObjectList
	*LT
}, LT any](ctx context.Context, d *dependents, items func(L) []T, opts ...client.ListOption) []reconcile.Request {
	l := L(new(LT))
	if !d.list(ctx, l, opts...) {
		return nil
	}
	return requests[T, PT](items(l))
}

// attached lists the objects of one kind attached to the given Projects.
func attached[T any, PT interface {
	*T
	client.Object
}, L interface {
	client.ObjectList
	*LT
}, LT any](ctx context.Context, d *dependents, projectKeys map[string]bool, items func(L) []T) []reconcile.Request {
	var out []reconcile.Request
	for key := range projectKeys {
		out = append(out, listed[T, PT](ctx, d, items, client.MatchingFields{projectIndex: key})...)
	}
	return out
}

// readersOf selects the objects that refer to the Secret sec.
func readersOf(sec client.Object) []client.ListOption {
	return []client.ListOption{client.InNamespace(sec.GetNamespace()), client.MatchingFields{secretIndex: sec.GetName()}}
}

func projectItems(l *v1alpha1.ProjectList) []v1alpha1.Project              { return l.Items }
func connectorItems(l *v1alpha1.ConnectorList) []v1alpha1.Connector        { return l.Items }
func clientItems(l *v1alpha1.OAuthClientList) []v1alpha1.OAuthClient       { return l.Items }
func policyItems(l *v1alpha1.RedirectPolicyList) []v1alpha1.RedirectPolicy { return l.Items }
func projectKeySet(o client.Object) map[string]bool {
	return map[string]bool{client.ObjectKeyFromObject(o).String(): true}
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
	return listed(ctx, d, connectorItems, client.InNamespace(ns.GetName()))
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
		key := client.ObjectKey{Namespace: sec.GetNamespace(), Name: owner}
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
	return listed(ctx, d, clientItems, client.MatchingFields{connectorIndex: client.ObjectKeyFromObject(c).String()})
}

// clientsForNamespace: OAuthClients in the namespace, those whose ServiceAccount is there, and
// those listing a Connector there.
func (d *dependents) clientsForNamespace(ctx context.Context, ns client.Object) []reconcile.Request {
	out := listed(ctx, d, clientItems, client.InNamespace(ns.GetName()))
	out = append(out, listed(ctx, d, clientItems, client.MatchingFields{workloadNamespaceIndex: ns.GetName()})...)
	var conns v1alpha1.ConnectorList
	if d.list(ctx, &conns, client.InNamespace(ns.GetName())) {
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
	return listed(ctx, d, policyItems, client.InNamespace(ns.GetName()))
}

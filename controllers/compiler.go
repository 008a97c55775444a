//go:build !latchkey_local

package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
	lkkeys "latchkey.dev/latchkey/internal/keys"
	"latchkey.dev/latchkey/internal/workload"
)

// Compiler builds the server's configuration (config.Snapshot) from the informer cache and
// publishes it to a config.Holder. It is a manager Runnable that runs on every replica, leader or
// not, because every replica serves requests from its own snapshot.
//
// Each compilation starts from scratch (no incremental state to drift) and uses the same
// resolver as the reconcilers, so an OAuthClient, Connector or RedirectPolicy is in the snapshot
// exactly when its reconciler reports it Ready. A Project is in it when it compiled; it is
// Ready=False also when serving with a feature off (a broken Secret, docs/decisions/0014).
// Changes are debounced: a burst of edits (a GitOps sync, thousands of OAuthClients) costs a
// few compilations, not one per object.
type Compiler struct {
	cache     cache.Cache
	publicURL string
	holder    *config.Holder
	debounce  time.Duration
	log       logr.Logger

	trigger   chan struct{}
	first     chan struct{}
	firstOnce sync.Once
	version   uint64

	// compiling is set while a compilation reads the cache: any Secret event then triggers
	// another compilation, since the set of referenced Secrets is not known until it ends.
	compiling atomic.Bool
	mu        sync.Mutex
	secrets   map[types.NamespacedName]struct{}
	// configMaps are the ConfigMaps the last compilation looked up (Project logos).
	configMaps map[types.NamespacedName]struct{}
	signing    *lkkeys.Signing
	bundles    *workload.Bundles
	waitFor    func(context.Context) error
}

// NewCompiler returns a compiler reading from c and publishing to opts.Config. Setup creates
// and registers one; use this only to run a compiler on its own.
func NewCompiler(c cache.Cache, opts Options) *Compiler {
	debounce := opts.Debounce
	if debounce <= 0 {
		debounce = 100 * time.Millisecond
	}
	return &Compiler{
		cache:     c,
		publicURL: opts.PublicURL,
		holder:    opts.Config,
		signing:   opts.SigningKeys,
		bundles:   opts.SPIFFEBundles,
		waitFor:   opts.WaitFor,
		debounce:  debounce,
		log:       log.Log.WithName("compiler"),
		trigger:   make(chan struct{}, 1),
		first:     make(chan struct{}),
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every replica compiles.
func (c *Compiler) NeedLeaderElection() bool { return false }

// WaitForFirst blocks until the first snapshot is published or ctx ends.
func (c *Compiler) WaitForFirst(ctx context.Context) error {
	select {
	case <-c.first:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Checker is a healthz.Checker for /-/readyz: ready once the first snapshot is published.
func (c *Compiler) Checker(_ *http.Request) error {
	select {
	case <-c.first:
		return nil
	default:
		return errors.New("configuration not compiled yet")
	}
}

// Start implements manager.Runnable.
func (c *Compiler) Start(ctx context.Context) error {
	if err := c.watch(ctx); err != nil {
		return err
	}
	if !c.cache.WaitForCacheSync(ctx) {
		if ctx.Err() != nil {
			return nil //nolint:nilerr // the manager stopping is not a failure of the runnable
		}
		return errors.New("compiler: cache did not sync")
	}
	if c.waitFor != nil {
		if err := c.waitFor(ctx); err != nil {
			return nil //nolint:nilerr // only the manager stopping ends the wait
		}
	}

	go c.refreshBundles(ctx)
	const maxBackoff = 30 * time.Second
	backoff := time.Second
	var retry <-chan time.Time
	var last time.Duration
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return nil
			case <-c.trigger:
			case <-retry:
			}
			// Gather the rest of the burst, and never spend more than a third of the time
			// compiling when changes arrive without pause.
			if !sleep(ctx, max(c.debounce, 2*last)) {
				return nil
			}
			select {
			case <-c.trigger:
			default:
			}
		}
		started := time.Now()
		snap, err := c.compileOnce(ctx)
		last = time.Since(started)
		if err != nil {
			if ctx.Err() != nil {
				return nil //nolint:nilerr // the manager stopping is not a failure of the runnable
			}
			c.log.Error(err, "compiling configuration failed; keeping the previous snapshot", "retryIn", backoff)
			retry = time.After(backoff)
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		retry, backoff = nil, time.Second
		c.version++
		snap.Version = c.version
		c.holder.Store(snap)
		c.firstOnce.Do(func() { close(c.first) })
		c.log.V(1).Info("published configuration", "version", snap.Version, "projects", len(snap.Projects), "took", last)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// bundleCheck is how often the compiler looks whether a SPIFFE bundle endpoint is due: a
// compilation fetches it (workload.Bundles), on every replica, since each compiles its own
// snapshot.
const bundleCheck = 15 * time.Second

func (c *Compiler) refreshBundles(ctx context.Context) {
	if c.bundles == nil {
		return
	}
	t := time.NewTicker(bundleCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if c.bundles.Due() {
				c.kick()
			}
		}
	}
}

// Kick asks for a new snapshot: the operator's keys changed.
func (c *Compiler) Kick() { c.kick() }

func (c *Compiler) kick() {
	select {
	case c.trigger <- struct{}{}:
	default:
	}
}

// watch subscribes to the informers the snapshot is built from. Status updates of Latchkey
// objects (which the reconcilers write) do not change the snapshot, so only spec changes,
// creations and deletions count, and of an OAuthClient's status what says whether it holds its
// client id (clientids.go).
func (c *Compiler) watch(ctx context.Context) error {
	specChanged := toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.kick() },
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(Object)
			n, ok2 := newObj.(Object)
			if !ok1 || !ok2 || o.GetGeneration() != n.GetGeneration() || o.GetUID() != n.GetUID() || clientIDHeldChanged(o, n) {
				c.kick()
			}
		},
		DeleteFunc: func(any) { c.kick() },
	}
	for _, obj := range []Object{&v1alpha1.Project{}, &v1alpha1.OAuthClient{}, &v1alpha1.Connector{}, &v1alpha1.RedirectPolicy{}, &v1alpha1.AccessPolicy{}} {
		if err := c.subscribe(ctx, obj, specChanged); err != nil {
			return err
		}
	}
	if err := c.subscribe(ctx, &corev1.Namespace{}, toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.kick() },
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(Object)
			n, ok2 := newObj.(Object)
			if !ok1 || !ok2 || !equality.Semantic.DeepEqual(o.GetLabels(), n.GetLabels()) {
				c.kick()
			}
		},
		DeleteFunc: func(any) { c.kick() },
	}); err != nil {
		return err
	}
	onSecret := func(obj any) {
		o, ok := obj.(Object)
		if !ok || c.compiling.Load() || c.references(objectKey(o)) {
			// Tombstones (not a Object) are rare; compiling again is the safe answer.
			c.kick()
		}
	}
	if err := c.subscribe(ctx, &corev1.Secret{}, toolscache.ResourceEventHandlerFuncs{
		AddFunc: onSecret,
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(Object)
			n, ok2 := newObj.(Object)
			if !ok1 || !ok2 || o.GetResourceVersion() != n.GetResourceVersion() {
				onSecret(newObj)
			}
		},
		DeleteFunc: onSecret,
	}); err != nil {
		return err
	}
	onConfigMap := func(obj any) {
		o, ok := obj.(Object)
		if !ok || c.compiling.Load() || c.referencesConfigMap(objectKey(o)) {
			c.kick()
		}
	}
	return c.subscribe(ctx, &corev1.ConfigMap{}, toolscache.ResourceEventHandlerFuncs{
		AddFunc: onConfigMap,
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(Object)
			n, ok2 := newObj.(Object)
			if !ok1 || !ok2 || o.GetResourceVersion() != n.GetResourceVersion() {
				onConfigMap(newObj)
			}
		},
		DeleteFunc: onConfigMap,
	})
}

func (c *Compiler) referencesConfigMap(key types.NamespacedName) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.configMaps[key]
	return ok
}

func (c *Compiler) subscribe(ctx context.Context, obj Object, h toolscache.ResourceEventHandler) error {
	inf, err := c.cache.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("compiler: informer for %T: %w", obj, err)
	}
	if _, err := inf.AddEventHandler(h); err != nil {
		return fmt.Errorf("compiler: watching %T: %w", obj, err)
	}
	return nil
}

func (c *Compiler) references(key types.NamespacedName) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.secrets[key]
	return ok
}

func (c *Compiler) compileOnce(ctx context.Context) (*config.Snapshot, error) {
	c.compiling.Store(true)
	defer c.compiling.Store(false)
	snap, res, err := compile(ctx, clusterReader{c.cache}, c.publicURL, c.signing, c.bundles)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.secrets, c.configMaps = res.secrets, res.configMaps
	c.mu.Unlock()
	return snap, nil
}

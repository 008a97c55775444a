//go:build !latchkey_local

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/controllers"
	"latchkey.dev/latchkey/internal/config"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
)

// The reconcile benchmark: N OAuthClients of one Project applied to a running operator (as a
// GitOps tool applies a directory), timed until every one reports Ready for its generation.
//
// The operator runs in a process of its own (this program again, in operator mode), wired as
// cmd/latchkey wires it, so its memory is its own: the harness that creates the objects and
// watches them become Ready is another process. Every count gets a fresh kube-apiserver and
// etcd, so one count's objects do not carry into the next.

const (
	benchNS     = "bench"
	ctrlProject = "proj"
	// createWorkers create objects in parallel, as kubectl apply --server-side of a large
	// directory or Argo CD's sync waves do.
	createWorkers = 32
	// settleFor is how long after all Ready the operator's memory is read again: its second
	// reconcile of each client (for the client's own Secret) and the Events come after Ready.
	settleFor = 15 * time.Second
	// childEnv marks the operator process.
	childEnv = "LATCHKEY_BENCH_OPERATOR"
)

// memory is what the operator reports about itself, in MiB.
type memory struct {
	HeapMiB    float64 `json:"heap_mib"`     // Go heap in use after two collections
	GoSysMiB   float64 `json:"go_sys_mib"`   // what the Go runtime holds from the OS
	RSSMiB     float64 `json:"rss_mib"`      // resident set
	AnonMiB    float64 `json:"anon_mib"`     // of it, anonymous memory (what the binary's pages are not)
	PeakRSSMiB float64 `json:"peak_rss_mib"` // resident high-water mark
	Clients    int     `json:"clients"`      // clients in the compiled snapshot
}

type reconcileResult struct {
	clients           int
	create, ready     time.Duration
	base, atReady     memory
	settled           memory
	loadStart, loadAt string
}

func runControllers(ctx context.Context, o options) error {
	if os.Getenv(childEnv) == "1" {
		return operator(ctx, o)
	}
	var counts []int
	for f := range strings.SplitSeq(o.controllers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-controllers %q: want positive counts separated by commas", o.controllers)
		}
		counts = append(counts, n)
	}
	assets, err := kubebuilderAssets()
	if err != nil {
		return err
	}
	os.Setenv("KUBEBUILDER_ASSETS", assets)
	crds, err := crdDir()
	if err != nil {
		return err
	}
	ctrl.SetLogger(logr.Discard())
	var results []reconcileResult
	for _, n := range counts {
		r, err := reconcileOnce(ctx, o, crds, n)
		if err != nil {
			return fmt.Errorf("%d clients: %w", n, err)
		}
		logf(o, "%d clients Ready in %.1f s", n, r.ready.Seconds())
		results = append(results, r)
	}
	fmt.Printf("## OAuthClient reconcile benchmark (envtest)\n\n")
	fmt.Printf("- kube-apiserver and etcd from %s, fresh for each count; one Project, N OAuthClients created by %d parallel writers\n", assets, createWorkers)
	fmt.Printf("- the operator in its own process, wired as cmd/latchkey wires it (controllers.Setup, SQLite store, client QPS unthrottled)\n")
	if o.operatorMemLimit != "" {
		fmt.Printf("- the operator runs with GOMEMLIMIT=%s\n", o.operatorMemLimit)
	}
	fmt.Printf("- machine: %d CPUs, shared by the operator, the API server, etcd and this harness\n\n", runtime.NumCPU())
	fmt.Println("| OAuthClients | create s | all Ready s | operator heap MiB | RSS MiB | settled heap MiB | settled RSS MiB | settled anonymous MiB | peak RSS MiB | RSS with no clients MiB | load avg (start → Ready) |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, r := range results {
		fmt.Printf("| %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %s → %s |\n", r.clients, r.create.Seconds(), r.ready.Seconds(),
			r.atReady.HeapMiB, r.atReady.RSSMiB, r.settled.HeapMiB, r.settled.RSSMiB, r.settled.AnonMiB, r.settled.PeakRSSMiB, r.base.RSSMiB, r.loadStart, r.loadAt)
	}
	fmt.Printf("\n\"all Ready\" runs from the first create to the moment every OAuthClient has Ready=True for its generation. The operator's\n")
	fmt.Printf("Go heap (after two collections) and resident set are read when all are Ready and again %s later (settled).\n", settleFor)
	return nil
}

// kubebuilderAssets is $KUBEBUILDER_ASSETS, or the cache hack/control-plane.sh builds into.
func kubebuilderAssets() (string, error) {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d, nil
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, ".cache")
	}
	d := filepath.Join(base, "latchkey", "k8s-v1.37.2-etcd-v3.7.3")
	if _, err := os.Stat(filepath.Join(d, "kube-apiserver")); err != nil {
		return "", errors.New("KUBEBUILDER_ASSETS is not set and no control plane is cached: run hack/control-plane.sh and export KUBEBUILDER_ASSETS=<the directory it prints>")
	}
	return d, nil
}

// crdDir finds config/crd/bases from the working directory up.
func crdDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		d := filepath.Join(dir, "config", "crd", "bases")
		if _, err := os.Stat(d); err == nil {
			return d, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("config/crd/bases not found: run from the repository")
		}
		dir = parent
	}
}

func benchScheme() (*kruntime.Scheme, error) {
	scheme := kruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return scheme, v1alpha1.AddToScheme(scheme)
}

// operatorProc is the operator process: it answers "mem" on stdin with a memory line.
type operatorProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startOperator(ctx context.Context, o options, kubeconfig string, n int) (*operatorProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, "-controllers", strconv.Itoa(n), "-profile", o.profileDir)
	cmd.Env = append(os.Environ(), childEnv+"=1", "KUBECONFIG="+kubeconfig)
	if o.operatorMemLimit != "" {
		cmd.Env = append(cmd.Env, "GOMEMLIMIT="+o.operatorMemLimit)
	}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &operatorProc{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	// The first line says the first snapshot is published.
	if !p.out.Scan() || p.out.Text() != "ready" {
		p.stop()
		return nil, fmt.Errorf("operator did not start: %q %w", p.out.Text(), p.out.Err())
	}
	return p, nil
}

func (p *operatorProc) memory() (memory, error) {
	var m memory
	if _, err := io.WriteString(p.in, "mem\n"); err != nil {
		return m, err
	}
	if !p.out.Scan() {
		return m, fmt.Errorf("operator gone: %w", p.out.Err())
	}
	err := json.Unmarshal(p.out.Bytes(), &m)
	return m, err
}

func (p *operatorProc) stop() {
	p.in.Close()     // the operator stops at the end of its input
	_ = p.cmd.Wait() // its exit status after a closed input says nothing the bench needs
}

// operator is the operator process: the manager, controllers and compiler as cmd/latchkey
// wires them, with a SQLite store, until stdin closes.
func operator(ctx context.Context, o options) error {
	ctrl.SetLogger(logr.Discard())
	scheme, err := benchScheme()
	if err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "latchkey-bench-ctrl-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := sqlstore.Open(ctx, "sqlite:"+filepath.Join(dir, "latchkey.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  controllers.CacheOptions(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return err
	}
	holder := &config.Holder{}
	compiler, err := controllers.SetupWithCompiler(mgr, controllers.Options{PublicURL: "https://latchkey.bench", Config: holder, Store: st}) //nolint:contextcheck // set-up before the manager starts
	if err != nil {
		return err
	}
	mctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = compiler.WaitForFirst(wctx)
	cancel()
	if err != nil {
		return fmt.Errorf("no first snapshot: %w", err)
	}
	fmt.Println("ready")
	if o.profileDir != "" {
		runtime.MemProfileRate = 64 << 10 // finer than the default, for the heap profile
		// The CPU profile covers the whole run after the first snapshot: the clients' creation,
		// their reconciles and compilations, and the settling.
		if f, err := os.Create(filepath.Join(o.profileDir, fmt.Sprintf("operator-%s.cpu.pprof", o.controllers))); err == nil {
			if pprof.StartCPUProfile(f) == nil {
				defer func() {
					pprof.StopCPUProfile()
					f.Close()
				}()
			}
		}
	}
	in := bufio.NewScanner(os.Stdin)
	for reads := 0; in.Scan(); {
		if in.Text() != "mem" {
			continue
		}
		var m memory
		m.HeapMiB, m.GoSysMiB, m.RSSMiB = memNow()
		if o.profileDir != "" {
			// One heap profile per reading (with no clients, all Ready, settled), taken right
			// after memNow's collections so it shows what is live then.
			reads++
			writeHeapProfile(filepath.Join(o.profileDir, fmt.Sprintf("operator-%s-read%d.heap.pprof", o.controllers, reads)))
		}
		_, m.PeakRSSMiB, m.AnonMiB = rss()
		if p := holder.Load().Project(benchNS + "/" + ctrlProject); p != nil {
			m.Clients = len(p.Clients)
		}
		b, _ := json.Marshal(m)
		fmt.Println(string(b))
	}
	return nil
}

func writeHeapProfile(path string) {
	f, err := os.Create(path)
	if err == nil {
		err = pprof.Lookup("heap").WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "heap profile:", err)
	}
}

// reconcileOnce runs one count against a fresh control plane.
func reconcileOnce(ctx context.Context, o options, crds string, n int) (reconcileResult, error) {
	r := reconcileResult{clients: n}
	env := &envtest.Environment{CRDDirectoryPaths: []string{crds}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		return r, fmt.Errorf("starting envtest: %w", err)
	}
	defer func() { _ = env.Stop() }() // a control plane that fails to stop leaves only processes behind
	cfg.QPS, cfg.Burst = -1, 0
	kubeconfig, err := os.CreateTemp("", "latchkey-bench-kubeconfig-")
	if err != nil {
		return r, err
	}
	defer os.Remove(kubeconfig.Name())
	if _, err := kubeconfig.Write(env.KubeConfig); err != nil {
		return r, err
	}
	kubeconfig.Close()

	scheme, err := benchScheme()
	if err != nil {
		return r, err
	}
	k8s, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return r, err
	}
	op, err := startOperator(ctx, o, kubeconfig.Name(), n)
	if err != nil {
		return r, err
	}
	defer op.stop()

	// The Project and its password file, Ready before the clients arrive.
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNS}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: benchNS, Name: "passwords", Labels: map[string]string{v1alpha1.SecretUseLabel: v1alpha1.SecretUseProject}},
			StringData: map[string]string{"passwords.yaml": "- email: alice@example.com\n  name: Alice\n  hash: $2a$10$5ai4.gQFC2HTMrdNoweK0eV.EidIA5.eyvrOffs4Ao4TM7P23dxoe\n"}},
		&v1alpha1.Project{ObjectMeta: metav1.ObjectMeta{Namespace: benchNS, Name: ctrlProject},
			Spec: v1alpha1.ProjectSpec{SignIn: v1alpha1.SignIn{PasswordSecretRef: &v1alpha1.SecretKeyReference{Name: "passwords", Key: "passwords.yaml"}}}},
	} {
		if err := k8s.Create(ctx, obj); err != nil {
			return r, err
		}
	}
	if err := waitUntil(ctx, time.Minute, func() (bool, error) {
		p := &v1alpha1.Project{}
		// Not there yet, or the API server busy: poll again.
		err := k8s.Get(ctx, client.ObjectKey{Namespace: benchNS, Name: ctrlProject}, p)
		return err == nil && meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.ReadyCondition), nil
	}); err != nil {
		return r, fmt.Errorf("project not Ready: %w", err)
	}
	if r.base, err = op.memory(); err != nil {
		return r, err
	}

	// Ready is watched through an informer of this process: polling the API server for ten
	// thousand objects would load it more than the operator does.
	watch, err := clientsCache(ctx, cfg, scheme)
	if err != nil {
		return r, err
	}
	r.loadStart = loadAvg()
	start := time.Now()
	if err := createClients(ctx, k8s, n); err != nil {
		return r, err
	}
	r.create = time.Since(start)
	logf(o, "created %d OAuthClients in %.1f s", n, r.create.Seconds())
	err = waitUntil(ctx, 10*time.Minute, func() (bool, error) {
		var list v1alpha1.OAuthClientList
		if err := watch.List(ctx, &list, client.InNamespace(benchNS), client.UnsafeDisableDeepCopy); err != nil {
			return false, err
		}
		ready := 0
		for i := range list.Items {
			c := &list.Items[i]
			if cond := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ReadyCondition); cond != nil &&
				cond.Status == metav1.ConditionTrue && c.Status.ObservedGeneration == c.Generation {
				ready++
			}
		}
		return ready == n, nil
	})
	r.ready = time.Since(start)
	r.loadAt = loadAvg()
	if err != nil {
		return r, fmt.Errorf("waiting for Ready: %w", err)
	}
	if r.atReady, err = op.memory(); err != nil {
		return r, err
	}
	select {
	case <-ctx.Done():
		return r, ctx.Err()
	case <-time.After(settleFor):
	}
	if r.settled, err = op.memory(); err != nil {
		return r, err
	}
	if r.settled.Clients != n {
		return r, fmt.Errorf("the operator's snapshot holds %d clients, want %d", r.settled.Clients, n)
	}
	return r, nil
}

// clientsCache starts an informer on OAuthClients and waits for it to sync.
func clientsCache(ctx context.Context, cfg *rest.Config, scheme *kruntime.Scheme) (cache.Cache, error) {
	c, err := cache.New(cfg, cache.Options{Scheme: scheme, DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		return nil, err
	}
	if _, err := c.GetInformer(ctx, &v1alpha1.OAuthClient{}); err != nil {
		return nil, err
	}
	go func() { _ = c.Start(ctx) }() // returns when ctx ends; WaitForCacheSync reports a failed start
	if !c.WaitForCacheSync(ctx) {
		return nil, errors.New("OAuthClient informer did not sync")
	}
	return c, nil
}

func createClients(ctx context.Context, k8s client.Client, n int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range createWorkers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || ctx.Err() != nil {
					return
				}
				oc := &v1alpha1.OAuthClient{
					ObjectMeta: metav1.ObjectMeta{Namespace: benchNS, Name: fmt.Sprintf("agent-%05d", i)},
					Spec: v1alpha1.OAuthClientSpec{
						ProjectRef:   v1alpha1.ProjectReference{Name: ctrlProject},
						DisplayName:  fmt.Sprintf("Agent %d", i),
						RedirectURIs: []v1alpha1.RedirectURI{v1alpha1.RedirectURI(fmt.Sprintf("http://127.0.0.1:%d/callback", 20000+i%40000))},
					},
				}
				if err := k8s.Create(ctx, oc); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		return fmt.Errorf("creating clients: %w", err)
	}
	return ctx.Err()
}

// waitUntil polls cond every 100 ms until it holds, fails, or limit passes.
func waitUntil(ctx context.Context, limit time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// memNow collects garbage (twice, so sync.Pool caches go too) and reads the Go heap in use,
// what the runtime holds from the OS, and the resident set, in MiB.
func memNow() (heap, sys, resident float64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	resident, _, _ = rss()
	return float64(ms.HeapInuse) / (1 << 20), float64(ms.Sys) / (1 << 20), resident
}

// rss reads the resident set and its high-water mark from /proc/self/status, in MiB.
func rss() (cur, peak, anon float64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0, 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			cur = kb / 1024
		case "VmHWM:":
			peak = kb / 1024
		case "RssAnon:":
			anon = kb / 1024
		}
	}
	return cur, peak, anon
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/controllers"
	"latchkey.dev/latchkey/internal/config"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
)

// The reconcile benchmark: N OAuthClients of one Project applied to a running operator (as a
// GitOps tool applies a directory), timed until every one reports Ready for its generation,
// with the operator's memory once they have. Each count runs in a process of its own, with its
// own kube-apiserver and etcd, so one count's memory and stored objects do not carry into the
// next.

const (
	benchNS     = "bench"
	ctrlProject = "proj"
	// createWorkers create objects in parallel, as kubectl apply --server-side of a large
	// directory or Argo CD's sync waves do.
	createWorkers = 32
)

// reconcileResult is one count's outcome; the child prints it as JSON on its last line.
type reconcileResult struct {
	Clients    int     `json:"clients"`
	CreateSecs float64 `json:"create_secs"` // creating every object
	ReadySecs  float64 `json:"ready_secs"`  // from the first create until every object is Ready
	HeapMiB    float64 `json:"heap_mib"`    // Go heap in use after a collection, all Ready
	GoSysMiB   float64 `json:"go_sys_mib"`  // memory the Go runtime holds from the OS
	RSSMiB     float64 `json:"rss_mib"`     // resident set after a collection, all Ready
	// The same settleFor later, when the work queues have drained.
	SettledHeapMiB float64 `json:"settled_heap_mib"`
	SettledRSSMiB  float64 `json:"settled_rss_mib"`
	PeakRSSMiB     float64 `json:"peak_rss_mib"` // the process's high-water mark
	BaseRSSMiB     float64 `json:"base_rss_mib"` // resident set with the manager started, no clients
	SnapshotCli    int     `json:"snapshot_clients"`
	Error          string  `json:"error,omitempty"`
}

func runControllers(ctx context.Context, o options) error {
	var counts []int
	for f := range strings.SplitSeq(o.controllers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-controllers %q: want positive counts separated by commas", o.controllers)
		}
		counts = append(counts, n)
	}
	if os.Getenv("LATCHKEY_BENCH_CHILD") == "1" {
		if len(counts) != 1 {
			return errors.New("a child runs one count")
		}
		r, err := reconcileOnce(ctx, o, counts[0])
		if err != nil {
			r.Error = err.Error()
		}
		b, _ := json.Marshal(r)
		fmt.Println(string(b))
		return err
	}
	assets, err := kubebuilderAssets()
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var results []reconcileResult
	for _, n := range counts {
		logf(o, "reconciling %d OAuthClients in a child process", n)
		load := loadAvg()
		cmd := exec.CommandContext(ctx, self, "-controllers", strconv.Itoa(n), fmt.Sprintf("-v=%t", o.verbose), "-profile", o.profileDir)
		cmd.Env = append(os.Environ(), "LATCHKEY_BENCH_CHILD=1", "KUBEBUILDER_ASSETS="+assets)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		var r reconcileResult
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if jerr := json.Unmarshal([]byte(lines[len(lines)-1]), &r); jerr != nil {
			return fmt.Errorf("%d clients: %v (output %q)", n, errors.Join(err, jerr), out)
		}
		if r.Error != "" {
			return fmt.Errorf("%d clients: %s", n, r.Error)
		}
		logf(o, "%d clients Ready in %.1f s (load %s)", n, r.ReadySecs, load)
		results = append(results, r)
	}
	fmt.Printf("## OAuthClient reconcile benchmark (envtest)\n\n")
	fmt.Printf("- kube-apiserver and etcd from %s; one Project, N OAuthClients created by %d parallel writers\n", assets, createWorkers)
	fmt.Printf("- operator in the measuring process: controllers.Setup as cmd/latchkey wires it (MaxConcurrentReconciles default), SQLite store\n")
	fmt.Printf("- machine: %d CPUs shared with the API server and etcd; load average at the end %s\n\n", runtime.NumCPU(), loadAvg())
	fmt.Printf("| OAuthClients | create s | all Ready s | Go heap MiB | Go sys MiB | RSS MiB | settled heap MiB | settled RSS MiB | peak RSS MiB | RSS before MiB |\n")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		fmt.Printf("| %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", r.Clients, r.CreateSecs, r.ReadySecs,
			r.HeapMiB, r.GoSysMiB, r.RSSMiB, r.SettledHeapMiB, r.SettledRSSMiB, r.PeakRSSMiB, r.BaseRSSMiB)
	}
	fmt.Printf("\nGo heap and RSS are taken after two collections when every client is Ready, and again %s later (settled).\n", settleFor)
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

func reconcileOnce(ctx context.Context, o options, n int) (reconcileResult, error) {
	r := reconcileResult{Clients: n}
	if o.profileDir != "" {
		runtime.MemProfileRate = 64 << 10 // finer than the default, for the heap profile
	}
	crds, err := crdDir()
	if err != nil {
		return r, err
	}
	ctrl.SetLogger(logr.Discard())
	env := &envtest.Environment{CRDDirectoryPaths: []string{crds}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		return r, fmt.Errorf("starting envtest: %w", err)
	}
	defer env.Stop()
	cfg.QPS, cfg.Burst = -1, 0 // as ctrl.GetConfig leaves it: the API server's fairness decides

	scheme := kruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return r, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return r, err
	}
	dir, err := os.MkdirTemp("", "latchkey-bench-ctrl-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	st, err := sqlstore.Open(ctx, "sqlite:"+filepath.Join(dir, "latchkey.db"))
	if err != nil {
		return r, err
	}
	defer st.Close()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  controllers.CacheOptions(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return r, err
	}
	holder := &config.Holder{}
	compiler, err := controllers.SetupWithCompiler(mgr, controllers.Options{PublicURL: "https://latchkey.bench", Config: holder, Store: st})
	if err != nil {
		return r, err
	}
	k8s, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return r, err
	}

	mctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	defer func() {
		stop()
		<-done
	}()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = compiler.WaitForFirst(wctx)
	cancel()
	if err != nil {
		return r, fmt.Errorf("no first snapshot: %w", err)
	}

	// The Project and its password file, Ready before the clients arrive.
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNS}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: benchNS, Name: "passwords"},
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
		if err := mgr.GetCache().Get(ctx, client.ObjectKey{Namespace: benchNS, Name: ctrlProject}, p); err != nil {
			return false, nil
		}
		return meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.ReadyCondition), nil
	}); err != nil {
		return r, fmt.Errorf("project not Ready: %w", err)
	}
	runtime.GC()
	r.BaseRSSMiB, _ = rss()

	if o.profileDir != "" {
		if f, err := os.Create(filepath.Join(o.profileDir, fmt.Sprintf("controllers-%d.cpu.pprof", n))); err == nil {
			if pprof.StartCPUProfile(f) == nil {
				defer func() {
					pprof.StopCPUProfile()
					f.Close()
				}()
			}
		}
	}
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var createErr atomic.Value
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
					createErr.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	r.CreateSecs = time.Since(start).Seconds()
	if err, ok := createErr.Load().(error); ok {
		return r, fmt.Errorf("creating clients: %w", err)
	}
	logf(o, "created %d OAuthClients in %.1f s", n, r.CreateSecs)

	// Ready is read from the operator's own cache (no copies): polling the API server for ten
	// thousand objects would load it more than the operator does.
	err = waitUntil(ctx, 10*time.Minute, func() (bool, error) {
		var list v1alpha1.OAuthClientList
		if err := mgr.GetCache().List(ctx, &list, client.InNamespace(benchNS), client.UnsafeDisableDeepCopy); err != nil {
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
	r.ReadySecs = time.Since(start).Seconds()
	if err != nil {
		return r, fmt.Errorf("waiting for Ready: %w", err)
	}
	if p := holder.Load().Project(benchNS + "/" + ctrlProject); p != nil {
		r.SnapshotCli = len(p.Clients)
	}
	r.HeapMiB, r.GoSysMiB, r.RSSMiB = memNow()
	_, r.PeakRSSMiB = rss()

	// Then once the work queues have drained: the second reconcile of each client (its own
	// Secret's event) and the events' delivery come after Ready.
	settle := time.NewTimer(settleFor)
	select {
	case <-ctx.Done():
		settle.Stop()
		return r, ctx.Err()
	case <-settle.C:
	}
	r.SettledHeapMiB, _, r.SettledRSSMiB = memNow()
	_, r.PeakRSSMiB = rss()
	if o.profileDir != "" {
		if f, err := os.Create(filepath.Join(o.profileDir, fmt.Sprintf("controllers-%d.heap.pprof", n))); err == nil {
			pprof.Lookup("heap").WriteTo(f, 0)
			f.Close()
		}
	}
	return r, nil
}

// settleFor is how long after all Ready the settled figures are taken.
const settleFor = 15 * time.Second

// memNow collects garbage (twice, so sync.Pool caches go too) and reads the Go heap in use,
// what the runtime holds from the OS, and the resident set, in MiB.
func memNow() (heap, sys, resident float64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	resident, _ = rss()
	return float64(ms.HeapInuse) / (1 << 20), float64(ms.Sys) / (1 << 20), resident
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

// rss reads the resident set and its high-water mark from /proc/self/status, in MiB.
func rss() (cur, peak float64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
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
		}
	}
	return cur, peak
}

//go:build !latchkey_local

package controllers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
	lkkeys "latchkey.dev/latchkey/internal/keys"
	"latchkey.dev/latchkey/internal/store"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
	"latchkey.dev/latchkey/internal/testenv"
	"latchkey.dev/latchkey/internal/workload"
)

// One kube-apiserver and etcd for the whole package (starting one takes seconds); each test
// works in namespaces of its own.
var (
	k8s client.Client // talks to the API server directly, not through the cache
	// managerClient and managerCache are the controllers' own: reads go to the cache.
	managerClient client.Client
	managerCache  client.Reader
	holder        *config.Holder
	compiler      *Compiler
	testStore     store.Store
	// testSigning stands for the operator's loaded keys Secret (signingKeySource Operator).
	testSigning = &lkkeys.Signing{Retire: time.Hour}
	skipReason  string
)

const (
	// waitFor bounds every wait; generous, since the machine is shared. Waits end as soon as the
	// condition holds.
	waitFor = 30 * time.Second
)

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	if os.Getenv("LATCHKEY_TEST_VERBOSE") != "" {
		ctrl.SetLogger(funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{Verbosity: 1}))
	} else {
		ctrl.SetLogger(logr.Discard())
	}
	flag.Parse() // for testing.Short
	if testing.Short() {
		skipReason = testenv.ShortReason("a kube-apiserver and etcd (envtest)")
		return m.Run()
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		msg := "KUBEBUILDER_ASSETS is not set: run hack/control-plane.sh and export KUBEBUILDER_ASSETS=<the directory it prints>"
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "FAIL: "+msg)
			return 1
		}
		skipReason = msg
		return m.Run()
	}

	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting envtest:", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		}
	}()
	cfg.QPS, cfg.Burst = -1, 0 // no client-side throttling; the API server has its own

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  CacheOptions(),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "creating manager:", err)
		return 1
	}
	managerClient, managerCache = mgr.GetClient(), mgr.GetCache()
	holder = &config.Holder{}
	// A real SQLite store for RedirectPolicy enforcement (enforce_test.go).
	dbDir, err := os.MkdirTemp("", "latchkey-controllers-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "creating the store directory:", err)
		return 1
	}
	defer os.RemoveAll(dbDir)
	testStore, err = sqlstore.Open(context.Background(), "sqlite:"+filepath.Join(dbDir, "latchkey.db"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "opening the store:", err)
		return 1
	}
	defer testStore.Close()
	testSigning.Store(lkkeys.New(testNow))
	// One bundle endpoint server for the run (workload_test.go), so that the fetcher can trust
	// its certificate; tests register what it serves per path.
	bundleServer = httptest.NewTLSServer(&bundleEndpoints)
	defer bundleServer.Close()
	compiler, err = SetupWithCompiler(mgr, Options{
		SPIFFEBundles: workload.NewBundles(workload.BundleOptions{AllowLoopback: true,
			RootCAs: bundleServer.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs, Now: bundleClock.Now}),
		PublicURL: testPublicURL,
		Config:    holder,
		Store:     testStore,
		Clock:     func() time.Time { return testNow },
		Debounce:  20 * time.Millisecond,
		// Loaded before the manager starts, as WaitFor would ensure.
		SigningKeys: testSigning,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "setting up controllers:", err)
		return 1
	}
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, "creating client:", err)
		return 1
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	startCtx, cancelStart := context.WithTimeout(ctx, waitFor)
	err = compiler.WaitForFirst(startCtx)
	cancelStart()
	if err != nil {
		fmt.Fprintln(os.Stderr, "no first snapshot:", err)
		cancel()
		return 1
	}

	code := m.Run()
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
	}
	return code
}

// needEnv skips when there is no control plane: under -short, or outside CI without one.
func needEnv(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}

// eventually polls fn until it returns nil, failing the test with fn's last error after waitFor.
func eventually(t *testing.T, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not true after %s: %v", what, waitFor, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "t-" + randomSuffix(), Labels: labels}}
	create(t, ns)
	return ns.Name
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s/%s: %v", obj, obj.GetNamespace(), obj.GetName(), err)
	}
}

func get(obj client.Object) error {
	return k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
}

// update re-reads obj, applies change and writes it back, retrying on conflicts.
func update[T client.Object](t *testing.T, obj T, change func(T)) {
	t.Helper()
	eventually(t, "updating "+obj.GetName(), func() error {
		if err := get(obj); err != nil {
			return err
		}
		change(obj)
		return k8s.Update(context.Background(), obj)
	})
}

// conditions reads the status conditions of any Latchkey object.
func conditions(obj client.Object) []metav1.Condition {
	switch o := obj.(type) {
	case *v1alpha1.Project:
		return o.Status.Conditions
	case *v1alpha1.OAuthClient:
		return o.Status.Conditions
	case *v1alpha1.Connector:
		return o.Status.Conditions
	case *v1alpha1.RedirectPolicy:
		return o.Status.Conditions
	case *v1alpha1.AccessPolicy:
		return o.Status.Conditions
	}
	panic(fmt.Sprintf("no conditions on %T", obj))
}

func observedGeneration(obj client.Object) int64 {
	switch o := obj.(type) {
	case *v1alpha1.Project:
		return o.Status.ObservedGeneration
	case *v1alpha1.OAuthClient:
		return o.Status.ObservedGeneration
	case *v1alpha1.Connector:
		return o.Status.ObservedGeneration
	case *v1alpha1.RedirectPolicy:
		return o.Status.ObservedGeneration
	case *v1alpha1.AccessPolicy:
		return o.Status.ObservedGeneration
	}
	panic(fmt.Sprintf("no status on %T", obj))
}

// waitCondition waits until obj's current generation is observed with condition typ at status
// and reason, and returns the condition.
func waitCondition(t *testing.T, obj client.Object, typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	eventually(t, fmt.Sprintf("%T %s: %s=%s (%s)", obj, obj.GetName(), typ, status, reason), func() error {
		if err := get(obj); err != nil {
			return err
		}
		c := meta.FindStatusCondition(conditions(obj), typ)
		switch {
		case c == nil:
			return errors.New("no condition yet")
		case observedGeneration(obj) != obj.GetGeneration() || c.ObservedGeneration != obj.GetGeneration():
			return fmt.Errorf("generation %d not observed yet (status %d, condition %d)", obj.GetGeneration(), observedGeneration(obj), c.ObservedGeneration)
		case c.Status != status || c.Reason != reason:
			return fmt.Errorf("condition is %s (%s): %s", c.Status, c.Reason, c.Message)
		}
		got = *c
		return nil
	})
	return got
}

func waitReady(t *testing.T, obj client.Object) metav1.Condition {
	t.Helper()
	return waitCondition(t, obj, v1alpha1.ReadyCondition, metav1.ConditionTrue, v1alpha1.ReadyReason)
}

func waitNotReady(t *testing.T, obj client.Object, reason string) metav1.Condition {
	t.Helper()
	return waitCondition(t, obj, v1alpha1.ReadyCondition, metav1.ConditionFalse, reason)
}

// waitDegraded waits until obj serves (Ready=True) with a feature off (Degraded=True for reason)
// and returns the Degraded condition.
func waitDegraded(t *testing.T, obj client.Object, reason string) metav1.Condition {
	t.Helper()
	cond := waitCondition(t, obj, v1alpha1.DegradedCondition, metav1.ConditionTrue, reason)
	if c := meta.FindStatusCondition(conditions(obj), v1alpha1.ReadyCondition); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("degraded %s is not Ready=True: %+v", obj.GetName(), c)
	}
	return cond
}

// waitComplete waits until obj is Ready=True and Degraded=False.
func waitComplete(t *testing.T, obj client.Object) {
	t.Helper()
	waitCondition(t, obj, v1alpha1.DegradedCondition, metav1.ConditionFalse, v1alpha1.CompleteReason)
	waitReady(t, obj)
}

// waitSnapshot waits until the published snapshot satisfies check.
func waitSnapshot(t *testing.T, what string, check func(*config.Snapshot) error) *config.Snapshot {
	t.Helper()
	var snap *config.Snapshot
	eventually(t, "snapshot: "+what, func() error {
		snap = holder.Load()
		if snap == nil {
			return errors.New("nothing published")
		}
		return check(snap)
	})
	return snap
}

// waitEvent waits for an Event about obj with the given type and reason.
func waitEvent(t *testing.T, obj client.Object, eventType, reason string) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	eventually(t, fmt.Sprintf("%s event %s for %s", eventType, reason, obj.GetName()), func() error {
		var list eventsv1.EventList
		if err := k8s.List(context.Background(), &list, client.InNamespace(obj.GetNamespace())); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.UID == obj.GetUID() && e.Type == eventType && e.Reason == reason {
				found = e
				return nil
			}
		}
		return fmt.Errorf("none among %d events", len(list.Items))
	})
	return found
}

// passwordSecret is a one-person password file (alice, "alice-demo-pass").
func passwordSecret(namespace, name string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: forProject()},
		StringData: map[string]string{"passwords.yaml": "- email: alice@example.com\n  name: Alice\n  hash: $2a$10$5ai4.gQFC2HTMrdNoweK0eV.EidIA5.eyvrOffs4Ao4TM7P23dxoe\n"},
	}
}

// newProject creates a password-file Project and its Secret.
func newProject(t *testing.T, namespace, name string, allowed *v1alpha1.AllowedNamespaces) *v1alpha1.Project {
	t.Helper()
	create(t, passwordSecret(namespace, name+"-passwords"))
	p := &v1alpha1.Project{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: v1alpha1.ProjectSpec{
			SignIn:            v1alpha1.SignIn{PasswordSecretRef: &v1alpha1.SecretKeyReference{Name: name + "-passwords", Key: "passwords.yaml"}},
			AllowedNamespaces: allowed,
		},
	}
	create(t, p)
	return p
}

func newClient(namespace, name string, project v1alpha1.ProjectReference) *v1alpha1.OAuthClient {
	return &v1alpha1.OAuthClient{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: v1alpha1.OAuthClientSpec{
			ProjectRef:   project,
			RedirectURIs: []v1alpha1.RedirectURI{"http://127.0.0.1:8070/callback"},
		},
	}
}

func newConnector(namespace, name, project, secretName string) *v1alpha1.Connector {
	return &v1alpha1.Connector{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: v1alpha1.ConnectorSpec{
			ProjectRef:      v1alpha1.ProjectReference{Name: project},
			Preset:          v1alpha1.PresetGitHub,
			ClientID:        "gh-client",
			ClientSecretRef: v1alpha1.SecretKeyReference{Name: secretName, Key: "clientSecret"},
		},
	}
}

// inProject is Project key of s, or an empty Project while none is compiled yet, so a check
// can look into it without guarding against nil: an object can be Ready before the snapshot
// that holds its Project is published.
func inProject(s *config.Snapshot, key string) *config.Project {
	if p := s.Project(key); p != nil {
		return p
	}
	return &config.Project{}
}

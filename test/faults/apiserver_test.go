//go:build !latchkey_local

package faults_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/crypto/bcrypt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/controllers"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
	"latchkey.dev/latchkey/internal/testenv"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook"
)

// The API server goes away: every replica keeps serving every project with the configuration
// it compiled last (sign-in, tokens, metadata) and stays ready, because handlers read only the
// compiled snapshot and the runtime state is in the database.
//
// Three replicas run against one API server: "single" without leader election (the chart's
// SQLite install, one pod) and "elected-a" and "elected-b" with it (the PostgreSQL install).
// Before the outage, each compiles the project from its own cache whether or not it leads: the
// compiler is not leader-elected. During it, the standby and the single replica carry on; the
// elected leader cannot renew its Lease and its manager stops (controller-runtime's rule: a
// leader that may have been replaced must not reconcile), so in a cluster that pod restarts and
// stays unready until the API server is back, while the others serve (docs/operations.md).
func TestAPIServerUnreachable(t *testing.T) {
	testenv.SkipShort(t, "a kube-apiserver and etcd (envtest)")
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("KUBEBUILDER_ASSETS is not set")
		}
		t.Skip("KUBEBUILDER_ASSETS is not set: run hack/control-plane.sh")
	}
	ctrl.SetLogger(logr.Discard())
	klog.SetLogger(logr.Discard())
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		// kube-apiserver drains its watches for many seconds after SIGTERM; after this long
		// envtest kills it, which is the outage wanted here anyway.
		ControlPlaneStopTimeout: 2 * time.Second,
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stopAPI := func() {
		if !stopped {
			stopped = true
			// A timeout here means the process was killed: gone either way.
			env.Stop()
		}
	}
	t.Cleanup(stopAPI)

	scheme := runtime.NewScheme()
	must(t, clientgoscheme.AddToScheme(scheme))
	must(t, v1alpha1.AddToScheme(scheme))
	k8s, err := client.New(cfg, client.Options{Scheme: scheme})
	must(t, err)
	st, err := sqlstore.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "latchkey.db"))
	must(t, err)
	t.Cleanup(func() { st.Close() })
	keys := secret.NewRandomKeyring()

	type replica struct {
		name   string
		elect  bool
		holder *config.Holder
		srv    *webhook.Server
		mgr    ctrl.Manager
		done   chan error
	}
	// One front for all, as a Service: the issuer must be the same on every replica.
	var reps []*replica
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, _ := strconv.Atoi(r.Header.Get(stack.ReplicaHeader))
		reps[i].srv.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	ctx, cancel := context.WithCancel(context.Background())
	lease, renew, retry := 3*time.Second, 2*time.Second, 500*time.Millisecond
	for _, r := range []struct {
		name  string
		elect bool
	}{{"single", false}, {"elected-a", true}, {"elected-b", true}} {
		rep := &replica{name: r.name, elect: r.elect, holder: &config.Holder{}, done: make(chan error, 1)}
		rep.srv, err = webhook.New(webhook.Options{
			Config: rep.holder, Store: st, Keyring: keys, PublicURL: front.URL,
			Ready: func(context.Context) error {
				if rep.holder.Load() == nil {
					return errors.New("no configuration compiled yet")
				}
				return nil
			},
		})
		must(t, err)
		rep.mgr, err = ctrl.NewManager(cfg, ctrl.Options{
			Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
			Cache: controllers.CacheOptions(),
			// Three managers in one process register the same controllers.
			Controller:              ctrlconfig.Controller{SkipNameValidation: ptr(true)},
			LeaderElection:          r.elect,
			LeaderElectionID:        "latchkey.latchkey.dev",
			LeaderElectionNamespace: "default",
			LeaseDuration:           &lease, RenewDeadline: &renew, RetryPeriod: &retry,
		})
		must(t, err)
		must(t, controllers.Setup(rep.mgr, controllers.Options{PublicURL: front.URL, Config: rep.holder, Store: st}))
		go func() { rep.done <- rep.mgr.Start(ctx) }()
		reps = append(reps, rep)
	}
	t.Cleanup(func() {
		cancel()
		for _, r := range reps {
			select {
			case <-r.done:
			case <-time.After(30 * time.Second):
				t.Errorf("replica %s: the manager did not stop within 30s of being told to", r.name)
			}
		}
	})

	// A project with a person and a client_credentials client, as an administrator declares it.
	bg := context.Background()
	hash, err := bcrypt.GenerateFromPassword([]byte(stack.AlicePassword), bcrypt.MinCost)
	must(t, err)
	must(t, k8s.Create(bg, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}))
	must(t, k8s.Create(bg, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "people", Namespace: "team", Labels: map[string]string{v1alpha1.SecretUseLabel: v1alpha1.SecretUseProject}},
		StringData: map[string]string{"people.yaml": "- email: " + stack.AliceEmail + "\n  name: Alice\n  hash: " + string(hash) + "\n"},
	}))
	must(t, k8s.Create(bg, &v1alpha1.Project{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "team"},
		Spec: v1alpha1.ProjectSpec{SignIn: v1alpha1.SignIn{
			PasswordSecretRef: &v1alpha1.SecretKeyReference{Name: "people", Key: "people.yaml"},
		}},
	}))
	must(t, k8s.Create(bg, &v1alpha1.OAuthClient{
		ObjectMeta: metav1.ObjectMeta{Name: "svc", Namespace: "team"},
		Spec: v1alpha1.OAuthClientSpec{
			ProjectRef: v1alpha1.ProjectReference{Name: "demo"},
			GrantTypes: []v1alpha1.GrantType{v1alpha1.GrantClientCredentials},
		},
	}))
	// The leader's reconciler writes the client's credentials; every replica compiles them.
	var clientID, clientSecret string
	deadline := time.Now().Add(60 * time.Second)
	for {
		var sec corev1.Secret
		if k8s.Get(bg, client.ObjectKey{Namespace: "team", Name: "svc-credentials"}, &sec) == nil {
			clientID, clientSecret = string(sec.Data[v1alpha1.ClientIDSecretKey]), string(sec.Data[v1alpha1.ClientSecretSecretKey])
		}
		compiled := 0
		for _, r := range reps {
			if p := r.holder.Load().Project("team/demo"); p != nil && clientID != "" && p.Clients[clientID] != nil {
				compiled++
			}
		}
		if compiled == len(reps) && clientSecret != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60s %d of %d replicas had compiled the project and its client", compiled, len(reps))
		}
		time.Sleep(50 * time.Millisecond)
	}
	var leader *replica
	for _, r := range reps {
		if !r.elect {
			continue
		}
		select {
		case <-r.mgr.Elected():
			if leader != nil {
				t.Fatalf("both %s and %s lead", leader.name, r.name)
			}
			leader = r
		default:
		}
	}
	if leader == nil {
		t.Fatal("no elected replica leads, yet the client's credentials were written")
	}
	issuer := front.URL + "/team/demo"

	// What people and agents do; each must work before and after the API server goes.
	serve := func(i int, when string) {
		t.Helper()
		pin := map[string]string{stack.ReplicaHeader: strconv.Itoa(i)}
		when = reps[i].name + ", " + when
		if a := get(t, issuer+"/.well-known/oauth-authorization-server", pin); a.Status != http.StatusOK || a.Str("issuer") != issuer {
			t.Errorf("%s: metadata %d %s", when, a.Status, a.Raw)
		}
		tok := postForm(t, issuer+"/token", url.Values{"grant_type": {"client_credentials"}}, clientID, clientSecret, pin)
		if tok.Status != http.StatusOK || tok.Str("access_token") == "" {
			t.Errorf("%s: client_credentials %d %s", when, tok.Status, tok.Raw)
		}
		if ok, msg := signIn(t, front.URL, issuer, i); !ok {
			t.Errorf("%s: sign-in with the password from the Secret: %s", when, msg)
		}
		if a := get(t, front.URL+"/-/readyz", pin); a.Status != http.StatusOK {
			t.Errorf("%s: /-/readyz %d %s", when, a.Status, a.Raw)
		}
	}
	for i := range reps {
		serve(i, "with the API server")
	}
	// Status writes that follow the client's first compile (its Ready condition, the Project's
	// client count) reach every replica's cache as events and may compile once more. Wait until
	// no replica's snapshot has moved for a second, so that what is compared below is the last
	// snapshot made while the API server was there, not one still in flight on a slow machine.
	versions := map[string]uint64{}
	settle := time.Now().Add(30 * time.Second)
	for still := time.Now(); ; {
		moved := false
		for _, r := range reps {
			if v := r.holder.Load().Version; v != versions[r.name] {
				versions[r.name], moved = v, true
			}
		}
		if moved {
			still = time.Now()
		}
		if time.Since(still) >= time.Second {
			break
		}
		if time.Now().After(settle) {
			t.Fatalf("replicas' snapshots still changing after 30s: %v", versions)
		}
		time.Sleep(50 * time.Millisecond)
	}

	stopAPI()
	gone := time.Now()
	probe, cancelProbe := context.WithTimeout(bg, 5*time.Second)
	if err := k8s.Get(probe, client.ObjectKey{Name: "team"}, &corev1.Namespace{}); err == nil {
		t.Fatal("the API server still answers after being stopped")
	}
	cancelProbe()
	// Past the leader's renew deadline, asking all along as traffic would.
	var rounds int
	for time.Since(gone) < lease+time.Second {
		for i, r := range reps {
			if r != leader {
				serve(i, "API server gone for "+time.Since(gone).Round(100*time.Millisecond).String())
			}
		}
		rounds++
		if t.Failed() {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, r := range reps {
		if v := r.holder.Load().Version; v != versions[r.name] {
			t.Errorf("%s: snapshot version changed from %d to %d with no API server", r.name, versions[r.name], v)
		}
		if r == leader {
			select {
			case err := <-r.done:
				t.Logf("%s (the leader) stopped as expected once it could not renew its Lease: %v", r.name, err)
				r.done <- err
			case <-time.After(10 * time.Second):
				t.Errorf("%s (the leader) still runs its controllers %v after losing the API server", r.name, time.Since(gone))
			}
			continue
		}
		select {
		case err := <-r.done:
			t.Errorf("%s stopped when the API server went away: %v", r.name, err)
		default:
		}
	}
	t.Logf("API server stopped; for %.1fs (%d rounds of metadata, client_credentials, sign-in, readyz on every replica but the leader) every request was served from the last snapshot (versions %v)",
		time.Since(gone).Seconds(), rounds, versions)
}

func ptr[T any](v T) *T { return &v }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, u string, hdr map[string]string) stack.Answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	a, err := stack.Do(req)
	must(t, err)
	return a
}

func postForm(t *testing.T, u string, form url.Values, user, pass string, hdr map[string]string) stack.Answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(user), url.QueryEscape(pass))
	a, err := stack.Do(req)
	must(t, err)
	return a
}

// signIn signs Alice in through the project's sign-in page on one replica.
func signIn(t *testing.T, base, issuer string, replica int) (bool, string) {
	t.Helper()
	b := stack.NewBrowser(base, issuer)
	b.C.Transport = pinTransport(replica)
	if err := b.SignIn(stack.AliceEmail, stack.AlicePassword); err != nil {
		return false, err.Error()
	}
	return true, ""
}

// pinTransport sends every request to one replica behind the front.
type pinTransport int

func (p pinTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(stack.ReplicaHeader, strconv.Itoa(int(p)))
	return http.DefaultTransport.RoundTrip(r)
}

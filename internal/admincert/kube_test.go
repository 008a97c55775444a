package admincert_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"flag"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"latchkey.dev/latchkey/internal/admincert"
	"latchkey.dev/latchkey/internal/testclock"
	"latchkey.dev/latchkey/internal/testenv"
)

var (
	k8s        client.Client
	skipReason string
)

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	flag.Parse()
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
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting envtest:", err)
		return 1
	}
	defer env.Stop()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if k8s, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		return 1
	}
	return m.Run()
}

const service = "latchkey-admin"

// setUp makes a namespace and an APIService (of a group of the test's own, as the chart
// renders it: no caBundle) for one test.
func setUp(t *testing.T, group string) (ns, apiService string) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "admincert-"}}
	if err := k8s.Create(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	svc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": "v1alpha1." + group},
		"spec": map[string]any{
			"group": group, "version": "v1alpha1", "groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			"service": map[string]any{"namespace": n.Name, "name": service, "port": int64(443)},
		},
	}}
	if err := k8s.Create(t.Context(), svc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), svc) })
	return n.Name, svc.GetName()
}

func keeper(ns, apiService string, clock *testclock.Clock) *admincert.Keeper {
	return &admincert.Keeper{Client: k8s, Secret: types.NamespacedName{Namespace: ns, Name: "latchkey-admin-serving"},
		DNSNames: admincert.DNSNames(service, ns), APIService: apiService, Now: clock.Now, Log: logr.Discard()}
}

func readSecret(t *testing.T, k *admincert.Keeper) *corev1.Secret {
	t.Helper()
	var sec corev1.Secret
	if err := k8s.Get(t.Context(), k.Secret, &sec); err != nil {
		t.Fatal(err)
	}
	return &sec
}

// caBundle is what the kube-apiserver trusts for the APIService.
func caBundle(t *testing.T, name string) []byte {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("apiregistration.k8s.io/v1")
	u.SetKind("APIService")
	if err := k8s.Get(t.Context(), client.ObjectKey{Name: name}, u); err != nil {
		t.Fatal(err)
	}
	s, _, _ := unstructured.NestedString(u.Object, "spec", "caBundle")
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// serve runs a TLS listener on loopback with the Loader's certificate, as the admin listener
// does, and returns its address.
func serve(t *testing.T, l *admincert.Loader) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: l.GetCertificate, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_ = c.(*tls.Conn).Handshake()
				_ = c.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

// dial completes a handshake as the kube-apiserver's aggregator does: trusting only the
// APIService's caBundle and checking the certificate against <service>.<namespace>.svc.
func dial(addr string, bundle []byte, serverName string, now func() time.Time) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		return fmt.Errorf("no certificate in the bundle")
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12, Time: now})
	if err != nil {
		return err
	}
	return c.Close()
}

// Replicas starting together all find the Secret missing and all try to create it: one
// creation wins, every replica uses it, the APIService's caBundle is the Secret's bundle, and a
// client trusting that bundle completes TLS with the admin listener for the Service's name.
func TestKeeperCreatesOnceAndPublishes(t *testing.T) {
	ns, apiService := setUp(t, "once.admincert.test")
	clock := testclock.New(time.Now())
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Go(func() { errs <- keeper(ns, apiService, clock).Step(t.Context()) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	k := keeper(ns, apiService, clock)
	if err := k.Step(t.Context()); err != nil { // a replica that lost the creation race
		t.Fatal(err)
	}
	var list corev1.SecretList
	if err := k8s.List(t.Context(), &list, client.InNamespace(ns)); err != nil || len(list.Items) != 1 {
		t.Fatalf("%d Secrets (%v), want one", len(list.Items), err)
	}
	sec := readSecret(t, k)
	if sec.Type != corev1.SecretTypeTLS || len(sec.OwnerReferences) != 0 {
		t.Fatalf("created a %s Secret with owners %v", sec.Type, sec.OwnerReferences)
	}
	bundle := caBundle(t, apiService)
	if len(bundle) == 0 || !bytes.Equal(bundle, sec.Data[admincert.BundleKey]) {
		t.Fatalf("APIService caBundle %q, want the Secret's ca.crt %q", bundle, sec.Data[admincert.BundleKey])
	}

	// Nothing is due: later rounds change neither the Secret nor the caBundle.
	clock.Advance(24 * time.Hour)
	for range 3 {
		if err := keeper(ns, apiService, clock).Step(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if again := readSecret(t, k); again.ResourceVersion != sec.ResourceVersion {
		t.Fatal("the Secret was rewritten with nothing due")
	}

	// Two replicas load it and serve; the aggregator's handshake completes with either.
	for range 2 {
		l := &admincert.Loader{Reader: k8s, Secret: k.Secret, Log: logr.Discard()}
		addr := serve(t, l)
		if err := dial(addr, bundle, service+"."+ns+".svc", clock.Now); err == nil {
			t.Fatal("a handshake completed before the certificate was loaded")
		}
		if err := l.Load(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := dial(addr, bundle, service+"."+ns+".svc", clock.Now); err != nil {
			t.Fatalf("TLS to the admin listener as %s.%s.svc with the APIService's caBundle: %v", service, ns, err)
		}
		// The certificate, and the CA (by its name constraints), are for this Service only.
		if err := dial(addr, bundle, "kubernetes.default.svc", clock.Now); err == nil {
			t.Fatal("the certificate verified for another Service's name")
		}
	}
}

// A Secret that does not parse is left as it is, and the caBundle is not touched.
func TestKeeperLeavesABrokenSecret(t *testing.T) {
	ns, apiService := setUp(t, "broken.admincert.test")
	k := keeper(ns, apiService, testclock.New(time.Now()))
	broken := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: k.Secret.Name, Namespace: ns},
		Data: map[string][]byte{admincert.CertKey: []byte("not a certificate")}}
	if err := k8s.Create(t.Context(), broken); err != nil {
		t.Fatal(err)
	}
	if err := k.Step(t.Context()); err == nil {
		t.Fatal("a Secret that does not parse was accepted")
	}
	if sec := readSecret(t, k); sec.ResourceVersion != broken.ResourceVersion {
		t.Fatal("the broken Secret was rewritten")
	}
	if b := caBundle(t, apiService); len(b) != 0 {
		t.Fatalf("caBundle written from a broken Secret: %q", b)
	}
}

// Renewal: a new CA and certificate are announced in the caBundle first; replicas serve the
// new certificate only after the APIService trusts it, and the old CA stays trusted until the
// old certificate expires, so no handshake fails on any replica across the switch.
func TestRenewalPublishesTheCABeforeServing(t *testing.T) {
	ns, apiService := setUp(t, "renew.admincert.test")
	clock := testclock.New(time.Now())
	k := keeper(ns, apiService, clock)
	step := func() {
		t.Helper()
		if err := k.Step(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	step()
	first := readSecret(t, k)
	l := &admincert.Loader{Reader: k8s, Secret: k.Secret, Log: logr.Discard()}
	addr := serve(t, l)
	name := service + "." + ns + ".svc"

	// Due for renewal.
	clock.Advance(admincert.DefaultValidity - admincert.DefaultRenewBefore + time.Hour)
	step()
	announced := readSecret(t, k)
	if !bytes.Equal(announced.Data[admincert.CertKey], first.Data[admincert.CertKey]) || len(announced.Data[admincert.NextCertKey]) == 0 {
		t.Fatal("the renewed certificate serves before it was announced")
	}
	bundle := caBundle(t, apiService)
	if !bytes.Equal(bundle, announced.Data[admincert.BundleKey]) || bytes.Equal(bundle, first.Data[admincert.BundleKey]) {
		t.Fatal("the caBundle does not carry the new CA")
	}
	// Announced for less than the announce time: still the old certificate.
	step()
	if sec := readSecret(t, k); !bytes.Equal(sec.Data[admincert.CertKey], first.Data[admincert.CertKey]) {
		t.Fatal("the renewed certificate serves before the announce time passed")
	}
	clock.Advance(admincert.DefaultAnnounce + 2*time.Minute)
	step()
	renewed := readSecret(t, k)
	if !bytes.Equal(renewed.Data[admincert.CertKey], announced.Data[admincert.NextCertKey]) || len(renewed.Data[admincert.NextCertKey]) != 0 {
		t.Fatal("the announced certificate did not take over")
	}
	// A replica still serving the old certificate and one serving the new are both trusted
	// by the bundle the kube-apiserver holds.
	bundle = caBundle(t, apiService)
	if err := l.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := dial(addr, bundle, name, clock.Now); err != nil {
		t.Fatalf("the new certificate against the published bundle: %v", err)
	}
	old := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: ns}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{admincert.CertKey: first.Data[admincert.CertKey], admincert.KeyKey: first.Data[admincert.KeyKey]}}
	if err := k8s.Create(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	stale := &admincert.Loader{Reader: k8s, Secret: client.ObjectKeyFromObject(old), Log: logr.Discard()}
	if err := stale.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := dial(serve(t, stale), bundle, name, clock.Now); err != nil {
		t.Fatalf("a replica not yet reloaded fails against the published bundle: %v", err)
	}

	// Once the old certificate has expired its CA leaves the bundle.
	clock.Advance(admincert.DefaultRenewBefore)
	step()
	if b := caBundle(t, apiService); bytes.Equal(b, bundle) || len(b) == 0 {
		t.Fatal("the expired CA stayed in the caBundle")
	}
}

// Without the APIService (deleted, or not applied yet) nothing can carry the new CA to the
// kube-apiserver, so the announced certificate never takes over.
func TestRenewalWaitsForTheAPIService(t *testing.T) {
	ns, apiService := setUp(t, "wait.admincert.test")
	clock := testclock.New(time.Now())
	k := keeper(ns, apiService, clock)
	if err := k.Step(t.Context()); err != nil {
		t.Fatal(err)
	}
	first := readSecret(t, k)
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("apiregistration.k8s.io/v1")
	u.SetKind("APIService")
	u.SetName(apiService)
	if err := k8s.Delete(t.Context(), u); err != nil {
		t.Fatal(err)
	}
	clock.Advance(admincert.DefaultValidity - admincert.DefaultRenewBefore + time.Hour)
	for range 2 {
		if err := k.Step(t.Context()); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Hour)
	}
	if sec := readSecret(t, k); !bytes.Equal(sec.Data[admincert.CertKey], first.Data[admincert.CertKey]) {
		t.Fatal("the renewed certificate serves though no APIService trusts its CA")
	}
}

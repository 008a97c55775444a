//go:build !latchkey_local

package controllers

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
)

func workloadClient(namespace, name string, sa *v1alpha1.ServiceAccountReference) *v1alpha1.OAuthClient {
	oc := newClient(namespace, name, v1alpha1.ProjectReference{Namespace: namespace, Name: "proj"})
	oc.Spec.RedirectURIs = nil
	oc.Spec.GrantTypes = []v1alpha1.GrantType{v1alpha1.GrantClientCredentials}
	oc.Spec.TokenEndpointAuthMethod = v1alpha1.AuthWorkloadIdentity
	oc.Spec.WorkloadIdentity = &v1alpha1.WorkloadIdentity{ServiceAccount: sa}
	return oc
}

// TestWorkloadIdentityClientHasNoSecret: a client that authenticates as a ServiceAccount is
// served with that ServiceAccount compiled in, no secret, and no credentials Secret written.
func TestWorkloadIdentityClientHasNoSecret(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	newProject(t, ns, "proj", nil)
	oc := workloadClient(ns, "agent", &v1alpha1.ServiceAccountReference{Name: "repo-helper"})
	oc.Spec.ClientID = "lkc_wid-agent"
	create(t, oc)
	cond := waitReady(t, oc)
	if !strings.Contains(cond.Message, "ServiceAccount "+ns+"/repo-helper") {
		t.Errorf("Ready message %q does not say how the client authenticates", cond.Message)
	}
	if err := get(oc); err != nil {
		t.Fatal(err)
	}
	if oc.Status.SecretName != "" {
		t.Errorf("status.secretName %q for a client with no secret", oc.Status.SecretName)
	}
	if err := get(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent-credentials"}}); !apierrors.IsNotFound(err) {
		t.Errorf("a credentials Secret was written (or could not be read): %v", err)
	}
	waitSnapshot(t, "the workload compiled, no secret", func(s *config.Snapshot) error {
		c := inProject(s, ns+"/proj").Clients["lkc_wid-agent"]
		switch {
		case c == nil:
			return errors.New("not compiled")
		case c.Workload == nil || c.Workload.ServiceAccountSubject() != "system:serviceaccount:"+ns+":repo-helper":
			return fmt.Errorf("workload %+v", c.Workload)
		case len(c.SecretHash) != 0 || c.TokenEndpointAuthMethod != "workload_identity":
			return fmt.Errorf("secret hash %x, method %q", c.SecretHash, c.TokenEndpointAuthMethod)
		}
		return nil
	})
}

// TestWorkloadIdentityCRDRules: the API server refuses a workload identity beside a secret, or
// without its method, or naming neither or both kinds.
func TestWorkloadIdentityCRDRules(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	sa := &v1alpha1.ServiceAccountReference{Name: "repo-helper"}
	for name, mut := range map[string]func(*v1alpha1.OAuthClient){
		"with secretName": func(oc *v1alpha1.OAuthClient) { oc.Spec.SecretName = "agent-creds" },
		"with clientSecretRef": func(oc *v1alpha1.OAuthClient) {
			oc.Spec.ClientSecretRef = &v1alpha1.SecretKeyReference{Name: "s", Key: "k"}
		},
		"with another method": func(oc *v1alpha1.OAuthClient) { oc.Spec.TokenEndpointAuthMethod = v1alpha1.AuthClientSecretBasic },
		"method without it":   func(oc *v1alpha1.OAuthClient) { oc.Spec.WorkloadIdentity = nil },
		"neither kind":        func(oc *v1alpha1.OAuthClient) { oc.Spec.WorkloadIdentity.ServiceAccount = nil },
		"SPIFFE ID, no bundle": func(oc *v1alpha1.OAuthClient) {
			oc.Spec.WorkloadIdentity = &v1alpha1.WorkloadIdentity{SPIFFEID: "spiffe://example.org/a"}
		},
		"both kinds": func(oc *v1alpha1.OAuthClient) {
			oc.Spec.WorkloadIdentity.SPIFFEID = "spiffe://example.org/a"
			oc.Spec.WorkloadIdentity.TrustBundle = &v1alpha1.SPIFFETrustBundle{ConfigMapRef: &v1alpha1.ConfigMapKeyReference{Name: "b", Key: "bundle.json"}}
		},
		"bundle endpoint over http": func(oc *v1alpha1.OAuthClient) {
			oc.Spec.WorkloadIdentity = &v1alpha1.WorkloadIdentity{SPIFFEID: "spiffe://example.org/a",
				TrustBundle: &v1alpha1.SPIFFETrustBundle{EndpointURL: "http://spire.example.org/bundle"}}
		},
		"bundle endpoint and ConfigMap": func(oc *v1alpha1.OAuthClient) {
			oc.Spec.WorkloadIdentity = &v1alpha1.WorkloadIdentity{SPIFFEID: "spiffe://example.org/a",
				TrustBundle: &v1alpha1.SPIFFETrustBundle{EndpointURL: "https://spire.example.org/bundle",
					ConfigMapRef: &v1alpha1.ConfigMapKeyReference{Name: "b", Key: "bundle.json"}}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			oc := workloadClient(ns, "c-"+randomSuffix(), sa)
			mut(oc)
			if err := k8s.Create(context.Background(), oc); !apierrors.IsInvalid(err) {
				t.Errorf("want Invalid, got %v", err)
			}
		})
	}
}

// TestTenantCannotNameAnotherNamespacesServiceAccount plays the tenant in the next namespace:
// its OAuthClient names a ServiceAccount of a namespace the Project does not admit, to make
// that team's pods (or whoever can mint their tokens) its client. The client is not served and
// says why; once the Project admits that namespace, it is.
func TestTenantCannotNameAnotherNamespacesServiceAccount(t *testing.T) {
	needEnv(t)
	home := newNamespace(t, nil)
	tenants := map[string]string{"latchkey-test/tenant": "yes"}
	next := newNamespace(t, tenants)
	other := newNamespace(t, nil)
	newProject(t, home, "proj", &v1alpha1.AllowedNamespaces{From: v1alpha1.NamespacesFromSelector,
		Selector: &metav1.LabelSelector{MatchLabels: tenants}})
	oc := workloadClient(next, "agent", &v1alpha1.ServiceAccountReference{Namespace: other, Name: "payments"})
	oc.Spec.ProjectRef = v1alpha1.ProjectReference{Namespace: home, Name: "proj"}
	oc.Spec.ClientID = "lkc_next-agent"
	create(t, oc)
	cond := waitNotReady(t, oc, v1alpha1.OAuthClientWorkloadNotAllowedReason)
	if !strings.Contains(cond.Message, other) {
		t.Errorf("message %q does not name the namespace", cond.Message)
	}
	waitSnapshot(t, "not served", func(s *config.Snapshot) error {
		if inProject(s, home+"/proj").Clients["lkc_next-agent"] != nil {
			return errors.New("compiled")
		}
		return nil
	})
	update(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}}, func(n *corev1.Namespace) { n.Labels = tenants })
	waitReady(t, oc)
	waitSnapshot(t, "served once admitted", func(s *config.Snapshot) error {
		c := inProject(s, home+"/proj").Clients["lkc_next-agent"]
		if c == nil || c.Workload.ServiceAccountNamespace != other {
			return errors.New("not compiled with the other namespace's ServiceAccount")
		}
		return nil
	})
	update(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}}, func(n *corev1.Namespace) { n.Labels = nil })
	waitNotReady(t, oc, v1alpha1.OAuthClientWorkloadNotAllowedReason)
}

// spiffeBundleJSON is a SPIFFE bundle with one JWT-SVID key.
func spiffeBundleJSON(t *testing.T, use string) string {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(map[string]any{"keys": []jose.JSONWebKey{{Key: key.Public(), KeyID: "k1", Use: use}}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSPIFFETrustBundleFromConfigMap: the bundle comes only from a ConfigMap of the client's
// namespace that opted in; until then (and for a bundle without a JWT-SVID key) the client is
// not served; the client follows the ConfigMap.
func TestSPIFFETrustBundleFromConfigMap(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	newProject(t, ns, "proj", nil)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "trust"},
		Data: map[string]string{"bundle.json": spiffeBundleJSON(t, "jwt-svid")}}
	create(t, cm)
	oc := workloadClient(ns, "agent", nil)
	oc.Spec.ClientID = "lkc_spiffe-agent"
	oc.Spec.WorkloadIdentity = &v1alpha1.WorkloadIdentity{SPIFFEID: "spiffe://example.org/agent",
		TrustBundle: &v1alpha1.SPIFFETrustBundle{ConfigMapRef: &v1alpha1.ConfigMapKeyReference{Name: "trust", Key: "bundle.json"}}}
	create(t, oc)
	waitNotReady(t, oc, v1alpha1.OAuthClientTrustBundleMissingReason)

	update(t, cm, func(c *corev1.ConfigMap) {
		c.Labels = map[string]string{v1alpha1.SecretUseLabel: v1alpha1.ConfigMapUseSPIFFEBundle}
	})
	waitReady(t, oc)
	waitSnapshot(t, "the bundle compiled", func(s *config.Snapshot) error {
		c := inProject(s, ns+"/proj").Clients["lkc_spiffe-agent"]
		if c == nil || c.Workload.SPIFFEID != "spiffe://example.org/agent" || !c.Workload.SPIFFEBundle.HasJWTAuthority("k1") ||
			c.Workload.SPIFFEBundle.TrustDomain().Name() != "example.org" {
			return errors.New("not compiled with the bundle")
		}
		return nil
	})

	update(t, cm, func(c *corev1.ConfigMap) { c.Data["bundle.json"] = spiffeBundleJSON(t, "x509-svid-without-cert") })
	waitNotReady(t, oc, v1alpha1.OAuthClientTrustBundleInvalidReason)

	update(t, cm, func(c *corev1.ConfigMap) {
		c.Data["bundle.json"] = spiffeBundleJSON(t, "jwt-svid")
		c.Labels = nil
	})
	waitNotReady(t, oc, v1alpha1.OAuthClientTrustBundleMissingReason)
}

// The SPIFFE bundle endpoints of the run: one TLS server (suite_test.go) whose paths tests
// register, and the fetcher's clock, which tests move to make a refresh due.
var (
	bundleServer    *httptest.Server
	bundleEndpoints endpointMux
	bundleClock     = &shiftClock{}
)

type endpointMux struct{ paths sync.Map }

func (m *endpointMux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h, ok := m.paths.Load(r.URL.Path)
	if !ok {
		http.NotFound(w, r)
		return
	}
	h.(http.Handler).ServeHTTP(w, r)
}

type shiftClock struct{ offset atomic.Int64 }

func (c *shiftClock) Now() time.Time      { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *shiftClock) add(d time.Duration) { c.offset.Add(int64(d)) }

// fakeBundleEndpoint serves a trust domain's bundle (https_web: a JWKS with
// spiffe_refresh_hint) at a path of its own, with the key id and body the test sets.
type fakeBundleEndpoint struct {
	url     string
	mu      sync.Mutex
	body    string
	fetches atomic.Int32
}

func newBundleEndpoint(t *testing.T, kid string) *fakeBundleEndpoint {
	t.Helper()
	e := &fakeBundleEndpoint{url: bundleServer.URL + "/" + randomSuffix() + "/bundle"}
	e.serveKey(t, kid)
	path := strings.TrimPrefix(e.url, bundleServer.URL)
	bundleEndpoints.paths.Store(path, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		e.fetches.Add(1)
		e.mu.Lock()
		defer e.mu.Unlock()
		fmt.Fprint(w, e.body)
	}))
	t.Cleanup(func() { bundleEndpoints.paths.Delete(path) })
	return e
}

func (e *fakeBundleEndpoint) serve(body string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.body = body
}

func (e *fakeBundleEndpoint) serveKey(t *testing.T, kid string) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(map[string]any{"spiffe_refresh_hint": 300,
		"keys": []jose.JSONWebKey{{Key: key.Public(), KeyID: kid, Use: "jwt-svid"}}})
	if err != nil {
		t.Fatal(err)
	}
	e.serve(string(b))
}

// refresh makes the endpoint due and waits until the compiler fetched it again.
func (e *fakeBundleEndpoint) refresh(t *testing.T) {
	t.Helper()
	before := e.fetches.Load()
	bundleClock.add(5 * time.Minute)
	eventually(t, "the bundle endpoint fetched again", func() error {
		compiler.Kick()
		if e.fetches.Load() == before {
			return errors.New("not fetched")
		}
		return nil
	})
}

func endpointClient(ns, name, clientID, url string) *v1alpha1.OAuthClient {
	oc := workloadClient(ns, name, nil)
	oc.Spec.ClientID = v1alpha1.ClientID(clientID)
	oc.Spec.WorkloadIdentity = &v1alpha1.WorkloadIdentity{SPIFFEID: "spiffe://example.org/agent",
		TrustBundle: &v1alpha1.SPIFFETrustBundle{EndpointURL: url}}
	return oc
}

// bundleKeys waits for the compiled bundle of clientID to hold exactly kid.
func bundleKeys(t *testing.T, project, clientID, kid string) {
	t.Helper()
	waitSnapshot(t, clientID+" compiled with key "+kid, func(s *config.Snapshot) error {
		c := inProject(s, project).Clients[clientID]
		if c == nil || c.Workload == nil || c.Workload.SPIFFEBundle == nil {
			return errors.New("not compiled with a bundle")
		}
		if got := slices.Collect(maps.Keys(c.Workload.SPIFFEBundle.JWTAuthorities())); len(got) != 1 || got[0] != kid {
			return fmt.Errorf("keys %v", got)
		}
		return nil
	})
}

// TestSPIFFETrustBundleFromEndpoint: a bundle endpoint's keys are compiled; when the trust
// domain rotates its key, the refresh replaces the old key (its JWT-SVIDs are then refused,
// internal/workload's TestBundleEndpointRotation); a refresh that answers a malformed bundle
// keeps the last good one and reports the client Degraded (TrustBundleStale).
func TestSPIFFETrustBundleFromEndpoint(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	newProject(t, ns, "proj", nil)
	e := newBundleEndpoint(t, "k1")
	oc := endpointClient(ns, "agent", "lkc_endpoint-agent", e.url)
	create(t, oc)
	waitReady(t, oc)
	bundleKeys(t, ns+"/proj", "lkc_endpoint-agent", "k1")

	e.serveKey(t, "k2")
	e.refresh(t)
	bundleKeys(t, ns+"/proj", "lkc_endpoint-agent", "k2")

	e.serve(`{"keys": [`)
	e.refresh(t)
	bundleKeys(t, ns+"/proj", "lkc_endpoint-agent", "k2")
	// The reconciler looks again when the endpoint is due; a spec change makes it look now.
	update(t, oc, func(c *v1alpha1.OAuthClient) { c.Spec.DisplayName = "agent, bundle refreshed" })
	cond := waitDegraded(t, oc, v1alpha1.OAuthClientTrustBundleStaleReason)
	if !strings.Contains(cond.Message, e.url) || !strings.Contains(cond.Message, "serving with the bundle fetched at") {
		t.Errorf("Degraded message %q", cond.Message)
	}
}

// TestSPIFFETrustBundleEndpointGuarded: a bundle endpoint on an address the guard never dials
// (the cloud metadata service's link-local range), or a private one the Project does not
// admit, is not fetched, and the client is not served.
func TestSPIFFETrustBundleEndpointGuarded(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	newProject(t, ns, "proj", nil)
	for i, url := range []string{"https://169.254.169.254/bundle", "https://10.0.0.1/bundle"} {
		oc := endpointClient(ns, fmt.Sprintf("agent-%d", i), fmt.Sprintf("lkc_guarded-%d", i), url)
		create(t, oc)
		cond := waitNotReady(t, oc, v1alpha1.OAuthClientTrustBundleMissingReason)
		if !strings.Contains(cond.Message, "does not resolve to a public address") {
			t.Errorf("%s: Ready message %q", url, cond.Message)
		}
	}
}

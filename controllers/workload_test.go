package controllers

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

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

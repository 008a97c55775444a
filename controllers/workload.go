package controllers

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"fmt"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
)

// maxBundleBytes bounds a SPIFFE trust bundle read from a ConfigMap (the cache keeps at most
// this much of each key of an opted-in ConfigMap, and one byte more to tell it was longer).
const maxBundleBytes = 64 << 10

// isWorkload reports whether the client proves itself with a workload identity, and so has no
// secret and no credentials Secret.
func isWorkload(oc *v1alpha1.OAuthClient) bool { return oc.Spec.WorkloadIdentity != nil }

// clientWorkload compiles spec.workloadIdentity. A ServiceAccount in another namespace must be
// in one the Project admits: naming it makes that namespace's pods this client's credential
// holders, which only the Project's administrator may allow. A SPIFFE trust bundle comes from
// a ConfigMap of the client's own namespace that opted in (v1alpha1.ConfigMapUseSPIFFEBundle).
func (r *resolver) clientWorkload(ctx context.Context, oc *v1alpha1.OAuthClient, project *v1alpha1.Project) (*config.Workload, error) {
	wi := oc.Spec.WorkloadIdentity
	if wi == nil {
		return nil, nil
	}
	if sa := wi.ServiceAccount; sa != nil {
		ns := cmp.Or(sa.Namespace, oc.Namespace)
		if ns != oc.Namespace {
			ok, why, err := r.admits(ctx, project, ns)
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, notReadyf(v1alpha1.OAuthClientWorkloadNotAllowedReason,
					"spec.workloadIdentity.serviceAccount is in namespace %q, which Project %s/%s does not admit: %s",
					ns, project.Namespace, project.Name, why)
			}
		}
		return &config.Workload{ServiceAccountNamespace: ns, ServiceAccountName: sa.Name}, nil
	}
	id, err := spiffeid.FromString(wi.SPIFFEID)
	if err != nil {
		return nil, notReadyf(v1alpha1.OAuthClientTrustBundleInvalidReason, "spec.workloadIdentity.spiffeID: %v", err)
	}
	raw, err := r.spiffeBundle(ctx, oc)
	if err != nil {
		return nil, err
	}
	b, err := spiffebundle.Parse(id.TrustDomain(), raw)
	if err != nil {
		return nil, notReadyf(v1alpha1.OAuthClientTrustBundleInvalidReason, "spec.workloadIdentity.trustBundle: %v", err)
	}
	jb := b.JWTBundle()
	if len(jb.JWTAuthorities()) == 0 {
		return nil, notReadyf(v1alpha1.OAuthClientTrustBundleInvalidReason,
			"spec.workloadIdentity.trustBundle holds no JWT-SVID key (a key with \"use\": \"jwt-svid\")")
	}
	for kid, k := range jb.JWTAuthorities() {
		switch pub := k.(type) {
		case *ecdsa.PublicKey, ed25519.PublicKey:
		case *rsa.PublicKey:
			if pub.N.BitLen() < 2048 {
				return nil, notReadyf(v1alpha1.OAuthClientTrustBundleInvalidReason, "spec.workloadIdentity.trustBundle: key %q is RSA of fewer than 2048 bits", kid)
			}
		default:
			// A private key published as a trust anchor has leaked; refuse the bundle whole.
			return nil, notReadyf(v1alpha1.OAuthClientTrustBundleInvalidReason, "spec.workloadIdentity.trustBundle: key %q is not a public EC, RSA or Ed25519 key", kid)
		}
	}
	return &config.Workload{SPIFFEID: id.String(), SPIFFEBundle: jb}, nil
}

// spiffeBundle reads the bundle of spec.workloadIdentity.trustBundle.configMapRef. A ConfigMap
// that has not opted in reads as a missing one, so a tenant cannot learn what another team's
// ConfigMaps hold by pointing at them.
func (r *resolver) spiffeBundle(ctx context.Context, oc *v1alpha1.OAuthClient) ([]byte, error) {
	tb := oc.Spec.WorkloadIdentity.TrustBundle
	if tb == nil || tb.ConfigMapRef == nil {
		return nil, notReadyf(v1alpha1.OAuthClientTrustBundleMissingReason, "spec.workloadIdentity.trustBundle names no ConfigMap")
	}
	ref := tb.ConfigMapRef
	missing := notReadyf(v1alpha1.OAuthClientTrustBundleMissingReason,
		"ConfigMap %s/%s (spec.workloadIdentity.trustBundle.configMapRef) with label %s=%s and key %q not found",
		oc.Namespace, ref.Name, v1alpha1.SecretUseLabel, v1alpha1.ConfigMapUseSPIFFEBundle, ref.Key)
	cm, err := r.configMap(ctx, oc.Namespace, ref.Name)
	if err != nil {
		return nil, err
	}
	if cm == nil || cm.Labels[v1alpha1.SecretUseLabel] != v1alpha1.ConfigMapUseSPIFFEBundle {
		return nil, missing
	}
	v, ok := cm.Data[ref.Key]
	if !ok {
		b, ok := cm.BinaryData[ref.Key]
		if !ok {
			return nil, missing
		}
		v = string(b)
	}
	if len(v) > maxBundleBytes {
		return nil, notReadyf(v1alpha1.OAuthClientTrustBundleInvalidReason, "ConfigMap %s/%s key %q is larger than %d bytes", oc.Namespace, ref.Name, ref.Key, maxBundleBytes)
	}
	return []byte(v), nil
}

// workloadWhere says in the Ready condition's message how the client proves itself.
func workloadWhere(w *config.Workload) string {
	if w.SPIFFEID != "" {
		return "authenticates with JWT-SVIDs of " + w.SPIFFEID + "; no secret"
	}
	return fmt.Sprintf("authenticates with tokens of ServiceAccount %s/%s; no secret", w.ServiceAccountNamespace, w.ServiceAccountName)
}

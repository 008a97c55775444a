package controllers

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"k8s.io/apimachinery/pkg/types"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/workload"
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
// a ConfigMap of the client's own namespace that opted in (v1alpha1.ConfigMapUseSPIFFEBundle),
// or from the trust domain's bundle endpoint.
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
	if url := wiEndpoint(wi); url != "" {
		return r.endpointBundle(ctx, oc, id, url, project)
	}
	raw, err := r.spiffeBundle(ctx, oc)
	if err != nil {
		return nil, err
	}
	jb, _, err := workload.ParseBundle(id.TrustDomain(), raw)
	if err != nil {
		return nil, notReadyf(v1alpha1.OAuthClientTrustBundleInvalidReason, "spec.workloadIdentity.trustBundle: %v", err)
	}
	return &config.Workload{SPIFFEID: id.String(), SPIFFEBundle: jb}, nil
}

// wiEndpoint is the bundle endpoint's URL; "" when the bundle comes from a ConfigMap.
func wiEndpoint(wi *v1alpha1.WorkloadIdentity) string {
	if wi.TrustBundle == nil {
		return ""
	}
	return wi.TrustBundle.EndpointURL
}

// endpointBundle compiles the bundle of spec.workloadIdentity.trustBundle.endpointURL, fetched
// here (the compiler and the reconcilers; handlers never fetch) through the address guard with
// the Project's allowed networks. A refresh that fails keeps the last good bundle, which the
// reconciler reports as Degraded (r.staleBundles); without one the client is not served.
func (r *resolver) endpointBundle(ctx context.Context, oc *v1alpha1.OAuthClient, id spiffeid.ID, url string, project *v1alpha1.Project) (*config.Workload, error) {
	if r.bundles == nil {
		return nil, notReadyf(v1alpha1.OAuthClientTrustBundleMissingReason,
			"spec.workloadIdentity.trustBundle.endpointURL is fetched only by Latchkey running in a cluster; publish the bundle in a ConfigMap")
	}
	st := r.bundles.Get(ctx, url, id.TrustDomain(), allowedNetworks(project))
	key := types.NamespacedName{Namespace: oc.Namespace, Name: oc.Name}
	r.bundleNext[key] = st.Next
	if st.Bundle == nil {
		return nil, notReadyf(v1alpha1.OAuthClientTrustBundleMissingReason, "bundle endpoint %s: %v", url, st.Err)
	}
	if st.Err != nil {
		r.staleBundles[key] = notReadyf(v1alpha1.OAuthClientTrustBundleStaleReason,
			"bundle endpoint %s: %v; serving with the bundle fetched at %s until %s",
			url, st.Err, st.Fetched.UTC().Format(time.RFC3339), st.Fetched.Add(workload.MaxStale).UTC().Format(time.RFC3339))
	}
	return &config.Workload{SPIFFEID: id.String(), SPIFFEBundle: st.Bundle}, nil
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

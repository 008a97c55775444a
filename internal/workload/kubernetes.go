package workload

import (
	"context"
	"time"

	"latchkey.dev/latchkey/internal/config"
)

// Review is what the cluster said of a ServiceAccount token.
type Review struct {
	Authenticated bool
	// Username is "system:serviceaccount:NAMESPACE:NAME"; UID the ServiceAccount's uid.
	Username, UID string
	// Audiences are those of the asked-for audiences the token is valid for.
	Audiences []string
	// Extra carries what the token is bound to: the pod's name and uid
	// (authentication.kubernetes.io/pod-name, pod-uid).
	Extra map[string][]string
	// Error is the cluster's reason for refusing, for the log only.
	Error string
}

// Reviewer asks the cluster whether a ServiceAccount token is valid for audience now: signed by
// the cluster's service-account issuer, within its times, and its ServiceAccount (and the pod
// or Secret it is bound to) still the object it was issued for (same uid). It is the one way
// the HTTP server learns of a ServiceAccount; cmd/latchkey provides it in a cluster (package
// tokenreview), and in none there is no Reviewer.
type Reviewer interface {
	Review(ctx context.Context, token, audience string) (Review, error)
}

// Keys of TokenReview's user extra for a token bound to a pod.
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

// VerifyServiceAccount verifies raw as a token of w's ServiceAccount for audience. What needs
// no key is checked first, on the injected clock, so that a token for another audience,
// another ServiceAccount, without exp or expired costs the cluster no request; then the cluster
// reviews it (signature, times, and that the ServiceAccount and its bound pod still exist with
// the uids the token names), and its answer must name the same ServiceAccount and audience.
func VerifyServiceAccount(ctx context.Context, rv Reviewer, raw string, w *config.Workload, audience string, now time.Time) (*Identity, error) {
	want := w.ServiceAccountSubject()
	if want == "" {
		return nil, refused("not_service_account", "the client has no ServiceAccount")
	}
	c, err := unverified(raw)
	if err != nil {
		return nil, err
	}
	if err := checkAudience(c.Audience, audience); err != nil {
		return nil, err
	}
	if err := checkTimes(c, now); err != nil {
		return nil, err
	}
	if c.Subject != want {
		return nil, refused("wrong_workload", "the token is for %q, not %q", c.Subject, want)
	}
	if rv == nil {
		return nil, ErrUnavailable
	}
	rev, err := rv.Review(ctx, raw, audience)
	if err != nil {
		return nil, err
	}
	if !rev.Authenticated {
		return nil, refused("cluster_refused", "the cluster refused the token: %s", rev.Error)
	}
	if rev.Username != want || rev.UID == "" {
		return nil, refused("wrong_workload", "the cluster says the token is for %q, not %q", rev.Username, want)
	}
	if !sameAudiences(rev.Audiences, audience) {
		return nil, refused("wrong_audience", "the cluster did not confirm audience %q", audience)
	}
	id := &Identity{Kind: KindServiceAccount, Subject: want, Issuer: c.Issuer, ServiceAccountUID: rev.UID, Expiry: c.Expiry.Time()}
	if v := rev.Extra[extraPodName]; len(v) == 1 {
		id.PodName = v[0]
	}
	if v := rev.Extra[extraPodUID]; len(v) == 1 {
		id.PodUID = v[0]
	}
	return id, nil
}

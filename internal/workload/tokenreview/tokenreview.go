// Package tokenreview asks the cluster whether a workload's ServiceAccount token is valid
// (TokenReview): the one part of workload identity that calls the Kubernetes API, apart from
// package workload so a build without a cluster links no Kubernetes client
// (docs/decisions/0085).
package tokenreview

import (
	"context"
	"fmt"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"

	"latchkey.dev/latchkey/internal/workload"
)

// Reviewer is a workload.Reviewer over the authentication.k8s.io/v1 TokenReview API; the server's
// ServiceAccount needs create on tokenreviews.
type Reviewer struct {
	Client authnclient.TokenReviewsGetter
	// Timeout bounds one review; DefaultReviewTimeout when zero.
	Timeout time.Duration
}

// DefaultReviewTimeout bounds a TokenReview: an authentication waits for it.
const DefaultReviewTimeout = 5 * time.Second

// Review implements workload.Reviewer.
func (t *Reviewer) Review(ctx context.Context, token, audience string) (workload.Review, error) {
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = DefaultReviewTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tr, err := t.Client.TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return workload.Review{}, fmt.Errorf("asking the cluster to review a ServiceAccount token: %w", err)
	}
	out := workload.Review{
		Authenticated: tr.Status.Authenticated,
		Username:      tr.Status.User.Username,
		UID:           tr.Status.User.UID,
		Audiences:     tr.Status.Audiences,
		Error:         tr.Status.Error,
		Extra:         map[string][]string{},
	}
	for k, v := range tr.Status.User.Extra {
		out.Extra[k] = v
	}
	return out, nil
}

var _ workload.Reviewer = (*Reviewer)(nil)

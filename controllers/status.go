package controllers

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"latchkey.dev/latchkey/api/v1alpha1"
)

// base is what every reconciler shares.
type base struct {
	client    client.Client
	recorder  recorder.EventRecorder
	publicURL string
	clock     func() time.Time
	// projects is shared by every reconciler: see projectMemo.
	projects *projectMemo
	// quietFirstReady skips the Normal Event when an object turns Ready for the first time; it
	// still records one when an object recovers. Set for OAuthClients: a GitOps sync of ten
	// thousand clients would otherwise write ten thousand Events that say what status already
	// says, and the recorder keeps each in memory for its series for minutes.
	quietFirstReady bool
}

func (b *base) resolver() *resolver {
	r := newResolver(b.client, b.publicURL)
	r.memo = b.projects
	return r
}

// maxMessage keeps condition messages readable; the API allows 32 KiB.
const maxMessage = 1024

func truncate(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	return s[:maxMessage-3] + "..."
}

// setReady sets the Ready condition from a resolve result: True with readyMessage when err is
// nil, otherwise False with the notReady's reason and message.
func (b *base) setReady(conds *[]metav1.Condition, generation int64, err error, readyMessage string) {
	b.setCondition(conds, generation, v1alpha1.ReadyCondition, err, v1alpha1.ReadyReason, readyMessage)
}

func (b *base) setCondition(conds *[]metav1.Condition, generation int64, typ string, err error, okReason, okMessage string) {
	c := metav1.Condition{
		Type:               typ,
		Status:             metav1.ConditionTrue,
		Reason:             okReason,
		Message:            truncate(okMessage),
		ObservedGeneration: generation,
		// SetStatusCondition keeps the old time unless the status flips.
		LastTransitionTime: metav1.NewTime(b.clock()),
	}
	if nr, ok := asNotReady(err); ok {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, nr.reason, truncate(nr.message)
	}
	meta.SetStatusCondition(conds, c)
}

// finish patches the status when it changed and records an Event when Ready changed: Warning
// when it became False (or False for a new reason), Normal when it became True (unless
// quietFirstReady and it had never been False). It is deferred
// by every Reconcile, so status is written once per reconcile at most.
func (b *base) finish(ctx context.Context, before, after client.Object, oldConds, newConds []metav1.Condition, changed bool) error {
	if !changed {
		return nil
	}
	if err := b.client.Status().Patch(ctx, after, client.MergeFrom(before)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	oldReady := meta.FindStatusCondition(oldConds, v1alpha1.ReadyCondition)
	newReady := meta.FindStatusCondition(newConds, v1alpha1.ReadyCondition)
	if newReady == nil {
		return nil
	}
	switch newReady.Status {
	case metav1.ConditionFalse:
		if oldReady == nil || oldReady.Status != metav1.ConditionFalse || oldReady.Reason != newReady.Reason {
			b.recorder.Eventf(after, nil, corev1.EventTypeWarning, newReady.Reason, "Reconcile", "%s", newReady.Message)
		}
	case metav1.ConditionTrue:
		recovered := oldReady != nil && oldReady.Status == metav1.ConditionFalse
		if (oldReady == nil || oldReady.Status != metav1.ConditionTrue) && (recovered || !b.quietFirstReady) {
			b.recorder.Eventf(after, nil, corev1.EventTypeNormal, newReady.Reason, "Reconcile", "%s", newReady.Message)
		}
	}
	return nil
}

// phase is one step of a reconcile. Phases run in order and stop at the first error, because
// later phases read what earlier ones found (the OAuthClient's Secret, for one).
type phase[S any] func(context.Context, S) (ctrl.Result, error)

func runPhases[S any](ctx context.Context, s S, phases ...phase[S]) (ctrl.Result, error) {
	var res ctrl.Result
	for _, p := range phases {
		r, err := p(ctx, s)
		if err != nil {
			return r, err
		}
		if r.RequeueAfter > 0 && (res.RequeueAfter == 0 || r.RequeueAfter < res.RequeueAfter) {
			res.RequeueAfter = r.RequeueAfter
		}
	}
	return res, nil
}

package controllers

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"latchkey.dev/latchkey/api/v1alpha1"
	lkkeys "latchkey.dev/latchkey/internal/keys"
	"latchkey.dev/latchkey/internal/workload"
)

// base is what every reconciler shares.
type base struct {
	// reader is what the phases read: the manager's cache, or a memReader.
	reader    Reader
	recorder  EventRecorder
	publicURL string
	clock     func() time.Time
	// projects is shared by every reconciler: see projectMemo.
	projects *projectMemo
	// quietFirstReady skips the Normal Event when an object turns Ready for the first time; it
	// still records one when an object recovers. Set for OAuthClients: a GitOps sync of ten
	// thousand clients would otherwise write ten thousand Events that say what status already
	// says, and the recorder keeps each in memory for its series for minutes.
	quietFirstReady bool
	// signing: Options.SigningKeys.
	signing *lkkeys.Signing
	// bundles: Options.SPIFFEBundles.
	bundles *workload.Bundles
	// audit receives policy.changed records (recordPolicyChange); nil writes none.
	audit Store
	// recorded remembers the generation last written per object UID, so a reconcile that
	// reads a cache not yet showing its own status write does not write the change again.
	recorded *sync.Map
}

func (b *base) resolver() *resolver {
	r := newResolver(b.reader, b.publicURL)
	r.memo = b.projects
	r.signing = b.signing
	r.bundles = b.bundles
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

// setDegraded sets the Degraded condition of an object that serves: True with the notReady's
// reason and message when err is one (something is off), otherwise False with CompleteReason.
// Ready stays True either way, because GitOps tools read Ready as "serving"
// (docs/decisions/0028).
func (b *base) setDegraded(conds *[]metav1.Condition, generation int64, err error, completeMessage string) {
	b.set(conds, generation, v1alpha1.DegradedCondition, metav1.ConditionFalse, err, v1alpha1.CompleteReason, completeMessage)
}

// setCondition sets a condition computed from the given generation of the object's spec.
func (b *base) setCondition(conds *[]metav1.Condition, generation int64, typ string, err error, okReason, okMessage string) {
	b.set(conds, generation, typ, metav1.ConditionTrue, err, okReason, okMessage)
}

// set writes condition typ: okStatus with okReason when err is nil, the opposite status with
// the reason and message of a notReady err otherwise (any other err leaves the ok values).
func (b *base) set(conds *[]metav1.Condition, generation int64, typ string, okStatus metav1.ConditionStatus, err error, okReason, okMessage string) {
	c := metav1.Condition{
		Type:               typ,
		Status:             okStatus,
		Reason:             okReason,
		Message:            truncate(okMessage),
		ObservedGeneration: generation,
		// SetStatusCondition keeps the old time unless the status flips.
		LastTransitionTime: metav1.NewTime(b.clock()),
	}
	if nr, ok := asNotReady(err); ok {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, nr.reason, truncate(nr.message)
		if okStatus == metav1.ConditionFalse {
			c.Status = metav1.ConditionTrue
		}
	}
	meta.SetStatusCondition(conds, c)
}

// ---------------------------------------------------------------------------------------------
// One reconcile, for every kind

// statusKind is what reconcileWith needs to know about one kind of object.
type statusKind[T Object] struct {
	// status points at the two status fields every Latchkey kind has.
	status func(T) statusFields
	// skipDeleting leaves an object that is being deleted alone, status included.
	skipDeleting bool
}

type statusFields struct {
	observedGeneration *int64
	conditions         *[]metav1.Condition
}

// phase is one step of a reconcile. Phases run in order and stop at the first error, because
// later phases read what earlier ones found (the OAuthClient's Secret, for one). A phase that
// returns an error sets no condition: a condition records the generation it was computed from,
// and a phase that failed computed nothing.
type phase[S any] func(context.Context, S) (Result, error)

func runPhases[S any](ctx context.Context, s S, phases ...phase[S]) (Result, error) {
	var res Result
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

// degradedEvent records a Warning when Degraded became True (or True for a new reason): a
// serving object losing a feature is worth an Event as much as one that stops serving. Its
// recovery shows in status; a Normal Event for it would repeat the Ready one on first sight.
func (b *base) degradedEvent(obj Object, oldDeg, newDeg *metav1.Condition) {
	if newDeg == nil || newDeg.Status != metav1.ConditionTrue {
		return
	}
	if oldDeg == nil || oldDeg.Status != metav1.ConditionTrue || oldDeg.Reason != newDeg.Reason {
		b.recorder.Eventf(obj, nil, corev1.EventTypeWarning, newDeg.Reason, "Reconcile", "%s", newDeg.Message)
	}
}

// readyEvent records an Event when Ready changed from oldReady to newReady: Warning when it
// became False (or False for a new reason), Normal when it became True (unless quietFirstReady
// and it had never been False).
func (b *base) readyEvent(obj Object, oldReady, newReady *metav1.Condition) {
	if newReady == nil {
		return
	}
	switch newReady.Status {
	case metav1.ConditionFalse:
		if oldReady == nil || oldReady.Status != metav1.ConditionFalse || oldReady.Reason != newReady.Reason {
			b.recorder.Eventf(obj, nil, corev1.EventTypeWarning, newReady.Reason, "Reconcile", "%s", newReady.Message)
		}
	case metav1.ConditionTrue:
		recovered := oldReady != nil && oldReady.Status == metav1.ConditionFalse
		if (oldReady == nil || oldReady.Status != metav1.ConditionTrue) && (recovered || !b.quietFirstReady) {
			b.recorder.Eventf(obj, nil, corev1.EventTypeNormal, newReady.Reason, "Reconcile", "%s", newReady.Message)
		}
	}
}

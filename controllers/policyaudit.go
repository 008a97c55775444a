package controllers

import (
	"context"
	"fmt"
	"strconv"

	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
)

// recordPolicyChange writes policy.changed to project's audit log when obj's spec changed
// since the controller last acted on it (a new generation; the first one included), so the
// audit trail and its sinks show when what a Project serves, or which apps its RedirectPolicies
// recognise, changed. It runs in the leader's reconciler, last, and remembers what it wrote, so
// each generation is written once; a new leader may write the latest one again (details carry
// the generation to tell). Who made the change is in the Kubernetes API server's audit
// log: the object does not say. A failed write fails the reconcile, which is retried, and
// observedGeneration waits for it.
func (b *base) recordPolicyChange(ctx context.Context, obj Object, kind, project string, observed int64, details map[string]string) error {
	if b.audit == nil || project == "" || obj.GetGeneration() == observed {
		return nil
	}
	if b.recorded != nil {
		if g, ok := b.recorded.Load(obj.GetUID()); ok && g.(int64) >= obj.GetGeneration() {
			return nil
		}
	}
	d := map[string]string{
		"kind": kind, "namespace": obj.GetNamespace(), "name": obj.GetName(),
		"generation": strconv.FormatInt(obj.GetGeneration(), 10), "previous_generation": strconv.FormatInt(observed, 10),
	}
	for k, v := range details {
		d[k] = v
	}
	err := b.audit.AppendAudit(ctx, store.AuditRecord{
		Project: project, Time: b.clock(), Actor: "system", Action: events.PolicyChanged,
		Target: kind + ":" + obj.GetNamespace() + "/" + obj.GetName(), Outcome: store.OutcomeSuccess, Details: d,
	})
	if err == nil && b.recorded != nil {
		b.recorded.Store(obj.GetUID(), obj.GetGeneration())
	}
	if err != nil {
		return fmt.Errorf("recording the change of %s %s/%s in the audit log: %w", kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

package controllers

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"latchkey.dev/latchkey/api/v1alpha1"
)

// A client id is unique within its Project (docs/decisions/0067). People's grants, an agent's
// permission to use a connection and every token are stored under the client id, so a second
// OAuthClient served under an id would be handed all of them, with its own redirect URIs. The
// oldest OAuthClient admitted to the Project that has the id, declared (spec.clientID) or
// derived, keeps it, by creation time, then namespace/name, so every replica and every restart
// agree; any other reports ClientIDConflict and is not compiled. The holder keeps the id
// whether or not it is Ready: a client that waits for its Secret must not lose its id, and its
// grants, to a newer one in the meantime. A client refused its id holds nothing.

// What is stored under an id outlives its OAuthClient, so the store also records the namespace
// that first held each id (store.ClientIDHolders): an OAuthClient of another namespace that
// declares it later is refused with ClientIDConflict even after the first one is gone, and
// finds nothing of what people gave it. The reconciler records the holder and only then sets
// status.clientID; the compiler serves a client only when its status.clientID is its id, so a
// client the store refuses is never served, not even between its creation and its first
// reconcile. Tenants cannot write status.

// clientIDHolders is the part of the store that records who holds each client id.
type clientIDHolders interface {
	HoldClientID(ctx context.Context, project, clientID, namespace string, now time.Time) (string, error)
}

// holdClientID sets status.clientID once the client's id is its own: the Project admits the
// namespace, no older OAuthClient has the id, and the store records this namespace as its
// holder. Otherwise status.clientID is left (the Project is not there or does not admit the
// namespace: the client resolves to that reason) or cleared (another holds the id).
func (r *clientPhases) holdClientID(ctx context.Context, s *clientScope) error {
	oc := s.oc
	pk := projectKeyOf(oc.Spec.ProjectRef, oc.Namespace).String()
	if _, _, err := s.res.attach(ctx, oc.Spec.ProjectRef, oc.Namespace); err != nil {
		if _, ok := asNotReady(err); ok {
			return nil // the client resolves to that reason; it holds nothing
		}
		return err
	}
	if err := s.res.clientIDFreeLive(ctx, oc, pk); err != nil {
		if _, ok := asNotReady(err); ok {
			oc.Status.ClientID = ""
		}
		return err
	}
	id := clientIDFor(oc)
	if r.holders != nil {
		holder, err := r.holders.HoldClientID(ctx, pk, id, oc.Namespace, r.clock())
		if err != nil {
			return fmt.Errorf("recording namespace %s as the holder of client id %s: %w", oc.Namespace, id, err)
		}
		if holder != oc.Namespace {
			oc.Status.ClientID = ""
			return notReadyf(v1alpha1.OAuthClientClientIDConflictReason,
				"client id %s of Project %s is held by namespace %q, where an OAuthClient had it first; what people gave that client is stored under it, so this client is not served: give it another spec.clientID (docs/decisions/0067)",
				id, pk, holder)
		}
	}
	oc.Status.ClientID = id
	return nil
}

// clientIDIndex indexes OAuthClients by "project clientID", so the OAuthClients of one Project
// that have one id are one indexed List.
const clientIDIndex = "clientID"

// clientIDIndexKey is an id's key in clientIDIndex. A space occurs in neither a Project key nor
// a client id.
func clientIDIndexKey(projectKey, id string) string { return projectKey + " " + id }

// clientIDIndexValue is oc's key in clientIDIndex.
func clientIDIndexValue(oc *v1alpha1.OAuthClient) string {
	return clientIDIndexKey(projectKeyOf(oc.Spec.ProjectRef, oc.Namespace).String(), clientIDFor(oc))
}

// clientIDFree returns notReady(ClientIDConflict) when oc may not be served under its client
// id: an older OAuthClient admitted to the Project has it, or status.clientID does not show it
// as oc's yet.
func (r *resolver) clientIDFree(ctx context.Context, oc *v1alpha1.OAuthClient, projectKey string) error {
	id := clientIDFor(oc)
	if oc.Status.ClientID != id {
		// The reconciler has not found the id this client's own yet (holdClientID), or found it
		// held by another namespace: not served until it has.
		if err := r.clientIDFreeLive(ctx, oc, projectKey); err != nil {
			return err
		}
		return notReadyf(v1alpha1.OAuthClientClientIDConflictReason,
			"client id %s is not yet recorded as this client's (status.clientID)", id)
	}
	return r.clientIDFreeLive(ctx, oc, projectKey)
}

// clientIDFreeLive returns notReady(ClientIDConflict) when an older OAuthClient admitted to the
// Project has oc's client id.
func (r *resolver) clientIDFreeLive(ctx context.Context, oc *v1alpha1.OAuthClient, projectKey string) error {
	id := clientIDFor(oc)
	var list v1alpha1.OAuthClientList
	if err := r.c.List(ctx, &list, MatchingFields{clientIDIndex: clientIDIndexKey(projectKey, id)}, noCopy); err != nil {
		return fmt.Errorf("listing OAuthClients of Project %s with client id %s: %w", projectKey, id, err)
	}
	var holder *v1alpha1.OAuthClient
	for i := range list.Items {
		other := &list.Items[i]
		if other.UID == oc.UID || !older(other, oc) || (holder != nil && !older(other, holder)) {
			continue
		}
		if ready := meta.FindStatusCondition(other.Status.Conditions, v1alpha1.ReadyCondition); ready != nil &&
			ready.Status == metav1.ConditionFalse && ready.Reason == v1alpha1.OAuthClientClientIDConflictReason &&
			ready.ObservedGeneration == other.Generation {
			// Refused the id itself (the store records another namespace as its holder, or an
			// even older client has it, which this loop finds too): it holds nothing, so a
			// newer client of the holding namespace is not kept from the id by it.
			continue
		}
		// Only a client the Project admits holds an id: a namespace the Project does not admit
		// cannot keep an id from the clients it does.
		if _, _, err := r.attach(ctx, other.Spec.ProjectRef, other.Namespace); err != nil {
			if _, ok := asNotReady(err); ok {
				continue
			}
			return err
		}
		holder = other
	}
	if holder == nil {
		return nil
	}
	return notReadyf(v1alpha1.OAuthClientClientIDConflictReason,
		"client id %s is held by OAuthClient %s/%s of Project %s, which is older; this client is not served: give it another spec.clientID, or delete that OAuthClient",
		id, holder.Namespace, holder.Name, projectKey)
}

// clientIDHeldChanged reports whether an update of an OAuthClient changed what the compiler
// reads of its status: status.clientID, or whether it was refused its id.
func clientIDHeldChanged(o, n Object) bool {
	a, ok1 := o.(*v1alpha1.OAuthClient)
	b, ok2 := n.(*v1alpha1.OAuthClient)
	if !ok1 || !ok2 {
		return false
	}
	refused := func(oc *v1alpha1.OAuthClient) bool {
		r := meta.FindStatusCondition(oc.Status.Conditions, v1alpha1.ReadyCondition)
		return r != nil && r.Status == metav1.ConditionFalse && r.Reason == v1alpha1.OAuthClientClientIDConflictReason
	}
	return a.Status.ClientID != b.Status.ClientID || refused(a) != refused(b)
}

package controllers

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"latchkey.dev/latchkey/api/v1alpha1"
)

// A client id is unique within its Project (docs/decisions/0067). People's grants, an agent's
// permission to use a connection and every token are stored under the client id, so a second
// OAuthClient served under an id would be handed all of them, with its own redirect URIs. The
// oldest OAuthClient admitted to the Project that has the id, declared (spec.clientID) or
// derived, keeps it, by creation time, then namespace/name, so every replica and every restart
// agree; any other reports ClientIDConflict and is not compiled. The holder keeps the id
// whether or not it is Ready: a client that waits for its Secret must not lose its id, and its
// grants, to a newer one in the meantime.

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

// clientIDFree returns notReady(ClientIDConflict) when an older OAuthClient admitted to the
// Project has oc's client id.
func (r *resolver) clientIDFree(ctx context.Context, oc *v1alpha1.OAuthClient, projectKey string) error {
	id := clientIDFor(oc)
	var list v1alpha1.OAuthClientList
	if err := r.c.List(ctx, &list, client.MatchingFields{clientIDIndex: clientIDIndexKey(projectKey, id)}, noCopy); err != nil {
		return fmt.Errorf("listing OAuthClients of Project %s with client id %s: %w", projectKey, id, err)
	}
	var holder *v1alpha1.OAuthClient
	for i := range list.Items {
		other := &list.Items[i]
		if other.UID == oc.UID || !older(other, oc) || (holder != nil && !older(other, holder)) {
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

// clientsSharingClientID: the other OAuthClients with o's client id, which may take the id when
// o goes, or lose it when o appears. The mapping runs for the old and the new object of an
// update.
func (d *dependents) clientsSharingClientID(ctx context.Context, o client.Object) []reconcile.Request {
	oc, ok := o.(*v1alpha1.OAuthClient)
	if !ok {
		return nil
	}
	var out []reconcile.Request
	for _, req := range listed(ctx, d, clientItems, client.MatchingFields{clientIDIndex: clientIDIndexValue(oc)}) {
		if req.NamespacedName != client.ObjectKeyFromObject(oc) {
			out = append(out, req)
		}
	}
	return out
}

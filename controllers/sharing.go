package controllers

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"

	"latchkey.dev/latchkey/api/v1alpha1"
)

// sharedClients compiles which OAuthClients ("namespace/name") the Project lets use the shared
// account of Connector c, and whether the Project names c at all. Only the Project's
// spec.sharedConnections grants this: neither the Connector's team nor a client's team can
// widen who uses the organisation's account (docs/shared-connections.md).
func sharedClients(p *v1alpha1.Project, c *v1alpha1.Connector) (clients []string, named bool) {
	key := c.Namespace + "/" + c.Name
	for _, g := range p.Spec.SharedConnections {
		if connectorKey(string(g.Connector), p.Namespace).String() != key {
			continue
		}
		named = true
		for _, n := range g.Clients {
			k := connectorKey(string(n), p.Namespace).String() // the same "name" or "namespace/name" rule
			if !slices.Contains(clients, k) {
				clients = append(clients, k)
			}
		}
	}
	slices.Sort(clients)
	return clients, named
}

// reconcileSharing reports on the Shared condition how the Connector's spec.sharing and the
// Project's spec.sharedConnections fit together (v1alpha1.ConnectorSharedCondition).
func (r *connectorPhases) reconcileSharing(ctx context.Context, s *connectorScope) (Result, error) {
	conds := &s.conn.Status.Conditions
	project, _, err := s.res.attach(ctx, s.conn.Spec.ProjectRef, s.conn.Namespace)
	if _, ok := asNotReady(err); err != nil && !ok {
		return Result{}, err
	}
	if project == nil {
		meta.RemoveStatusCondition(conds, v1alpha1.ConnectorSharedCondition)
		return Result{}, nil
	}
	clients, named := sharedClients(project, s.conn)
	g := s.conn.Generation
	switch {
	case s.conn.Spec.Sharing == v1alpha1.SharingOrganisation && len(clients) == 0:
		r.setCondition(conds, g, v1alpha1.ConnectorSharedCondition, notReadyf(v1alpha1.ConnectorNoSharedClientsReason,
			"spec.sharing is Organisation, but the Project's spec.sharedConnections lets no OAuthClient use this Connector's shared account"), v1alpha1.ConnectorSharedReason, "")
	case s.conn.Spec.Sharing == v1alpha1.SharingOrganisation:
		r.setCondition(conds, g, v1alpha1.ConnectorSharedCondition, nil, v1alpha1.ConnectorSharedReason,
			fmt.Sprintf("the shared account serves %d OAuthClients named by the Project; connect it with kubectl latchkey shared connect", len(clients)))
	case named:
		r.setCondition(conds, g, v1alpha1.ConnectorSharedCondition, notReadyf(v1alpha1.ConnectorSharingMismatchReason,
			"the Project's spec.sharedConnections names this Connector, but its spec.sharing is Personal: each person connects their own account and the entry is ignored"), v1alpha1.ConnectorSharedReason, "")
	default:
		meta.RemoveStatusCondition(conds, v1alpha1.ConnectorSharedCondition)
	}
	return Result{}, nil
}

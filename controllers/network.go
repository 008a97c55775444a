package controllers

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"latchkey.dev/latchkey/api/v1alpha1"
)

// connectorNetworks compiles the address ranges beyond the public internet that one Connector
// may dial: the Project's spec.upstreamNetwork.allowedCIDRs when the Connector is in the
// Project's own namespace, and the ranges of every grant that names the Connector or admits
// its namespace. A range the Project opened for its own provider is therefore not a range every
// tenant's Connector may send requests to (docs/decisions/0052). The Project decides: the team
// that writes a Connector cannot widen it.
func (r *resolver) connectorNetworks(ctx context.Context, p *v1alpha1.Project, c *v1alpha1.Connector) ([]netip.Prefix, error) {
	var out []netip.Prefix
	add := func(cidrs []v1alpha1.CIDR) {
		for _, pfx := range parseCIDRs(cidrs) {
			if !slices.Contains(out, pfx) {
				out = append(out, pfx)
			}
		}
	}
	if c.Namespace == p.Namespace {
		out = allowedNetworks(p)
	}
	if p.Spec.UpstreamNetwork == nil {
		return out, nil
	}
	key := c.Namespace + "/" + c.Name
	for i, g := range p.Spec.UpstreamNetwork.Grants {
		ok := slices.ContainsFunc(g.Connectors, func(n v1alpha1.ConnectorName) bool {
			return connectorKey(string(n), p.Namespace).String() == key
		})
		if !ok && g.Namespaces != nil {
			if c.Namespace == p.Namespace {
				ok = true
			} else {
				var err error
				ok, _, err = r.grants(ctx, fmt.Sprintf("spec.upstreamNetwork.grants[%d].namespaces", i), g.Namespaces.From, g.Namespaces.Selector, c.Namespace)
				if err != nil {
					return nil, err
				}
			}
		}
		if ok {
			add(g.CIDRs)
		}
	}
	return out, nil
}

// parseCIDRs compiles address ranges. CEL admits only valid ones; one that still does not parse
// allows nothing.
func parseCIDRs(cidrs []v1alpha1.CIDR) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range cidrs {
		if pfx, err := netip.ParsePrefix(string(s)); err == nil {
			out = append(out, pfx.Masked())
		}
	}
	return out
}

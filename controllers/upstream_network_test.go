//go:build !latchkey_local

package controllers

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
)

// A tenant's Connector in another namespace gets its own callback URL, distinct from every other
// Connector of the Project, and reaches beyond the public internet only what the Project's
// spec.upstreamNetwork opens to it: a bare allowedCIDRs entry only to the Project's own
// namespace, a grant only to the Connectors it names or whose namespace it admits. The
// Connector has no say in it.
func TestConnectorCallbackAndNetworkComeFromTheProject(t *testing.T) {
	needEnv(t)
	admin := newNamespace(t, nil)
	tenant := newNamespace(t, map[string]string{"tier": "tenant"})
	project := newProject(t, admin, "proj", &v1alpha1.AllowedNamespaces{From: v1alpha1.NamespacesFromAll})
	var conns []*v1alpha1.Connector
	for _, ns := range []string{admin, tenant} {
		create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gh-app", Labels: forConnector()}, StringData: map[string]string{"clientSecret": "s"}})
		c := newConnector(ns, "github", "proj", "gh-app")
		c.Spec.ProjectRef.Namespace = admin
		c.Spec.Audience = "github-" + ns
		create(t, c)
		conns = append(conns, c)
	}
	issuer := testPublicURL + "/" + admin + "/proj"
	for _, c := range conns {
		waitReady(t, c)
		if want := issuer + "/connectors/" + c.Namespace + "/github/callback"; c.Status.CallbackURL != want {
			t.Errorf("%s status.callbackURL = %q, want %q", c.Namespace, c.Status.CallbackURL, want)
		}
	}
	pfx := netip.MustParsePrefix
	networks := func(want map[string][]netip.Prefix) {
		t.Helper()
		waitSnapshot(t, fmt.Sprintf("connectors allowed %v", want), func(s *config.Snapshot) error {
			p := s.Project(admin + "/proj")
			if p == nil {
				return fmt.Errorf("no project")
			}
			for _, ns := range []string{admin, tenant} {
				c := p.Connectors[ns+"/github"]
				if c == nil {
					return fmt.Errorf("connector %s/github not compiled", ns)
				}
				if !slices.Equal(c.AllowedNetworks, want[ns]) {
					return fmt.Errorf("%s/github allows %v, want %v", ns, c.AllowedNetworks, want[ns])
				}
				if c.CallbackURL != issuer+config.CallbackPath(ns, "github") {
					return fmt.Errorf("%s/github callback %q", ns, c.CallbackURL)
				}
			}
			return nil
		})
	}
	networks(nil)
	update(t, project, func(p *v1alpha1.Project) {
		p.Spec.UpstreamNetwork = &v1alpha1.UpstreamNetwork{AllowedCIDRs: []v1alpha1.CIDR{"10.96.12.34/32", "fd00:10:96::1/112"}}
	})
	own := []netip.Prefix{pfx("10.96.12.34/32"), pfx("fd00:10:96::/112")}
	networks(map[string][]netip.Prefix{admin: own})

	// A grant naming the tenant's Connector opens its range to that Connector only.
	update(t, project, func(p *v1alpha1.Project) {
		p.Spec.UpstreamNetwork.Grants = []v1alpha1.UpstreamNetworkGrant{
			{CIDRs: []v1alpha1.CIDR{"10.96.40.7/32"}, Connectors: []v1alpha1.ConnectorName{v1alpha1.ConnectorName(tenant + "/github")}},
		}
	})
	networks(map[string][]netip.Prefix{admin: own, tenant: {pfx("10.96.40.7/32")}})

	// A grant to namespaces by label reaches the tenant's namespace and the Project's own.
	update(t, project, func(p *v1alpha1.Project) {
		p.Spec.UpstreamNetwork.Grants = []v1alpha1.UpstreamNetworkGrant{{CIDRs: []v1alpha1.CIDR{"10.96.50.0/24"},
			Namespaces: &v1alpha1.AllowedClientNamespaces{From: v1alpha1.NamespacesFromSelector,
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "tenant"}}}}}
	})
	networks(map[string][]netip.Prefix{admin: append(slices.Clone(own), pfx("10.96.50.0/24")), tenant: {pfx("10.96.50.0/24")}})

	// The namespace's label taken away, the range is closed to it.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}}
	update(t, ns, func(n *corev1.Namespace) { delete(n.Labels, "tier") })
	networks(map[string][]netip.Prefix{admin: append(slices.Clone(own), pfx("10.96.50.0/24"))})
}

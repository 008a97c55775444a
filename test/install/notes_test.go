package install_test

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestNotesWarnWithoutTrustedProxies: behind an Ingress or an HTTPRoute every request arrives
// from the proxy, so with trustedProxies empty every person shares one rate-limit budget for
// sign-in, registration and passkeys. Nothing refuses that install (a cluster may have no
// ingress pod CIDR to name yet), so the NOTES Helm prints after it must say so, and must not
// cry wolf when the proxies are listed or Latchkey is not exposed through the chart.
//
// `helm template` does not render NOTES.txt, so this installs with --dry-run=server against
// the test's API server, which stores nothing. Other tests of this package install the chart's
// cluster-wide objects (the admin APIService) into the same API server, so the dry run takes
// ownership of them instead of refusing; being a dry run, it changes nothing.
func TestNotesWarnWithoutTrustedProxies(t *testing.T) {
	skip(t)
	chart := filepath.Join(root, "charts", "latchkey")
	const warning = "WARNING: trustedProxies is empty"
	for _, c := range []struct {
		name   string
		values []string
		warn   bool
	}{
		{"ingress, no trusted proxies", []string{"ingress.enabled=true"}, true},
		{"HTTPRoute, no trusted proxies", []string{"httpRoute.enabled=true", "httpRoute.parentRefs[0].name=public"}, true},
		{"ingress with the controller's pods trusted", []string{"ingress.enabled=true", "trustedProxies={10.42.0.0/16}"}, false},
		{"no ingress or route from the chart", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"install", "rel", chart, "--dry-run=server", "--take-ownership", "--kubeconfig", kubeconfig,
				"--namespace", "latchkey", "--set", "publicURL=https://auth.example.com"}
			for _, v := range c.values {
				args = append(args, "--set", v)
			}
			out, err := helm(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			_, notes, ok := strings.Cut(out, "\nNOTES:\n")
			if !ok {
				t.Fatalf("no NOTES in the output of helm install:\n%s", out)
			}
			if got := strings.Contains(notes, warning); got != c.warn {
				t.Errorf("warning shown %v, want %v; NOTES:\n%s", got, c.warn, notes)
			}
			if c.warn && !strings.Contains(notes, "docs/operations.md, \"Client addresses\nbehind an ingress\"") {
				t.Errorf("the warning does not say where to read more; NOTES:\n%s", notes)
			}
		})
	}
}

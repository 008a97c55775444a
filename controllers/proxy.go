package controllers

import (
	"slices"
	"strings"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/upstream/catalog"
)

// proxyConfig compiles spec.proxy (docs/token-proxy.md): nil without it, so the proxy refuses
// every call. The API address is the spec's, else the preset's with its placeholders filled;
// the rules are the spec's, else the ones the preset proposes. The schema's rules are checked
// again here, since a Connector read from a directory (latchkey serve --config-dir) never
// passed the API server's validation.
func proxyConfig(sp *v1alpha1.ConnectorSpec, p *catalog.Preset, placeholders *strings.Replacer) (*config.Proxy, error) {
	if sp.Proxy == nil {
		return nil, nil
	}
	invalid := func(format string, args ...any) error {
		return notReadyf(v1alpha1.ConnectorInvalidProxyReason, format, args...)
	}
	base := string(sp.Proxy.APIBaseURL)
	if base == "" {
		base = placeholders.Replace(p.API.BaseURL)
	}
	if base == "" {
		return nil, invalid("spec.proxy.apiBaseURL is required: %s proposes no API address", cmpPreset(sp))
	}
	if msg := checkURLProblem(base); msg != "" {
		return nil, invalid("spec.proxy.apiBaseURL %s", msg)
	}
	if strings.Contains(base, "?") || strings.Contains(base, "%") {
		return nil, invalid("spec.proxy.apiBaseURL must not hold a query or percent-encoding")
	}
	out := &config.Proxy{BaseURL: strings.TrimSuffix(base, "/")}
	if len(sp.Proxy.Allow) == 0 {
		for _, r := range p.API.Allow {
			out.Rules = append(out.Rules, config.ProxyRule{Methods: slices.Clone(r.Methods), PathPrefix: r.PathPrefix})
		}
		return out, nil
	}
	for i, r := range sp.Proxy.Allow {
		if err := catalog.CheckPathPrefix(r.PathPrefix); err != nil {
			return nil, invalid("spec.proxy.allow[%d]: %v", i, err)
		}
		if len(r.Methods) == 0 {
			return nil, invalid("spec.proxy.allow[%d] names no method", i)
		}
		rule := config.ProxyRule{PathPrefix: r.PathPrefix}
		for _, m := range r.Methods {
			rule.Methods = append(rule.Methods, string(m))
		}
		out.Rules = append(out.Rules, rule)
	}
	return out, nil
}

func cmpPreset(sp *v1alpha1.ConnectorSpec) string {
	if sp.Preset == "" {
		return "a Connector without a preset"
	}
	return "the " + string(sp.Preset) + " preset"
}

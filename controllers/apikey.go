package controllers

import (
	"cmp"
	"context"
	"net/http"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/upstream/catalog"
)

// compileAPIKeyConnector compiles a Connector people connect by pasting an API key
// (docs/api-key-connectors.md). It names no Secret and has no callback: the key comes from the
// person, on a Latchkey page. The schema's rules are checked again here, since a Connector read
// from a directory (latchkey serve --config-dir) never passed the API server's validation.
func (r *resolver) compileAPIKeyConnector(ctx context.Context, project *v1alpha1.Project, pk types.NamespacedName, c *v1alpha1.Connector) (*connectorResult, error) {
	k, err := apiKeyConfig(&c.Spec)
	if err != nil {
		return nil, err
	}
	out := &config.Connector{
		Key:         c.Namespace + "/" + c.Name,
		Namespace:   c.Namespace,
		Name:        c.Name,
		DisplayName: c.Spec.DisplayName,
		Audience:    connectorAudience(c),
		APIKey:      k,
	}
	if len(c.Spec.Headers) > 0 {
		out.Headers = make(map[string]string, len(c.Spec.Headers))
		for name, v := range c.Spec.Headers {
			out.Headers[http.CanonicalHeaderKey(name)] = string(v)
		}
		if _, ok := out.Headers[k.Header]; ok {
			return nil, notReadyf(v1alpha1.ConnectorInvalidAPIKeyReason, "spec.headers sets %s, which carries the key (spec.apiKey.header)", k.Header)
		}
	}
	if out.Proxy, err = proxyConfig(&c.Spec, &catalog.Preset{}, strings.NewReplacer()); err != nil {
		return nil, err
	}
	if out.AllowedNetworks, err = r.connectorNetworks(ctx, project, c); err != nil {
		return nil, err
	}
	return &connectorResult{compiled: out, project: pk.String()}, nil
}

// forbiddenKeyHeaders are headers Latchkey or HTTP own; the key cannot travel in one.
var forbiddenKeyHeaders = map[string]bool{
	"Content-Type": true, "Content-Length": true, "Cookie": true, "Host": true, "Connection": true,
	"Transfer-Encoding": true, "Te": true, "Upgrade": true, "Proxy-Authorization": true,
	"Traceparent": true, "Tracestate": true,
}

// apiKeyConfig checks spec.apiKey and fills its defaults. Every refusal is InvalidAPIKey with a
// message naming the field.
func apiKeyConfig(sp *v1alpha1.ConnectorSpec) (*config.APIKey, error) {
	invalid := func(format string, args ...any) error {
		return notReadyf(v1alpha1.ConnectorInvalidAPIKeyReason, format, args...)
	}
	var oauth []string
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"preset", sp.Preset != ""}, {"endpoints", sp.Endpoints != nil}, {"clientID", sp.ClientID != ""},
		{"clientSecretRef", sp.ClientSecretRef != (v1alpha1.SecretKeyReference{})}, {"scopes", len(sp.Scopes) > 0},
		{"authParams", len(sp.AuthParams) > 0}, {"userInfo", sp.UserInfo != nil}, {"account", sp.Account != nil},
	} {
		if f.set {
			oauth = append(oauth, "spec."+f.name)
		}
	}
	if len(oauth) > 0 {
		return nil, invalid("spec.apiKey cannot be combined with OAuth fields; remove %s", strings.Join(oauth, ", "))
	}
	a := sp.APIKey
	if msg := checkURLProblem(string(a.CheckURL)); msg != "" {
		return nil, invalid("spec.apiKey.checkURL %s", msg)
	}
	method := cmp.Or(string(a.Method), http.MethodGet)
	if method != http.MethodGet && method != http.MethodPost {
		return nil, invalid("spec.apiKey.method must be GET or POST")
	}
	header := http.CanonicalHeaderKey(cmp.Or(a.Header, "Authorization"))
	if !headerName(header) || forbiddenKeyHeaders[header] {
		return nil, invalid("spec.apiKey.header %q cannot carry the key: use Authorization or a header of the service's own", header)
	}
	format := a.Format
	if format == "" {
		format = config.APIKeyPlaceholder
		if header == "Authorization" {
			format = "Bearer " + config.APIKeyPlaceholder
		}
	}
	if strings.Count(format, config.APIKeyPlaceholder) != 1 || !printable(format) {
		return nil, invalid("spec.apiKey.format must hold %s exactly once, in printable ASCII", config.APIKeyPlaceholder)
	}
	return &config.APIKey{
		CheckURL:  string(a.CheckURL),
		Method:    method,
		Header:    header,
		Format:    format,
		IDField:   cmp.Or(a.IDField, "id"),
		NameField: cmp.Or(a.NameField, "name"),
		Hint:      a.Hint,
	}, nil
}

// checkURLProblem says what is wrong with a check URL, or "": it must be absolute https, or
// http to a loopback host, without credentials or a fragment. Where it may be dialled is the
// address guard's business at call time (internal/upstream/guard.go).
func checkURLProblem(raw string) string {
	u, err := url.Parse(raw)
	switch {
	case raw == "" || err != nil || u.Host == "" || u.Opaque != "":
		return "must be an absolute URL"
	case strings.Contains(raw, "#"):
		return "must not contain a fragment (#)"
	case u.User != nil:
		return "must not carry credentials"
	case u.Scheme == "https":
		return ""
	case u.Scheme == "http" && (u.Hostname() == "127.0.0.1" || u.Hostname() == "::1" || u.Hostname() == "localhost"):
		return ""
	}
	return "must be https, or http to a loopback host (127.0.0.1, [::1], localhost)"
}

func headerName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

func printable(s string) bool {
	for _, r := range s {
		if r < ' ' || r > '~' {
			return false
		}
	}
	return true
}

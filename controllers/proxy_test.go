package controllers

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
)

// TestProxyConfig: spec.proxy turns the token proxy on; the preset proposes an API address and
// read-only rules, the spec's win; anything that could make a rule mean another path, or send
// calls anywhere but an https (or loopback) address, is InvalidProxy. Without spec.proxy the
// proxy refuses every call (nil).
func TestProxyConfig(t *testing.T) {
	get := []v1alpha1.ProxyMethod{"GET"}
	tests := []struct {
		name, preset, baseURL string
		proxy                 *v1alpha1.ConnectorProxy
		want                  *config.Proxy
		invalid               bool
	}{
		{name: "no spec.proxy: off", preset: "github"},
		{name: "the preset's address and rules", preset: "github", proxy: &v1alpha1.ConnectorProxy{},
			want: &config.Proxy{BaseURL: "https://api.github.com", Rules: []config.ProxyRule{
				{Methods: []string{"GET", "HEAD"}, PathPrefix: "/user"}, {Methods: []string{"GET", "HEAD"}, PathPrefix: "/repos"}}}},
		{name: "ghes fills its address", preset: "github-enterprise-server", baseURL: "https://github.example.com",
			proxy: &v1alpha1.ConnectorProxy{Allow: []v1alpha1.ProxyRule{{Methods: get, PathPrefix: "/user"}}},
			want:  &config.Proxy{BaseURL: "https://github.example.com/api/v3", Rules: []config.ProxyRule{{Methods: []string{"GET"}, PathPrefix: "/user"}}}},
		{name: "the spec's address wins", preset: "github", proxy: &v1alpha1.ConnectorProxy{APIBaseURL: "http://127.0.0.1:8090/"},
			want: &config.Proxy{BaseURL: "http://127.0.0.1:8090", Rules: []config.ProxyRule{
				{Methods: []string{"GET", "HEAD"}, PathPrefix: "/user"}, {Methods: []string{"GET", "HEAD"}, PathPrefix: "/repos"}}}},
		{name: "no preset, no address", proxy: &v1alpha1.ConnectorProxy{}, invalid: true},
		{name: "no preset, rules: nothing proposed", proxy: &v1alpha1.ConnectorProxy{APIBaseURL: "https://api.example"},
			want: &config.Proxy{BaseURL: "https://api.example"}},
		{name: "plain http elsewhere", preset: "github", proxy: &v1alpha1.ConnectorProxy{APIBaseURL: "http://api.example"}, invalid: true},
		{name: "a dot-dot prefix", preset: "github", proxy: &v1alpha1.ConnectorProxy{Allow: []v1alpha1.ProxyRule{{Methods: get, PathPrefix: "/user/.."}}}, invalid: true},
		{name: "an encoded prefix", preset: "github", proxy: &v1alpha1.ConnectorProxy{Allow: []v1alpha1.ProxyRule{{Methods: get, PathPrefix: "/user%2f.."}}}, invalid: true},
		{name: "a double slash", preset: "github", proxy: &v1alpha1.ConnectorProxy{Allow: []v1alpha1.ProxyRule{{Methods: get, PathPrefix: "//evil"}}}, invalid: true},
		{name: "no leading slash", preset: "github", proxy: &v1alpha1.ConnectorProxy{Allow: []v1alpha1.ProxyRule{{Methods: get, PathPrefix: "user"}}}, invalid: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &v1alpha1.Connector{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "svc"}}
			c.Spec.Preset = v1alpha1.ConnectorPreset(tt.preset)
			c.Spec.BaseURL = tt.baseURL
			c.Spec.Proxy = tt.proxy
			if tt.preset == "" {
				c.Spec.Endpoints = &v1alpha1.ConnectorEndpoints{AuthorizationURL: "https://idp.example/a", TokenURL: "https://idp.example/t", UserInfoURL: "https://idp.example/u"}
			}
			out := &config.Connector{}
			err := applyDialect(out, c)
			if tt.invalid {
				if nr, ok := asNotReady(err); !ok || nr.reason != v1alpha1.ConnectorInvalidProxyReason {
					t.Fatalf("err = %v, want InvalidProxy; compiled %+v", err, out.Proxy)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(out.Proxy, tt.want) {
				t.Fatalf("proxy %+v, want %+v", out.Proxy, tt.want)
			}
		})
	}
}

//go:build !latchkey_local

package controllers

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/upstream/catalog"
)

// TestPresetBaseURL: spec.baseURL fills a preset's {baseURL}, and a tenant's Connector cannot
// use it to send its people's codes, tokens or client secret anywhere but where the base URL
// says. A base URL whose parts could move an endpoint once the preset's path is appended (a
// query, a fragment, user info, a dot segment, percent-encoding) is refused with
// PresetParameterInvalid, as is a base URL given to a preset whose endpoints do not start with
// one: a github Connector with a GitHub Enterprise Server address would otherwise talk to
// github.com.
func TestPresetBaseURL(t *testing.T) {
	tests := []struct {
		name, preset, baseURL string
		// wantToken is the compiled token URL, or "" for a refusal with reason.
		wantToken, reason string
	}{
		{"gitlab.com by default", "gitlab", "", "https://gitlab.com/oauth/token", ""},
		{"self-managed gitlab", "gitlab", "https://gitlab.example.com", "https://gitlab.example.com/oauth/token", ""},
		{"gitlab under a relative URL, trailing slash", "gitlab", "https://example.com/gitlab/", "https://example.com/gitlab/oauth/token", ""},
		{"a port", "gitlab", "https://gitlab.example.com:8443", "https://gitlab.example.com:8443/oauth/token", ""},
		{"ghes", "github-enterprise-server", "https://github.example.com", "https://github.example.com/login/oauth/access_token", ""},
		{"ghes needs its address", "github-enterprise-server", "", "", v1alpha1.ConnectorPresetParameterMissingReason},
		{"a zendesk account", "zendesk", "https://example.zendesk.com", "https://example.zendesk.com/oauth/tokens", ""},
		{"zendesk needs its account's address", "zendesk", "", "", v1alpha1.ConnectorPresetParameterMissingReason},
		{"salesforce sandbox", "salesforce", "https://test.salesforce.com", "https://test.salesforce.com/services/oauth2/token", ""},
		{"plain http", "gitlab", "http://gitlab.example.com", "", v1alpha1.ConnectorPresetParameterInvalidReason},
		{"a query swallows the path", "gitlab", "https://evil.example/?x=", "", v1alpha1.ConnectorPresetParameterInvalidReason},
		{"a fragment swallows the path", "gitlab", "https://evil.example/#", "", v1alpha1.ConnectorPresetParameterInvalidReason},
		{"user info before another host", "gitlab", "https://gitlab.example.com@evil.example", "", v1alpha1.ConnectorPresetParameterInvalidReason},
		{"a dot-dot segment", "gitlab", "https://gitlab.example.com/a/..", "", v1alpha1.ConnectorPresetParameterInvalidReason},
		{"an encoded dot-dot", "gitlab", "https://gitlab.example.com/%2e%2e", "", v1alpha1.ConnectorPresetParameterInvalidReason},
		{"a backslash", "gitlab", `https://gitlab.example.com\@evil.example`, "", v1alpha1.ConnectorPresetParameterInvalidReason},
		{"no host", "gitlab", "https:///oauth", "", v1alpha1.ConnectorPresetParameterInvalidReason},
		{"a preset without {baseURL}", "github", "https://github.example.com", "", v1alpha1.ConnectorPresetParameterInvalidReason},
		{"no preset", "", "https://idp.example", "", v1alpha1.ConnectorPresetParameterInvalidReason},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &v1alpha1.Connector{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "svc"}}
			c.Spec.Preset = v1alpha1.ConnectorPreset(tt.preset)
			c.Spec.BaseURL = tt.baseURL
			if tt.preset == "" {
				c.Spec.Endpoints = &v1alpha1.ConnectorEndpoints{AuthorizationURL: "https://idp.example/a", TokenURL: "https://idp.example/t", UserInfoURL: "https://idp.example/u"}
			}
			out := &config.Connector{}
			err := applyDialect(out, c)
			if tt.reason != "" {
				nr, ok := asNotReady(err)
				if !ok || nr.reason != tt.reason {
					t.Fatalf("err = %v, want reason %s; compiled token URL %q", err, tt.reason, out.TokenURL)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if out.TokenURL != tt.wantToken {
				t.Errorf("token URL %q, want %q", out.TokenURL, tt.wantToken)
			}
			filled := []string{out.AuthURL, out.UserInfoURL}
			if p, ok := catalog.Get(tt.preset); !ok || p.RevocationURL != "" {
				filled = append(filled, out.RevocationURL)
			}
			for _, u := range filled {
				if strings.Contains(u, "{baseURL}") || !strings.HasPrefix(u, tt.wantToken[:strings.Index(tt.wantToken[len("https://"):], "/")+len("https://")]) {
					t.Errorf("endpoint %q not filled", u)
				}
			}
		})
	}
}

// TestConnectorBaseURLConditions: a github-enterprise-server Connector says it needs
// spec.baseURL, then that a base URL with a query is not one, and is compiled against the
// server's address once it is clean; nothing is compiled meanwhile.
func TestConnectorBaseURLConditions(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	newProject(t, ns, "proj", nil)
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", Labels: forConnector()},
		StringData: map[string]string{"clientSecret": "upstream-secret"},
	})
	conn := newConnector(ns, "ghes", "proj", "app")
	conn.Spec.Preset = "github-enterprise-server"
	create(t, conn)
	if cond := waitNotReady(t, conn, v1alpha1.ConnectorPresetParameterMissingReason); !strings.Contains(cond.Message, "spec.baseURL") {
		t.Errorf("message %q does not name spec.baseURL", cond.Message)
	}

	update(t, conn, func(c *v1alpha1.Connector) { c.Spec.BaseURL = "https://evil.example/?" })
	waitNotReady(t, conn, v1alpha1.ConnectorPresetParameterInvalidReason)
	waitSnapshot(t, "project without the connector", func(s *config.Snapshot) error {
		if p := s.Project(ns + "/proj"); p == nil || len(p.Connectors) != 0 {
			return errors.New("a connector with an unusable base URL is compiled, or no project")
		}
		return nil
	})

	update(t, conn, func(c *v1alpha1.Connector) { c.Spec.BaseURL = "https://github.example.com/" })
	waitReady(t, conn)
	waitSnapshot(t, "connector compiled", func(s *config.Snapshot) error {
		c := inProject(s, ns+"/proj").Connectors[ns+"/ghes"]
		if c == nil {
			return errors.New("not compiled")
		}
		if c.TokenURL != "https://github.example.com/login/oauth/access_token" || c.UserInfoURL != "https://github.example.com/api/v3/user" ||
			c.RevocationURL != "https://github.example.com/api/v3/applications/{client_id}/grant" || c.Audience != "github-enterprise-server" {
			return fmt.Errorf("compiled %+v", *c)
		}
		return nil
	})
}

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

// TestApplyDialect compiles Connectors against the catalog: what each preset fills in, what the
// spec overrides, and the conditions of a preset the catalog does not have or cannot complete.
func TestApplyDialect(t *testing.T) {
	base := func(change func(*v1alpha1.ConnectorSpec)) *v1alpha1.Connector {
		c := &v1alpha1.Connector{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "svc"}}
		change(&c.Spec)
		return c
	}
	tests := []struct {
		name   string
		conn   *v1alpha1.Connector
		check  func(*config.Connector) error
		reason string
	}{
		{"github as before the catalog", base(func(s *v1alpha1.ConnectorSpec) { s.Preset = "github" }), func(c *config.Connector) error {
			if c.AuthURL != "https://github.com/login/oauth/authorize" || c.TokenURL != "https://github.com/login/oauth/access_token" ||
				c.UserInfoURL != "https://api.github.com/user" || c.RevocationURL != "" || c.DisplayName != "GitHub" ||
				c.AccountIDField != "id" || c.AccountNameField != "login" || c.RevocationStyle != config.RevokeGitHubGrant ||
				c.TokenAuth != config.TokenAuthPost || len(c.Scopes) != 0 || c.AuthParams != nil || c.Headers != nil {
				return fmt.Errorf("%+v", *c)
			}
			return nil
		}, ""},
		{"slack: user scopes, nested token, basic auth", base(func(s *v1alpha1.ConnectorSpec) {
			s.Preset = "slack"
			s.Scopes = []v1alpha1.Scope{"channels:history", "chat:write"}
		}), func(c *config.Connector) error {
			if c.ScopeParam != "user_scope" || c.ScopeSeparator != "," || c.AccessTokenField != "authed_user.access_token" ||
				c.TokenAuth != config.TokenAuthBasic || c.UserInfoMethod != "POST" || c.AccountIDField != "user_id" {
				return fmt.Errorf("%+v", *c)
			}
			return nil
		}, ""},
		{"notion: JSON token requests and a version header", base(func(s *v1alpha1.ConnectorSpec) { s.Preset = "notion" }), func(c *config.Connector) error {
			if !c.TokenRequestJSON || c.Headers["Notion-Version"] != "2022-06-28" || c.AuthParams["owner"] != "user" || c.AccountIDField != "bot.owner.user.id" {
				return fmt.Errorf("%+v", *c)
			}
			return nil
		}, ""},
		{"notion: the spec's header wins, case aside", base(func(s *v1alpha1.ConnectorSpec) {
			s.Preset = "notion"
			s.Headers = map[string]v1alpha1.HeaderValue{"notion-version": "2025-09-03"}
		}), func(c *config.Connector) error {
			if len(c.Headers) != 1 || c.Headers["Notion-Version"] != "2025-09-03" {
				return fmt.Errorf("headers %v", c.Headers)
			}
			return nil
		}, ""},
		{"linear: GraphQL user info", base(func(s *v1alpha1.ConnectorSpec) { s.Preset = "linear" }), func(c *config.Connector) error {
			if c.UserInfoMethod != "POST" || c.UserInfoBody != `{"query":"{ viewer { id name email } }"}` || c.AccountIDField != "data.viewer.id" ||
				c.ScopeSeparator != "," || strings.Join(c.Scopes, " ") != "read" {
				return fmt.Errorf("%+v", *c)
			}
			return nil
		}, ""},
		{"google: offline access parameters, the spec adds its own", base(func(s *v1alpha1.ConnectorSpec) {
			s.Preset = "google"
			s.AuthParams = map[string]v1alpha1.AuthParamValue{"login_hint": "a@example.com"}
		}), func(c *config.Connector) error {
			if c.AuthParams["access_type"] != "offline" || c.AuthParams["prompt"] != "consent" || c.AuthParams["login_hint"] != "a@example.com" {
				return fmt.Errorf("authParams %v", c.AuthParams)
			}
			return nil
		}, ""},
		{"microsoft: the tenant fills the endpoints", base(func(s *v1alpha1.ConnectorSpec) {
			s.Preset = "microsoft"
			s.Tenant = "contoso.onmicrosoft.com"
		}), func(c *config.Connector) error {
			if c.TokenURL != "https://login.microsoftonline.com/contoso.onmicrosoft.com/oauth2/v2.0/token" ||
				c.AuthURL != "https://login.microsoftonline.com/contoso.onmicrosoft.com/oauth2/v2.0/authorize" {
				return fmt.Errorf("%+v", *c)
			}
			return nil
		}, ""},
		{"microsoft for many tenants: the ID token's tenant, restricted", base(func(s *v1alpha1.ConnectorSpec) {
			s.Preset = "microsoft"
			s.Tenant = "organizations"
			s.AllowedTenants = []string{"72f988bf-86f1-41af-91ab-2d7cd011db47"}
		}), func(c *config.Connector) error {
			if c.OIDCIssuer != "https://login.microsoftonline.com/organizations/v2.0" || c.TenantClaim != "tid" ||
				len(c.AllowedTenants) != 1 || c.AccountIDField != "oid" || c.AccountNameField != "preferred_username" ||
				!strings.Contains(strings.Join(c.Scopes, " "), "offline_access") {
				return fmt.Errorf("%+v", *c)
			}
			return nil
		}, ""},
		{"allowedTenants without a tenant claim", base(func(s *v1alpha1.ConnectorSpec) {
			s.Preset = "github"
			s.AllowedTenants = []string{"contoso"}
		}), nil, v1alpha1.ConnectorInvalidTenantsReason},
		{"an OIDC issuer set on a preset without one names the account by sub", base(func(s *v1alpha1.ConnectorSpec) {
			s.Preset = "gitlab"
			s.Endpoints = &v1alpha1.ConnectorEndpoints{OIDCIssuer: "https://gitlab.com"}
		}), func(c *config.Connector) error {
			if c.AccountIDField != "sub" {
				return fmt.Errorf("idField %q", c.AccountIDField)
			}
			return nil
		}, ""},
		{"dropbox: offline access, RPC user info, Bearer revocation", base(func(s *v1alpha1.ConnectorSpec) { s.Preset = "dropbox" }), func(c *config.Connector) error {
			if c.AuthParams["token_access_type"] != "offline" || c.UserInfoMethod != "POST" || c.UserInfoBody != "" ||
				c.RevocationStyle != config.RevokeBearer || c.AccountIDField != "account_id" {
				return fmt.Errorf("%+v", *c)
			}
			return nil
		}, ""},
		{"figma: refreshes at its own endpoint", base(func(s *v1alpha1.ConnectorSpec) { s.Preset = "figma" }), func(c *config.Connector) error {
			if c.RefreshURL != "https://api.figma.com/v1/oauth/refresh" || c.TokenAuth != config.TokenAuthBasic || c.RevocationURL != "" {
				return fmt.Errorf("%+v", *c)
			}
			return nil
		}, ""},
		{"microsoft without a tenant", base(func(s *v1alpha1.ConnectorSpec) { s.Preset = "microsoft" }), nil, v1alpha1.ConnectorPresetParameterMissingReason},
		{"a preset the catalog does not have", base(func(s *v1alpha1.ConnectorSpec) { s.Preset = "no-such-service" }), nil, v1alpha1.ConnectorUnknownPresetReason},
		{"no preset: RFC 6749 defaults", base(func(s *v1alpha1.ConnectorSpec) {
			s.Endpoints = &v1alpha1.ConnectorEndpoints{AuthorizationURL: "https://idp.example/a", TokenURL: "https://idp.example/t", UserInfoURL: "https://idp.example/u"}
		}), func(c *config.Connector) error {
			if c.TokenAuth != config.TokenAuthPost || c.ScopeSeparator != "" || c.ScopeParam != "" || c.AccessTokenField != "" ||
				c.UserInfoMethod != "GET" || c.RevocationStyle != config.RevokeRFC7009 || c.AccountIDField != "id" || c.AccountNameField != "email" {
				return fmt.Errorf("%+v", *c)
			}
			return nil
		}, ""},
		{"a user info body that is not JSON", base(func(s *v1alpha1.ConnectorSpec) {
			s.Preset = "github"
			s.UserInfo = &v1alpha1.ConnectorUserInfo{Body: "{not json"}
		}), nil, v1alpha1.ConnectorInvalidUserInfoReason},
		{"authParams cannot set the scope parameter", base(func(s *v1alpha1.ConnectorSpec) {
			s.Preset = "slack"
			s.AuthParams = map[string]v1alpha1.AuthParamValue{"user_scope": "admin"}
		}), func(c *config.Connector) error {
			if _, ok := c.AuthParams["user_scope"]; ok {
				return fmt.Errorf("authParams %v set the scope parameter", c.AuthParams)
			}
			return nil
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := &config.Connector{Scopes: scopeStrings(tt.conn.Spec.Scopes)}
			err := applyDialect(out, tt.conn)
			if tt.reason != "" {
				nr, ok := asNotReady(err)
				if !ok || nr.reason != tt.reason {
					t.Fatalf("err = %v, want reason %s", err, tt.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := tt.check(out); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestUnknownPresetSaysWhichExist: the condition names the presets there are, and nothing of
// the Connector's Secret.
func TestUnknownPresetSaysWhichExist(t *testing.T) {
	c := &v1alpha1.Connector{Spec: v1alpha1.ConnectorSpec{Preset: "no-such-service"}}
	err := applyDialect(&config.Connector{ClientSecret: "upstream-secret"}, c)
	nr, ok := asNotReady(err)
	if !ok {
		t.Fatalf("err = %v", err)
	}
	for _, name := range catalog.Names() {
		if !strings.Contains(nr.message, name) {
			t.Errorf("message %q does not list %s", nr.message, name)
		}
	}
	if strings.Contains(nr.message, "upstream-secret") {
		t.Error("the message carries the client secret")
	}
}

// TestConnectorUnknownPreset: the CRD takes any preset name; the controller checks it against
// the catalog, says so in the Ready condition, keeps it out of the snapshot, and compiles it
// once the name is one the catalog has.
func TestConnectorUnknownPreset(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	newProject(t, ns, "proj", nil)
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", Labels: forConnector()},
		StringData: map[string]string{"clientSecret": "upstream-secret"},
	})
	conn := newConnector(ns, "svc", "proj", "app")
	conn.Spec.Preset = "no-such-service"
	create(t, conn)

	cond := waitNotReady(t, conn, v1alpha1.ConnectorUnknownPresetReason)
	if !strings.Contains(cond.Message, `"no-such-service"`) || !strings.Contains(cond.Message, "gitlab") {
		t.Errorf("message %q does not name the preset and the known ones", cond.Message)
	}
	waitSnapshot(t, "project without the connector", func(s *config.Snapshot) error {
		if p := s.Project(ns + "/proj"); p == nil || len(p.Connectors) != 0 {
			return errors.New("the connector with an unknown preset is compiled, or no project")
		}
		return nil
	})

	update(t, conn, func(c *v1alpha1.Connector) { c.Spec.Preset = "gitlab" })
	waitReady(t, conn)
	waitSnapshot(t, "connector compiled", func(s *config.Snapshot) error {
		c := inProject(s, ns+"/proj").Connectors[ns+"/svc"]
		if c == nil {
			return errors.New("not compiled")
		}
		if c.TokenURL != "https://gitlab.com/oauth/token" || c.Audience != "gitlab" || c.RevocationURL != "https://gitlab.com/oauth/revoke" {
			return fmt.Errorf("compiled %+v", *c)
		}
		return nil
	})
}

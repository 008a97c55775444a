package controllers

import (
	"net/url"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/upstream/catalog"
	"latchkey.dev/latchkey/internal/upstream/fakeoauth"
)

// TestFakeConnectorsAreWhatTheControllerCompiles: the provider stories
// (webhook/callback/providers_test.go) run connectors that fakeoauth builds from the catalog
// presets without a controller. They must be what applyDialect compiles for a Connector that
// names only the preset, its scopes and a base URL, or the stories would test something no
// Connector is: every dialect and account field equal, every endpoint's path equal.
func TestFakeConnectorsAreWhatTheControllerCompiles(t *testing.T) {
	const base = "https://base.example"
	for _, shape := range fakeoauth.Shapes() {
		t.Run(string(shape), func(t *testing.T) {
			fake := fakeoauth.New(fakeoauth.Options{Shape: shape, ClientID: "c", ClientSecret: "s"}).Connector(base, "team/svc", "https://cb.example")
			c := &v1alpha1.Connector{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "svc"}}
			c.Spec.Preset = v1alpha1.ConnectorPreset(shape)
			for _, s := range fake.Scopes {
				c.Spec.Scopes = append(c.Spec.Scopes, v1alpha1.Scope(s))
			}
			if p, _ := catalog.Get(string(shape)); p.TakesBaseURL() && p.BaseURL == "" {
				// No default address (github-enterprise-server, zendesk): the Connector gives one.
				c.Spec.BaseURL = base
			}
			if shape == fakeoauth.Microsoft {
				c.Spec.Tenant = "common"
			}
			out := &config.Connector{Scopes: scopeStrings(c.Spec.Scopes)}
			if err := applyDialect(out, c); err != nil {
				t.Fatal(err)
			}
			path := func(u string) string {
				p, err := url.Parse(u)
				if err != nil {
					return "unparsable " + u
				}
				return p.EscapedPath()
			}
			type view struct {
				DisplayName, TokenAuth, AccessTokenField, ScopeSeparator, ScopeParam, RevocationStyle string
				UserInfoMethod, UserInfoBody, AccountIDField, AccountNameField                        string
				TokenRequestJSON                                                                      bool
				Scopes                                                                                []string
				Headers, AuthParams                                                                   map[string]string
				Auth, Token, UserInfo, Revocation                                                     string
				Refresh, OIDCIssuer, TenantClaim                                                      string
			}
			of := func(c *config.Connector) view {
				return view{c.DisplayName, c.TokenAuth, c.AccessTokenField, c.ScopeSeparator, c.ScopeParam, c.RevocationStyle,
					c.UserInfoMethod, c.UserInfoBody, c.AccountIDField, c.AccountNameField, c.TokenRequestJSON, c.Scopes,
					c.Headers, c.AuthParams, path(c.AuthURL), path(c.TokenURL), path(c.UserInfoURL), path(c.RevocationURL),
					path(c.RefreshURL), path(c.OIDCIssuer), c.TenantClaim}
			}
			if got, want := of(fake), of(out); !reflect.DeepEqual(got, want) {
				t.Errorf("fakeoauth builds\n%+v\nthe controller compiles\n%+v", got, want)
			}
		})
	}
}

package admission_test

import (
	"context"
	"strings"
	"testing"
)

const connectorHead = `apiVersion: latchkey.dev/v1alpha1
kind: Connector
metadata: {name: c, namespace: ns}
spec:
  projectRef: {name: p}
  clientID: x
  clientSecretRef: {name: s, key: k}
`

// TestConnectorDialectSchema: the Connector CRD's own rules for presets and dialect fields, as
// the API server applies them. A preset is any lower-case name (the controller checks it
// against the catalog); what a dialect may not touch is refused before any controller sees it.
func TestConnectorDialectSchema(t *testing.T) {
	a := admitter(t)
	tests := []struct {
		name string
		spec string
		want []string // nil: admitted
	}{
		{"a preset the CRD has never heard of", "  preset: no-such-service\n", nil},
		{"slack written out", `  endpoints:
    authorizationURL: https://slack.com/oauth/v2/authorize
    tokenURL: https://slack.com/api/oauth.v2.access
    userInfoURL: https://slack.com/api/auth.test
  tokenEndpointAuthMethod: client_secret_basic
  tokenRequestFormat: form
  accessTokenField: authed_user.access_token
  scopeParameter: user_scope
  scopeSeparator: comma
  userInfo: {method: POST}
  headers: {X-Slack-Thing: "1"}
  revocationStyle: RFC7009
  account: {idField: user_id, nameField: user}
`, nil},
		{"linear's GraphQL query", "  preset: linear\n  userInfo: {graphQLQuery: '{ viewer { id } }'}\n", nil},
		{"microsoft with a tenant", "  preset: microsoft\n  tenant: contoso.onmicrosoft.com\n", nil},
		{"preset not a name", "  preset: GitHub!\n", []string{"spec.preset"}},
		{"Authorization header, any case", "  preset: notion\n  headers: {AUTHORIZATION: Bearer x}\n", []string{"spec.headers", "must not set Authorization"}},
		{"Cookie header", "  preset: notion\n  headers: {cookie: a=b}\n", []string{"spec.headers", "must not set"}},
		{"header name with a colon", "  preset: notion\n  headers: {'X-A:b': c}\n", []string{"spec.headers", "header names must be"}},
		{"scopeParameter on redirect_uri", "  preset: slack\n  scopeParameter: redirect_uri\n", []string{"spec.scopeParameter"}},
		{"GET with a GraphQL query", "  preset: linear\n  userInfo: {method: GET, graphQLQuery: '{ viewer { id } }'}\n", []string{"a GET request has no body"}},
		{"body and query", "  preset: linear\n  userInfo: {body: '{}', graphQLQuery: '{ viewer { id } }'}\n", []string{"set body or graphQLQuery, not both"}},
		{"unknown client authentication", "  preset: slack\n  tokenEndpointAuthMethod: tls_client_auth\n", []string{"spec.tokenEndpointAuthMethod", "Unsupported value"}},
		{"private_key_jwt with a certificate", "  preset: microsoft\n  tenant: organizations\n  tokenEndpointAuthMethod: private_key_jwt\n  clientAssertion: {algorithm: PS256, certificateKey: tls.crt}\n  allowedTenants: [72f988bf-86f1-41af-91ab-2d7cd011db47]\n", nil},
		{"clientAssertion without private_key_jwt", "  preset: microsoft\n  tenant: common\n  clientAssertion: {keyID: k1}\n", []string{"clientAssertion is only for tokenEndpointAuthMethod private_key_jwt"}},
		{"clientAssertion with an HMAC algorithm", "  preset: microsoft\n  tenant: common\n  tokenEndpointAuthMethod: private_key_jwt\n  clientAssertion: {algorithm: HS256}\n", []string{"spec.clientAssertion.algorithm", "Unsupported value"}},
		{"an allowed tenant that is a path", "  preset: microsoft\n  tenant: common\n  allowedTenants: [../evil]\n", []string{"spec.allowedTenants"}},
		{"Bearer revocation and a refresh URL", "  preset: dropbox\n  revocationStyle: Bearer\n  endpoints: {refreshURL: 'https://api.example.com/refresh'}\n", nil},
		{"a refresh URL in the clear", "  preset: figma\n  endpoints: {refreshURL: 'http://api.example.com/refresh'}\n", []string{"spec.endpoints.refreshURL"}},
		{"unknown separator", "  preset: slack\n  scopeSeparator: semicolon\n", []string{"spec.scopeSeparator", "Unsupported value"}},
		{"token path with a space", "  preset: slack\n  accessTokenField: 'authed user.token'\n", []string{"spec.accessTokenField"}},
		{"tenant that is a path", "  preset: microsoft\n  tenant: ../evil\n", []string{"spec.tenant"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := a.Admit(context.Background(), obj(t, connectorHead+tt.spec))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("admitted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

package controllers

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"latchkey.dev/latchkey/api/v1alpha1"
)

// TestAPIKeyConfig: what the controller accepts in spec.apiKey, the defaults it fills, and the
// InvalidAPIKey condition's message for what it refuses. A Connector read from a directory
// never passed the CRD's CEL rules, so these checks are the only ones it gets.
func TestAPIKeyConfig(t *testing.T) {
	spec := func(change func(*v1alpha1.ConnectorSpec)) *v1alpha1.ConnectorSpec {
		s := &v1alpha1.ConnectorSpec{APIKey: &v1alpha1.ConnectorAPIKey{CheckURL: "https://api.example.com/me"}}
		change(s)
		return s
	}
	tests := []struct {
		name    string
		spec    *v1alpha1.ConnectorSpec
		header  string
		format  string
		problem string // in the condition's message; "" means accepted
	}{
		{"defaults: a bearer token in Authorization", spec(func(*v1alpha1.ConnectorSpec) {}), "Authorization", "Bearer {key}", ""},
		{"a header of the service's own takes the bare key", spec(func(s *v1alpha1.ConnectorSpec) { s.APIKey.Header = "x-api-key" }), "X-Api-Key", "{key}", ""},
		{"a format of its own", spec(func(s *v1alpha1.ConnectorSpec) { s.APIKey.Format = "token {key}" }), "Authorization", "token {key}", ""},
		{"http to loopback", spec(func(s *v1alpha1.ConnectorSpec) { s.APIKey.CheckURL = "http://127.0.0.1:8091/me" }), "Authorization", "Bearer {key}", ""},
		{"with OAuth fields", spec(func(s *v1alpha1.ConnectorSpec) {
			s.Preset, s.ClientID = "github", "abc"
		}), "", "", "remove spec.preset, spec.clientID"},
		{"with a client secret", spec(func(s *v1alpha1.ConnectorSpec) {
			s.ClientSecretRef = v1alpha1.SecretKeyReference{Name: "s", Key: "k"}
		}), "", "", "spec.clientSecretRef"},
		{"plain http elsewhere", spec(func(s *v1alpha1.ConnectorSpec) { s.APIKey.CheckURL = "http://api.example.com/me" }), "", "", "checkURL must be https"},
		{"credentials in the URL", spec(func(s *v1alpha1.ConnectorSpec) { s.APIKey.CheckURL = "https://u:p@api.example.com/me" }), "", "", "checkURL must not carry credentials"},
		{"a fragment", spec(func(s *v1alpha1.ConnectorSpec) { s.APIKey.CheckURL = "https://api.example.com/me#x" }), "", "", "fragment"},
		{"not a URL", spec(func(s *v1alpha1.ConnectorSpec) { s.APIKey.CheckURL = "/me" }), "", "", "absolute URL"},
		{"a header HTTP owns", spec(func(s *v1alpha1.ConnectorSpec) { s.APIKey.Header = "Cookie" }), "", "", "cannot carry the key"},
		{"format without the key", spec(func(s *v1alpha1.ConnectorSpec) { s.APIKey.Format = "Bearer" }), "", "", "exactly once"},
		{"format with the key twice", spec(func(s *v1alpha1.ConnectorSpec) { s.APIKey.Format = "{key}{key}" }), "", "", "exactly once"},
		{"a line break in the format", spec(func(s *v1alpha1.ConnectorSpec) { s.APIKey.Format = "{key}\r\nX-Evil: 1" }), "", "", "exactly once"},
		{"a method other than GET or POST", spec(func(s *v1alpha1.ConnectorSpec) { s.APIKey.Method = "DELETE" }), "", "", "GET or POST"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, err := apiKeyConfig(tc.spec)
			if tc.problem == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if k.Header != tc.header || k.Format != tc.format || k.Method != http.MethodGet || k.IDField != "id" || k.NameField != "name" {
					t.Errorf("compiled %+v", *k)
				}
				return
			}
			var nr *notReady
			if !errors.As(err, &nr) || nr.reason != v1alpha1.ConnectorInvalidAPIKeyReason || !strings.Contains(nr.Error(), tc.problem) {
				t.Fatalf("error = %v; want InvalidAPIKey saying %q", err, tc.problem)
			}
		})
	}
}

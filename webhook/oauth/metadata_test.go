package oauth_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"latchkey.dev/latchkey/test/stack"

	"latchkey.dev/latchkey/internal/config"
)

func TestMetadata(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{})
	b := h.Browser()
	for _, u := range []string{
		h.Issuer + "/.well-known/oauth-authorization-server",
		h.Issuer + "/.well-known/openid-configuration",
		h.Front.URL + "/.well-known/oauth-authorization-server/team/demo",
	} {
		t.Run(strings.TrimPrefix(u, h.Front.URL), func(t *testing.T) {
			p := b.MustGet(u)
			if p.Status != http.StatusOK || p.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("%d %s", p.Status, p.Body)
			}
			var m map[string]any
			stack.MustJSON(t, p.Body, &m)
			want := map[string]any{
				"issuer":                 h.Issuer,
				"authorization_endpoint": h.Issuer + "/authorize",
				"token_endpoint":         h.Issuer + "/token",
				"registration_endpoint":  h.Issuer + "/register",
				"revocation_endpoint":    h.Issuer + "/revoke",
				"introspection_endpoint": h.Issuer + "/introspect",
				"userinfo_endpoint":      h.Issuer + "/userinfo",
				"jwks_uri":               h.Issuer + "/jwks.json",
				"authorization_response_iss_parameter_supported": true,
				"client_id_metadata_document_supported":          false,
			}
			for k, v := range want {
				if m[k] != v {
					t.Errorf("%s = %v, want %v", k, m[k], v)
				}
			}
			for k, v := range map[string][]string{
				"code_challenge_methods_supported":      {"S256"},
				"response_types_supported":              {"code"},
				"grant_types_supported":                 {"authorization_code", "client_credentials", "refresh_token", "urn:ietf:params:oauth:grant-type:jwt-bearer", "urn:ietf:params:oauth:grant-type:token-exchange", "urn:openid:params:grant-type:ciba"},
				"token_endpoint_auth_methods_supported": {"client_secret_basic", "client_secret_post", "private_key_jwt", "client_secret_jwt", "none"},
				// Exactly what verifies: DPoP proofs (mcp/dpop) and client assertions.
				"dpop_signing_alg_values_supported":                {"ES256", "EdDSA", "PS256", "RS256"},
				"token_endpoint_auth_signing_alg_values_supported": {"ES256", "EdDSA", "PS256", "RS256", "HS256"},
				"introspection_endpoint_auth_methods_supported":    {"client_secret_basic", "client_secret_post", "private_key_jwt", "client_secret_jwt"},
			} {
				if got := stack.Strings(m[k]); !slices.Equal(got, v) {
					t.Errorf("%s = %v, want %v", k, got, v)
				}
			}
			if s := stack.Strings(m["scopes_supported"]); !slices.Contains(s, "openid") || !slices.Contains(s, "read") {
				t.Errorf("scopes_supported = %v", s)
			}
		})
	}

	t.Run("closed registration is not advertised", func(t *testing.T) {
		h.Update(func(p *config.Project) {
			p.Registration = config.Registration{Mode: config.RegistrationClosed, ClientIDMetadataDocuments: true}
		})
		var m map[string]any
		stack.MustJSON(t, b.MustGet(h.Issuer+"/.well-known/oauth-authorization-server").Body, &m)
		if _, ok := m["registration_endpoint"]; ok {
			t.Error("registration_endpoint advertised while registration is closed")
		}
		if m["client_id_metadata_document_supported"] != true {
			t.Error("client_id_metadata_document_supported should follow the project")
		}
	})

	t.Run("unknown project", func(t *testing.T) {
		for _, u := range []string{h.Front.URL + "/team/nope/.well-known/oauth-authorization-server", h.Front.URL + "/.well-known/oauth-authorization-server/team/nope"} {
			p := b.MustGet(u)
			if p.Status != http.StatusNotFound || !strings.Contains(p.Body, `"error"`) {
				t.Errorf("%s: %d %s", u, p.Status, p.Body)
			}
		}
		p := b.MustGet(h.Front.URL + "/team/nope/sign-in")
		if p.Status != http.StatusNotFound || !strings.Contains(p.Header.Get("Content-Type"), "text/html") {
			t.Errorf("unknown project page: %d %s", p.Status, p.Header.Get("Content-Type"))
		}
	})

	t.Run("jwks", func(t *testing.T) {
		var set struct {
			Keys []map[string]any `json:"keys"`
		}
		stack.MustJSON(t, b.MustGet(h.Issuer+"/jwks.json").Body, &set)
		if len(set.Keys) != 1 || set.Keys[0]["kid"] != "k1" || set.Keys[0]["d"] != nil {
			t.Fatalf("jwks = %v", set)
		}
	})

	t.Run("health", func(t *testing.T) {
		if p := b.MustGet(h.Front.URL + "/-/healthz"); p.Status != 200 {
			t.Error("healthz", p.Status)
		}
		if p := b.MustGet(h.Front.URL + "/-/readyz"); p.Status != 200 {
			t.Error("readyz", p.Status, p.Body)
		}
		if p := b.MustGet(h.Front.URL + "/-/static/latchkey.css"); p.Status != 200 || !strings.Contains(p.Header.Get("Content-Type"), "text/css") {
			t.Error("static", p.Status, p.Header)
		}
	})
}

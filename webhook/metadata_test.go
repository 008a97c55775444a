package webhook_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/config"
)

func TestMetadata(t *testing.T) {
	h := newHarness(t)
	b := h.browser()
	for _, u := range []string{
		h.base + "/.well-known/oauth-authorization-server",
		h.base + "/.well-known/openid-configuration",
		h.ts.URL + "/.well-known/oauth-authorization-server/team/demo",
	} {
		t.Run(strings.TrimPrefix(u, h.ts.URL), func(t *testing.T) {
			p := b.get(u)
			if p.status != http.StatusOK || p.header.Get("Content-Type") != "application/json" {
				t.Fatalf("%d %s", p.status, p.body)
			}
			var m map[string]any
			mustJSON(t, p.body, &m)
			want := map[string]any{
				"issuer":                 h.base,
				"authorization_endpoint": h.base + "/authorize",
				"token_endpoint":         h.base + "/token",
				"registration_endpoint":  h.base + "/register",
				"revocation_endpoint":    h.base + "/revoke",
				"introspection_endpoint": h.base + "/introspect",
				"userinfo_endpoint":      h.base + "/userinfo",
				"jwks_uri":               h.base + "/jwks.json",
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
				if got := strs(m[k]); !slices.Equal(got, v) {
					t.Errorf("%s = %v, want %v", k, got, v)
				}
			}
			if s := strs(m["scopes_supported"]); !slices.Contains(s, "openid") || !slices.Contains(s, "read") {
				t.Errorf("scopes_supported = %v", s)
			}
		})
	}

	t.Run("closed registration is not advertised", func(t *testing.T) {
		h.update(func(p *config.Project) {
			p.Registration = config.Registration{Mode: config.RegistrationClosed, ClientIDMetadataDocuments: true}
		})
		var m map[string]any
		mustJSON(t, b.get(h.base+"/.well-known/oauth-authorization-server").body, &m)
		if _, ok := m["registration_endpoint"]; ok {
			t.Error("registration_endpoint advertised while registration is closed")
		}
		if m["client_id_metadata_document_supported"] != true {
			t.Error("client_id_metadata_document_supported should follow the project")
		}
	})

	t.Run("unknown project", func(t *testing.T) {
		for _, u := range []string{h.ts.URL + "/team/nope/.well-known/oauth-authorization-server", h.ts.URL + "/.well-known/oauth-authorization-server/team/nope"} {
			p := b.get(u)
			if p.status != http.StatusNotFound || !strings.Contains(p.body, `"error"`) {
				t.Errorf("%s: %d %s", u, p.status, p.body)
			}
		}
		p := b.get(h.ts.URL + "/team/nope/sign-in")
		if p.status != http.StatusNotFound || !strings.Contains(p.header.Get("Content-Type"), "text/html") {
			t.Errorf("unknown project page: %d %s", p.status, p.header.Get("Content-Type"))
		}
	})

	t.Run("jwks", func(t *testing.T) {
		var set struct {
			Keys []map[string]any `json:"keys"`
		}
		mustJSON(t, b.get(h.base+"/jwks.json").body, &set)
		if len(set.Keys) != 1 || set.Keys[0]["kid"] != "k1" || set.Keys[0]["d"] != nil {
			t.Fatalf("jwks = %v", set)
		}
	})

	t.Run("health", func(t *testing.T) {
		if p := b.get(h.ts.URL + "/-/healthz"); p.status != 200 {
			t.Error("healthz", p.status)
		}
		if p := b.get(h.ts.URL + "/-/readyz"); p.status != 200 {
			t.Error("readyz", p.status, p.body)
		}
		if p := b.get(h.ts.URL + "/-/static/latchkey.css"); p.status != 200 || !strings.Contains(p.header.Get("Content-Type"), "text/css") {
			t.Error("static", p.status, p.header)
		}
	})
}

func strs(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, x := range l {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

package webhook_test

import (
	"net/http"
	"net/url"
	"testing"

	"latchkey.dev/latchkey/internal/config"
)

// A client that registered itself with client_credentials gets tokens that name no person and
// reach no resource server: any resource it names is invalid_target, any scope it did not
// register is invalid_scope, until the Project's registration policy lists a resource or scope.
func TestSelfRegisteredClientCredentialsReachNothing(t *testing.T) {
	h := newHarness(t)
	r := h.jsonReq(http.MethodPost, h.base+"/register", "", `{"grant_types":["client_credentials"],"client_name":"Batch"}`)
	if r.status != 201 {
		t.Fatalf("registration: %d %s", r.status, r.raw)
	}
	id, sec := r.str("client_id"), r.str("client_secret")
	cc := func(extra url.Values) tokenResult {
		f := url.Values{"grant_type": {"client_credentials"}}
		for k, v := range extra {
			f[k] = v
		}
		return h.token(f, id, sec)
	}

	for name, c := range map[string]struct {
		form url.Values
		code string
	}{
		"an MCP server's URL":          {url.Values{"resource": {"https://mcp.example/mcp"}}, "invalid_target"},
		"a declared client's resource": {url.Values{"resource": {"https://api.example/"}}, "invalid_target"},
		"a scope it never registered":  {url.Values{"scope": {"read"}}, "invalid_scope"},
	} {
		t.Run(name, func(t *testing.T) {
			tr := cc(c.form)
			if tr.status != 400 || tr.str("error") != c.code || tr.str("error_description") == "" || tr.str("access_token") != "" {
				t.Fatalf("%d %s, want 400 %s", tr.status, tr.raw, c.code)
			}
			if tr.header.Get("Cache-Control") != "no-store" || tr.header.Get("Content-Type") != "application/json" {
				t.Errorf("headers %v", tr.header)
			}
		})
	}

	t.Run("without a resource: a token for nobody", func(t *testing.T) {
		tr := cc(nil)
		if tr.status != 200 {
			t.Fatalf("%d %s", tr.status, tr.raw)
		}
		in := h.introspect(tr.str("access_token"))
		if _, hasSub := in.json["sub"]; in.json["active"] != true || hasSub || in.json["aud"] != nil ||
			in.str("latchkey_subject_type") != "client" || in.str("client_id") != id {
			t.Errorf("introspection %s", in.raw)
		}
	})

	t.Run("a resource and scope the registration policy lists", func(t *testing.T) {
		h.update(func(p *config.Project) {
			p.Registration.ClientCredentialsResources = []string{"https://reports.example/api"}
			p.Registration.ClientCredentialsScopes = []string{"reports:read", "reports:write"}
		})
		tr := cc(url.Values{"resource": {"https://reports.example/api"}, "scope": {"reports:read"}})
		if tr.status != 200 || tr.str("scope") != "reports:read" {
			t.Fatalf("%d %s", tr.status, tr.raw)
		}
		if tr := cc(url.Values{"scope": {"admin"}}); tr.status != 400 || tr.str("error") != "invalid_scope" {
			t.Errorf("a scope the policy does not list: %d %s", tr.status, tr.raw)
		}
		// A client that registered a scope gets no more than that, whatever the policy lists.
		r := h.jsonReq(http.MethodPost, h.base+"/register", "", `{"grant_types":["client_credentials"],"scope":"reports:read other"}`)
		narrow := h.token(url.Values{"grant_type": {"client_credentials"}}, r.str("client_id"), r.str("client_secret"))
		if narrow.status != 200 || narrow.str("scope") != "reports:read" {
			t.Errorf("default scope of a client that registered one: %d %s", narrow.status, narrow.raw)
		}
		if aud := strs(h.introspect(tr.str("access_token")).json["aud"]); len(aud) != 1 || aud[0] != "https://reports.example/api" {
			t.Errorf("aud %v", aud)
		}
		if tr := cc(url.Values{"resource": {"https://mcp.example/mcp"}}); tr.status != 400 || tr.str("error") != "invalid_target" {
			t.Errorf("a resource the policy does not list: %d %s", tr.status, tr.raw)
		}
	})
}

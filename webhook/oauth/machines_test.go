package oauth_test

import (
	"net/http"
	"net/url"
	"testing"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/test/stack"
)

// A client that registered itself with client_credentials gets tokens that name no person and
// reach no resource server: any resource it names is invalid_target, any scope it did not
// register is invalid_scope, until the Project's registration policy lists a resource or scope.
func TestSelfRegisteredClientCredentialsReachNothing(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{})
	r := h.SendJSON(http.MethodPost, h.Issuer+"/register", "", `{"grant_types":["client_credentials"],"client_name":"Batch"}`)
	if r.Status != 201 {
		t.Fatalf("registration: %d %s", r.Status, r.Raw)
	}
	id, sec := r.Str("client_id"), r.Str("client_secret")
	cc := func(extra url.Values) stack.Answer {
		f := url.Values{"grant_type": {"client_credentials"}}
		for k, v := range extra {
			f[k] = v
		}
		return h.Token(f, id, sec)
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
			if tr.Status != 400 || tr.Str("error") != c.code || tr.Str("error_description") == "" || tr.Str("access_token") != "" {
				t.Fatalf("%d %s, want 400 %s", tr.Status, tr.Raw, c.code)
			}
			if tr.Header.Get("Cache-Control") != "no-store" || tr.Header.Get("Content-Type") != "application/json" {
				t.Errorf("headers %v", tr.Header)
			}
		})
	}

	t.Run("without a resource: a token for nobody", func(t *testing.T) {
		tr := cc(nil)
		if tr.Status != 200 {
			t.Fatalf("%d %s", tr.Status, tr.Raw)
		}
		in := h.Introspect(tr.Str("access_token"))
		if _, hasSub := in.Body["sub"]; in.Body["active"] != true || hasSub || in.Body["aud"] != nil ||
			in.Str("latchkey_subject_type") != "client" || in.Str("client_id") != id {
			t.Errorf("introspection %s", in.Raw)
		}
	})

	t.Run("a resource and scope the registration policy lists", func(t *testing.T) {
		h.Update(func(p *config.Project) {
			p.Registration.ClientCredentialsResources = []string{"https://reports.example/api"}
			p.Registration.ClientCredentialsScopes = []string{"reports:read", "reports:write"}
		})
		tr := cc(url.Values{"resource": {"https://reports.example/api"}, "scope": {"reports:read"}})
		if tr.Status != 200 || tr.Str("scope") != "reports:read" {
			t.Fatalf("%d %s", tr.Status, tr.Raw)
		}
		if tr := cc(url.Values{"scope": {"admin"}}); tr.Status != 400 || tr.Str("error") != "invalid_scope" {
			t.Errorf("a scope the policy does not list: %d %s", tr.Status, tr.Raw)
		}
		// A client that registered a scope gets no more than that, whatever the policy lists.
		r := h.SendJSON(http.MethodPost, h.Issuer+"/register", "", `{"grant_types":["client_credentials"],"scope":"reports:read other"}`)
		narrow := h.Token(url.Values{"grant_type": {"client_credentials"}}, r.Str("client_id"), r.Str("client_secret"))
		if narrow.Status != 200 || narrow.Str("scope") != "reports:read" {
			t.Errorf("default scope of a client that registered one: %d %s", narrow.Status, narrow.Raw)
		}
		if aud := stack.Strings(h.Introspect(tr.Str("access_token")).Body["aud"]); len(aud) != 1 || aud[0] != "https://reports.example/api" {
			t.Errorf("aud %v", aud)
		}
		if tr := cc(url.Values{"resource": {"https://mcp.example/mcp"}}); tr.Status != 400 || tr.Str("error") != "invalid_target" {
			t.Errorf("a resource the policy does not list: %d %s", tr.Status, tr.Raw)
		}
	})
}

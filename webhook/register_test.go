package webhook_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
)

func (h *harness) jsonReq(method, u, bearer, body string) tokenResult {
	h.t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	return h.send(req)
}

func TestRegistration(t *testing.T) {
	h := newHarness(t)
	reg := func(body string) tokenResult { return h.jsonReq(http.MethodPost, h.base+"/register", "", body) }

	t.Run("validation", func(t *testing.T) {
		long := strings.Repeat("a", 101)
		for name, c := range map[string]struct{ body, code string }{
			"no redirect":            {`{"token_endpoint_auth_method":"none"}`, "invalid_redirect_uri"},
			"relative redirect":      {`{"redirect_uris":["/cb"]}`, "invalid_redirect_uri"},
			"fragment":               {`{"redirect_uris":["https://a.example/cb#x"]}`, "invalid_redirect_uri"},
			"http non-loopback":      {`{"redirect_uris":["http://a.example/cb"]}`, "invalid_redirect_uri"},
			"userinfo":               {`{"redirect_uris":["https://claude.ai@evil.example/cb"]}`, "invalid_redirect_uri"},
			"javascript":             {`{"redirect_uris":["javascript:alert(1)"]}`, "invalid_redirect_uri"},
			"non reverse-domain":     {`{"redirect_uris":["myapp:/cb"]}`, "invalid_redirect_uri"},
			"space":                  {`{"redirect_uris":["https://a.example/c b"]}`, "invalid_redirect_uri"},
			"too many redirects":     {`{"redirect_uris":[` + strings.Repeat(`"https://a.example/cb",`, 21) + `"https://a.example/x"]}`, "invalid_redirect_uri"},
			"auth method":            {`{"redirect_uris":["https://a.example/cb"],"token_endpoint_auth_method":"private_key_jwt"}`, "invalid_client_metadata"},
			"implicit":               {`{"redirect_uris":["https://a.example/cb"],"grant_types":["implicit"],"response_types":["token"]}`, "invalid_client_metadata"},
			"response type mismatch": {`{"redirect_uris":["https://a.example/cb"],"grant_types":["authorization_code"],"response_types":[]}`, "invalid_client_metadata"},
			"cc public":              {`{"grant_types":["client_credentials"],"token_endpoint_auth_method":"none"}`, "invalid_client_metadata"},
			"refresh alone":          {`{"grant_types":["refresh_token"]}`, "invalid_client_metadata"},
			"long name":              {`{"redirect_uris":["https://a.example/cb"],"client_name":"` + long + `"}`, "invalid_client_metadata"},
			"control in name":        {`{"redirect_uris":["https://a.example/cb"],"client_name":"Claude\u202e"}`, "invalid_client_metadata"},
			"http logo":              {`{"redirect_uris":["https://a.example/cb"],"logo_uri":"http://a.example/l.png"}`, "invalid_client_metadata"},
			"http client_uri":        {`{"redirect_uris":["https://a.example/cb"],"client_uri":"http://a.example/"}`, "invalid_client_metadata"},
			"http tos":               {`{"redirect_uris":["https://a.example/cb"],"tos_uri":"ftp://a.example/"}`, "invalid_client_metadata"},
			"wrong type":             {`{"redirect_uris":"https://a.example/cb"}`, "invalid_client_metadata"},
			"not an object":          {`["https://a.example/cb"]`, "invalid_client_metadata"},
			"not json":               {`{redirect_uris`, "invalid_client_metadata"},
			"bad scope":              {`{"redirect_uris":["https://a.example/cb"],"scope":"a\"b"}`, "invalid_client_metadata"},
		} {
			t.Run(name, func(t *testing.T) {
				r := reg(c.body)
				if r.status != 400 || r.str("error") != c.code {
					t.Errorf("%d %s", r.status, r.raw)
				}
			})
		}
		if r := reg(`{"redirect_uris":["https://a.example/cb"],"x":"` + strings.Repeat("a", 70<<10) + `"}`); r.status != http.StatusRequestEntityTooLarge {
			t.Errorf("oversized: %d %s", r.status, r.raw)
		}
		req, _ := http.NewRequest(http.MethodPost, h.base+"/register", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "text/plain")
		if r := h.send(req); r.status != 400 {
			t.Errorf("text/plain: %d", r.status)
		}
	})

	var regToken, clientID, clientURI string
	t.Run("public client registers and connects", func(t *testing.T) {
		r := reg(`{"redirect_uris":["http://127.0.0.1/callback","https://claude.ai/api/mcp/auth_callback"],
			"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"],
			"client_name":"Claude","client_uri":"https://claude.ai","unknown_member":{"x":1}}`)
		if r.status != http.StatusCreated || r.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("%d %s", r.status, r.raw)
		}
		clientID, regToken, clientURI = r.str("client_id"), r.str("registration_access_token"), r.str("registration_client_uri")
		if clientID == "" || r.str("client_secret") != "" || !strings.HasPrefix(regToken, secret.PrefixRegToken) ||
			clientURI != h.base+"/register/"+clientID || r.json["client_id_issued_at"] == nil || r.json["unknown_member"] != nil {
			t.Fatalf("registration response %s", r.raw)
		}
		c, err := h.store.GetClient(context.Background(), projectKey, clientID)
		if err != nil || !secret.HashEqual(regToken, c.RegistrationTokenHash) {
			t.Fatalf("stored client %+v %v", c, err)
		}

		b := h.browser()
		pk := newPKCE()
		p := b.get(authorizeURL(h, clientID, "https://claude.ai/api/mcp/auth_callback", "", pk, nil))
		p = b.submitSignIn(b.get(p.location()), "alice@example.com", alicePass)
		p = b.get(p.continueURL())
		if !strings.Contains(p.body, "calls itself <strong>“Claude”</strong>") || !strings.Contains(p.body, "https://claude.ai/api/mcp/auth_callback") {
			t.Errorf("consent page must show the name as a claim and the address in full:\n%s", p.body)
		}
		loc, _ := b.authorize(authorizeURL(h, clientID, "http://127.0.0.1:41234/callback", "", pk, nil), "alice@example.com", alicePass)
		tr := h.token(url.Values{"grant_type": {"authorization_code"}, "client_id": {clientID}, "code": {loc.Query().Get("code")},
			"redirect_uri": {"http://127.0.0.1:41234/callback"}, "code_verifier": {pk.verifier}}, "", "")
		if tr.status != 200 || tr.str("refresh_token") == "" {
			t.Fatalf("%d %s", tr.status, tr.raw)
		}
	})

	var secretValue string
	t.Run("confidential client", func(t *testing.T) {
		r := reg(`{"grant_types":["client_credentials"],"client_name":"Batch"}`)
		if r.status != 201 || !strings.HasPrefix(r.str("client_secret"), secret.PrefixClientSecret) || r.json["client_secret_expires_at"] != float64(0) {
			t.Fatalf("%d %s", r.status, r.raw)
		}
		secretValue = r.str("client_secret")
		if tr := h.token(url.Values{"grant_type": {"client_credentials"}}, r.str("client_id"), secretValue); tr.status != 200 {
			t.Errorf("%d %s", tr.status, tr.raw)
		}
		if tr := h.token(url.Values{"grant_type": {"client_credentials"}, "client_id": {r.str("client_id")}, "client_secret": {secretValue}}, "", ""); tr.status != 200 {
			t.Errorf("client_secret_post: %d %s", tr.status, tr.raw)
		}
	})

	t.Run("RFC 7592", func(t *testing.T) {
		if r := h.jsonReq(http.MethodGet, clientURI, "lk_rat_wrong", ""); r.status != 401 || r.str("error") != "invalid_token" {
			t.Errorf("wrong token: %d %s", r.status, r.raw)
		}
		if r := h.jsonReq(http.MethodGet, h.base+"/register/nope", regToken, ""); r.status != 401 {
			t.Errorf("unknown client: %d", r.status)
		}
		r := h.jsonReq(http.MethodGet, clientURI, regToken, "")
		if r.status != 200 || r.str("client_id") != clientID || r.str("client_name") != "Claude" || r.str("registration_access_token") != "" {
			t.Fatalf("read: %d %s", r.status, r.raw)
		}
		if r := h.jsonReq(http.MethodPut, clientURI, regToken, `{"client_id":"other","redirect_uris":["https://a.example/cb"],"token_endpoint_auth_method":"none"}`); r.status != 400 {
			t.Errorf("put with another client_id: %d", r.status)
		}
		if r := h.jsonReq(http.MethodPut, clientURI, regToken, `{"client_id":"`+clientID+`","redirect_uris":["http://evil.example/cb"],"token_endpoint_auth_method":"none"}`); r.str("error") != "invalid_redirect_uri" {
			t.Errorf("put with a bad redirect: %s", r.raw)
		}
		r = h.jsonReq(http.MethodPut, clientURI, regToken, `{"client_id":"`+clientID+`","redirect_uris":["https://claude.ai/api/mcp/auth_callback"],"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"],"client_name":"Claude 2"}`)
		if r.status != 200 || r.str("client_name") != "Claude 2" || len(strs(r.json["redirect_uris"])) != 1 {
			t.Fatalf("update: %d %s", r.status, r.raw)
		}
		if p := h.browser().get(authorizeURL(h, clientID, "http://127.0.0.1/callback", "", newPKCE(), nil)); p.status != 400 || p.location() != "" {
			t.Errorf("a removed redirect must not be used: %d %q", p.status, p.location())
		}
		req, _ := http.NewRequest(http.MethodDelete, clientURI, nil)
		req.Header.Set("Authorization", "Bearer "+regToken)
		if r := h.send(req); r.status != http.StatusNoContent {
			t.Fatalf("delete: %d %s", r.status, r.raw)
		}
		if r := h.jsonReq(http.MethodGet, clientURI, regToken, ""); r.status != 401 {
			t.Errorf("after delete: %d", r.status)
		}
	})

	t.Run("closed", func(t *testing.T) {
		h.update(func(p *config.Project) { p.Registration.Mode = config.RegistrationClosed })
		if r := reg(`{"redirect_uris":["https://a.example/cb"]}`); r.status != 403 || r.str("error") != "access_denied" {
			t.Errorf("%d %s", r.status, r.raw)
		}
	})
	t.Run("initial access token", func(t *testing.T) {
		h.update(func(p *config.Project) {
			p.Registration = config.Registration{Mode: config.RegistrationInitialAccessToken, InitialAccessTokenHashes: [][]byte{secret.Hash("other"), secret.Hash(iatToken)}}
		})
		body := `{"redirect_uris":["https://a.example/cb"]}`
		if r := reg(body); r.status != 401 || r.str("error") != "invalid_token" {
			t.Errorf("without token: %d %s", r.status, r.raw)
		}
		if r := h.jsonReq(http.MethodPost, h.base+"/register", "wrong", body); r.status != 401 {
			t.Errorf("wrong token: %d", r.status)
		}
		if r := h.jsonReq(http.MethodPost, h.base+"/register", iatToken, body); r.status != 201 {
			t.Errorf("with token: %d %s", r.status, r.raw)
		}
	})
	t.Run("policy refuses at registration", func(t *testing.T) {
		h.update(func(p *config.Project) { p.Registration = config.Registration{Mode: config.RegistrationOpen} })
		h.srv.Env().RedirectPolicy = func(_ *config.Project, uris []string) error {
			for _, u := range uris {
				if strings.Contains(u, "evil") {
					return policyError("This organisation only allows recognised apps to connect")
				}
			}
			return nil
		}
		defer func() { h.srv.Env().RedirectPolicy = func(*config.Project, []string) error { return nil } }()
		r := reg(`{"redirect_uris":["https://claude.ai/api/mcp/auth_callback","https://evil.example/cb"],"token_endpoint_auth_method":"none"}`)
		if r.status != 400 || r.str("error") != "invalid_redirect_uri" || !strings.Contains(r.str("error_description"), "recognised apps") {
			t.Errorf("%d %s", r.status, r.raw)
		}
	})
}

package register_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/test/stack"
)

// initialAccessToken is the initial access token the project accepts in the test of that mode.
const initialAccessToken = "lk_iat_initial-access-token-for-tests"

func TestRegistration(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{})
	reg := func(body string) stack.Answer { return h.SendJSON(http.MethodPost, h.Issuer+"/register", "", body) }

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
				if r.Status != 400 || r.Str("error") != c.code {
					t.Errorf("%d %s", r.Status, r.Raw)
				}
			})
		}
		if r := reg(`{"redirect_uris":["https://a.example/cb"],"x":"` + strings.Repeat("a", 70<<10) + `"}`); r.Status != http.StatusRequestEntityTooLarge {
			t.Errorf("oversized: %d %s", r.Status, r.Raw)
		}
		req, _ := http.NewRequest(http.MethodPost, h.Issuer+"/register", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "text/plain")
		if r := h.Send(req); r.Status != 400 {
			t.Errorf("text/plain: %d", r.Status)
		}
	})

	var regToken, clientID, clientURI string
	t.Run("public client registers and connects", func(t *testing.T) {
		r := reg(`{"redirect_uris":["http://127.0.0.1/callback","https://claude.ai/api/mcp/auth_callback"],
			"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"],
			"client_name":"Claude","client_uri":"https://claude.ai","unknown_member":{"x":1}}`)
		if r.Status != http.StatusCreated || r.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("%d %s", r.Status, r.Raw)
		}
		clientID, regToken, clientURI = r.Str("client_id"), r.Str("registration_access_token"), r.Str("registration_client_uri")
		if clientID == "" || r.Str("client_secret") != "" || !strings.HasPrefix(regToken, secret.PrefixRegToken) ||
			clientURI != h.Issuer+"/register/"+clientID || r.Body["client_id_issued_at"] == nil || r.Body["unknown_member"] != nil {
			t.Fatalf("registration response %s", r.Raw)
		}
		c, err := h.Store().GetClient(context.Background(), stack.ProjectKey, clientID)
		if err != nil || !secret.HashEqual(regToken, c.RegistrationTokenHash) {
			t.Fatalf("stored client %+v %v", c, err)
		}

		b := h.Browser()
		pk := stack.NewPKCE()
		p := b.MustGet(h.AuthorizeURL(clientID, "https://claude.ai/api/mcp/auth_callback", "", pk, nil))
		p = b.MustFillSignIn(b.MustGet(p.Header.Get("Location")), "alice@example.com", stack.AlicePassword)
		p = b.MustGet(p.Continue())
		if !strings.Contains(p.Body, "calls itself <strong>“Claude”</strong>") || !strings.Contains(p.Body, "https://claude.ai/api/mcp/auth_callback") {
			t.Errorf("consent page must show the name as a claim and the address in full:\n%s", p.Body)
		}
		loc, _ := b.MustAuthorizeAt(h.AuthorizeURL(clientID, "http://127.0.0.1:41234/callback", "", pk, nil), "alice@example.com", stack.AlicePassword)
		tr := h.Token(url.Values{"grant_type": {"authorization_code"}, "client_id": {clientID}, "code": {loc.Query().Get("code")},
			"redirect_uri": {"http://127.0.0.1:41234/callback"}, "code_verifier": {pk.Verifier}}, "", "")
		if tr.Status != 200 || tr.Str("refresh_token") == "" {
			t.Fatalf("%d %s", tr.Status, tr.Raw)
		}
	})

	var secretValue string
	t.Run("confidential client", func(t *testing.T) {
		r := reg(`{"grant_types":["client_credentials"],"client_name":"Batch"}`)
		if r.Status != 201 || !strings.HasPrefix(r.Str("client_secret"), secret.PrefixClientSecret) || r.Body["client_secret_expires_at"] != float64(0) {
			t.Fatalf("%d %s", r.Status, r.Raw)
		}
		secretValue = r.Str("client_secret")
		if tr := h.Token(url.Values{"grant_type": {"client_credentials"}}, r.Str("client_id"), secretValue); tr.Status != 200 {
			t.Errorf("%d %s", tr.Status, tr.Raw)
		}
		if tr := h.Token(url.Values{"grant_type": {"client_credentials"}, "client_id": {r.Str("client_id")}, "client_secret": {secretValue}}, "", ""); tr.Status != 200 {
			t.Errorf("client_secret_post: %d %s", tr.Status, tr.Raw)
		}
	})

	t.Run("RFC 7592", func(t *testing.T) {
		if r := h.SendJSON(http.MethodGet, clientURI, "lk_rat_wrong", ""); r.Status != 401 || r.Str("error") != "invalid_token" {
			t.Errorf("wrong token: %d %s", r.Status, r.Raw)
		}
		if r := h.SendJSON(http.MethodGet, h.Issuer+"/register/nope", regToken, ""); r.Status != 401 {
			t.Errorf("unknown client: %d", r.Status)
		}
		r := h.SendJSON(http.MethodGet, clientURI, regToken, "")
		if r.Status != 200 || r.Str("client_id") != clientID || r.Str("client_name") != "Claude" || r.Str("registration_access_token") != "" {
			t.Fatalf("read: %d %s", r.Status, r.Raw)
		}
		if r := h.SendJSON(http.MethodPut, clientURI, regToken, `{"client_id":"other","redirect_uris":["https://a.example/cb"],"token_endpoint_auth_method":"none"}`); r.Status != 400 {
			t.Errorf("put with another client_id: %d", r.Status)
		}
		if r := h.SendJSON(http.MethodPut, clientURI, regToken, `{"client_id":"`+clientID+`","redirect_uris":["http://evil.example/cb"],"token_endpoint_auth_method":"none"}`); r.Str("error") != "invalid_redirect_uri" {
			t.Errorf("put with a bad redirect: %s", r.Raw)
		}
		r = h.SendJSON(http.MethodPut, clientURI, regToken, `{"client_id":"`+clientID+`","redirect_uris":["https://claude.ai/api/mcp/auth_callback"],"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"],"client_name":"Claude 2"}`)
		if r.Status != 200 || r.Str("client_name") != "Claude 2" || len(stack.Strings(r.Body["redirect_uris"])) != 1 {
			t.Fatalf("update: %d %s", r.Status, r.Raw)
		}
		if p := h.Browser().MustGet(h.AuthorizeURL(clientID, "http://127.0.0.1/callback", "", stack.NewPKCE(), nil)); p.Status != 400 || p.Header.Get("Location") != "" {
			t.Errorf("a removed redirect must not be used: %d %q", p.Status, p.Header.Get("Location"))
		}
		req, _ := http.NewRequest(http.MethodDelete, clientURI, nil)
		req.Header.Set("Authorization", "Bearer "+regToken)
		if r := h.Send(req); r.Status != http.StatusNoContent {
			t.Fatalf("delete: %d %s", r.Status, r.Raw)
		}
		if r := h.SendJSON(http.MethodGet, clientURI, regToken, ""); r.Status != 401 {
			t.Errorf("after delete: %d", r.Status)
		}
	})

	t.Run("closed", func(t *testing.T) {
		h.Update(func(p *config.Project) { p.Registration.Mode = config.RegistrationClosed })
		if r := reg(`{"redirect_uris":["https://a.example/cb"]}`); r.Status != 403 || r.Str("error") != "access_denied" {
			t.Errorf("%d %s", r.Status, r.Raw)
		}
	})
	t.Run("initial access token", func(t *testing.T) {
		h.Update(func(p *config.Project) {
			p.Registration = config.Registration{Mode: config.RegistrationInitialAccessToken, InitialAccessTokenHashes: [][]byte{secret.Hash("other"), secret.Hash(initialAccessToken)}}
		})
		body := `{"redirect_uris":["https://a.example/cb"]}`
		if r := reg(body); r.Status != 401 || r.Str("error") != "invalid_token" {
			t.Errorf("without token: %d %s", r.Status, r.Raw)
		}
		if r := h.SendJSON(http.MethodPost, h.Issuer+"/register", "wrong", body); r.Status != 401 {
			t.Errorf("wrong token: %d", r.Status)
		}
		if r := h.SendJSON(http.MethodPost, h.Issuer+"/register", initialAccessToken, body); r.Status != 201 {
			t.Errorf("with token: %d %s", r.Status, r.Raw)
		}
	})
	t.Run("policy refuses at registration", func(t *testing.T) {
		h.Update(func(p *config.Project) { p.Registration = config.Registration{Mode: config.RegistrationOpen} })
		h.Server().Env().RedirectPolicy = func(_ *config.Project, uris []string) error {
			for _, u := range uris {
				if strings.Contains(u, "evil") {
					return errors.New("This organisation only allows recognised apps to connect")
				}
			}
			return nil
		}
		defer func() { h.Server().Env().RedirectPolicy = func(*config.Project, []string) error { return nil } }()
		r := reg(`{"redirect_uris":["https://claude.ai/api/mcp/auth_callback","https://evil.example/cb"],"token_endpoint_auth_method":"none"}`)
		if r.Status != 400 || r.Str("error") != "invalid_redirect_uri" || !strings.Contains(r.Str("error_description"), "recognised apps") {
			t.Errorf("%d %s", r.Status, r.Raw)
		}
	})
}

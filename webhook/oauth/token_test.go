package oauth_test

import (
	"crypto/ecdsa"
	"encoding/base64"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/test/stack"
)

func TestClientCredentials(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{})
	cc := url.Values{"grant_type": {"client_credentials"}}

	t.Run("client_secret_post", func(t *testing.T) {
		r := h.Token(url.Values{"grant_type": {"client_credentials"}, "client_id": {"svc"}, "client_secret": {stack.ServiceSecret}, "scope": {"read"}}, "", "")
		if r.Status != 200 || r.Str("scope") != "read" || r.Str("refresh_token") != "" || !strings.HasPrefix(r.Str("access_token"), "lk_at_") {
			t.Fatalf("%d %s", r.Status, r.Raw)
		}
		// The token names no person: no sub at all, and the subject type says so.
		in := h.Introspect(r.Str("access_token"))
		if _, hasSub := in.Body["sub"]; in.Body["active"] != true || in.Str("client_id") != "svc" || hasSub ||
			in.Str("latchkey_subject_type") != "client" {
			t.Errorf("introspection %s", in.Raw)
		}
	})
	t.Run("client_secret_basic with form-encoded credentials", func(t *testing.T) {
		// RFC 6749 §2.3.1: id and secret are form-url-encoded inside the header.
		h.Update(func(p *config.Project) {
			c := *p.Clients["svc"]
			c.ID = "svc:with space"
			clients := maps.Clone(p.Clients)
			clients[c.ID] = &c
			p.Clients = clients
		})
		req, _ := http.NewRequest(http.MethodPost, h.Issuer+"/token", strings.NewReader(cc.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("svc%3Awith+space:"+url.QueryEscape(stack.ServiceSecret))))
		if r := h.Send(req); r.Status != 200 {
			t.Errorf("%d %s", r.Status, r.Raw)
		}
	})
	t.Run("default scope is the client's", func(t *testing.T) {
		if r := h.Token(cc, "svc", stack.ServiceSecret); r.Status != 200 || r.Str("scope") != "read write" {
			t.Errorf("%d %s", r.Status, r.Raw)
		}
	})
	t.Run("no resource, no audience", func(t *testing.T) {
		r := h.Token(cc, "svc", stack.ServiceSecret)
		if aud := h.Introspect(r.Str("access_token")).Body["aud"]; r.Status != 200 || aud != nil {
			t.Errorf("aud %v (%s)", aud, r.Raw)
		}
	})
	t.Run("resource becomes the audience when the client declares it", func(t *testing.T) {
		h.Update(func(p *config.Project) {
			c := *p.Clients["svc"]
			c.Resources = []string{"https://api.example/", "https://b.example/"}
			clients := maps.Clone(p.Clients)
			clients[c.ID] = &c
			p.Clients = clients
		})
		r := h.Token(url.Values{"grant_type": {"client_credentials"}, "resource": {"https://api.example/", "https://b.example/"}}, "svc", stack.ServiceSecret)
		if aud := stack.Strings(h.Introspect(r.Str("access_token")).Body["aud"]); len(aud) != 2 || aud[0] != "https://api.example/" {
			t.Errorf("aud %v (%s)", aud, r.Raw)
		}
	})

	for name, c := range map[string]struct {
		form       url.Values
		user, pass string
		status     int
		code       string
	}{
		"wrong secret":           {cc, "svc", "lk_cs_wrong", 401, "invalid_client"},
		"unknown client":         {cc, "nobody", "x", 401, "invalid_client"},
		"no client":              {cc, "", "", 401, "invalid_client"},
		"public client":          {url.Values{"grant_type": {"client_credentials"}, "client_id": {"cli"}}, "", "", 400, "unauthorized_client"},
		"secret to public":       {cc, "cli", "anything", 401, "invalid_client"},
		"two methods":            {url.Values{"grant_type": {"client_credentials"}, "client_secret": {stack.ServiceSecret}}, "svc", stack.ServiceSecret, 400, "invalid_request"},
		"confidential as public": {url.Values{"grant_type": {"client_credentials"}, "client_id": {"svc"}}, "", "", 401, "invalid_client"},
		"grant not allowed":      {url.Values{"grant_type": {"authorization_code"}, "code": {"x"}}, "svc", stack.ServiceSecret, 400, "unauthorized_client"},
		"unknown grant":          {url.Values{"grant_type": {"password"}}, "svc", stack.ServiceSecret, 400, "unsupported_grant_type"},
		"no grant":               {url.Values{}, "svc", stack.ServiceSecret, 400, "invalid_request"},
		"scope beyond client":    {url.Values{"grant_type": {"client_credentials"}, "scope": {"admin"}}, "svc", stack.ServiceSecret, 400, "invalid_scope"},
		"repeated parameter":     {url.Values{"grant_type": {"client_credentials", "client_credentials"}}, "svc", stack.ServiceSecret, 400, "invalid_request"},
		"repeated scope":         {url.Values{"grant_type": {"client_credentials"}, "scope": {"read", "write"}}, "svc", stack.ServiceSecret, 400, "invalid_request"},
		"client assertion":       {url.Values{"grant_type": {"client_credentials"}, "client_assertion": {"x"}}, "", "", 401, "invalid_client"},
		"bad resource":           {url.Values{"grant_type": {"client_credentials"}, "resource": {"https://x/#frag"}}, "svc", stack.ServiceSecret, 400, "invalid_target"},
		// A token that names no person reaches only what the OAuthClient declares.
		"undeclared resource":                    {url.Values{"grant_type": {"client_credentials"}, "resource": {"https://mcp.example/mcp"}}, "svc", stack.ServiceSecret, 400, "invalid_target"},
		"one resource undeclared":                {url.Values{"grant_type": {"client_credentials"}, "resource": {"https://api.example/", "https://mcp.example/mcp"}}, "svc", stack.ServiceSecret, 400, "invalid_target"},
		"scope from a client that declares none": {url.Values{"grant_type": {"client_credentials"}, "scope": {"read"}}, "jwt", stack.JWTSecret, 400, "invalid_scope"},
	} {
		t.Run(name, func(t *testing.T) {
			r := h.Token(c.form, c.user, c.pass)
			if r.Status != c.status || r.Str("error") != c.code {
				t.Fatalf("%d %s", r.Status, r.Raw)
			}
			if r.Header.Get("Cache-Control") != "no-store" || r.Header.Get("Content-Type") != "application/json" {
				t.Errorf("headers %v", r.Header)
			}
			if c.status == 401 && !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Basic") {
				t.Errorf("401 without a Basic challenge: %v", r.Header)
			}
		})
	}

	t.Run("not a form", func(t *testing.T) {
		for _, req := range []*http.Request{
			mustReq(http.MethodGet, h.Issuer+"/token", "", ""),
			mustReq(http.MethodPost, h.Issuer+"/token", "application/json", `{"grant_type":"client_credentials"}`),
			mustReq(http.MethodPost, h.Issuer+"/token", "application/x-www-form-urlencoded", "grant_type=%zz"),
			mustReq(http.MethodPost, h.Issuer+"/token", "application/x-www-form-urlencoded", "grant_type=client_credentials&x="+strings.Repeat("a", 70<<10)),
		} {
			r := h.Send(req)
			if r.Status < 400 || r.Status >= 500 || r.Str("error") == "" {
				t.Errorf("%s %s: %d %s", req.Method, req.Header.Get("Content-Type"), r.Status, r.Raw)
			}
		}
	})

	t.Run("jwt access tokens", func(t *testing.T) {
		r := h.Token(cc, "jwt", stack.JWTSecret)
		if r.Status != 200 {
			t.Fatal(r.Raw)
		}
		at := r.Str("access_token")
		tok, err := jwt.ParseSigned(at, []jose.SignatureAlgorithm{jose.ES256})
		if err != nil {
			t.Fatal(err)
		}
		if tok.Headers[0].KeyID != "k1" || tok.Headers[0].ExtraHeaders["typ"] != "at+jwt" {
			t.Errorf("header %+v", tok.Headers[0])
		}
		var claims struct {
			jwt.Claims
			ClientID    string `json:"client_id"`
			SubjectType string `json:"latchkey_subject_type"`
		}
		var raw map[string]any
		pub := h.Project.SigningKeys[0].Private.(*ecdsa.PrivateKey).Public()
		if err := tok.Claims(pub, &claims, &raw); err != nil {
			t.Fatal(err)
		}
		// The token names no person: no sub (where RFC 9068 would put the client id), and the
		// subject type says so, as introspection does.
		_, hasSub := raw["sub"]
		if err := claims.ValidateWithLeeway(jwt.Expected{Issuer: h.Issuer, Time: h.Clock.Now()}, 0); err != nil ||
			claims.ClientID != "jwt" || hasSub || claims.SubjectType != "client" {
			t.Errorf("claims %v %v", raw, err)
		}
		if in := h.Introspect(at); in.Str("latchkey_subject_type") != "client" || in.Body["sub"] != nil {
			t.Errorf("introspection of the JWT: %s", in.Raw)
		}
		if !h.Active(at) {
			t.Error("a JWT access token must be known to introspection")
		}
		h.MustPost("/revoke", url.Values{"token": {at}}, "jwt", stack.JWTSecret)
		if h.Active(at) {
			t.Error("a revoked JWT must be inactive at once")
		}
	})
	t.Run("jwt client without keys gets opaque tokens", func(t *testing.T) {
		h.Update(func(p *config.Project) { p.SigningKeys = nil })
		if r := h.Token(cc, "jwt", stack.JWTSecret); !strings.HasPrefix(r.Str("access_token"), "lk_at_") {
			t.Errorf("%s", r.Raw)
		}
		if p := h.Browser().MustGet(h.Issuer + "/jwks.json"); strings.TrimSpace(p.Body) != `{"keys":[]}` {
			t.Errorf("jwks without keys: %s", p.Body)
		}
	})
}

func mustReq(method, u, ct, body string) *http.Request {
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	return req
}

func TestRevocationIntrospectionUserinfo(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{})
	b := h.Browser()
	res := h.CodeFlowAs(b, "web", stack.WebSecret, "openid email profile", "alice@example.com", stack.AlicePassword)
	at, rt := res.Str("access_token"), res.Str("refresh_token")

	ui := h.Userinfo(at)
	if ui.Status != 200 || ui.Str("email") != "alice@example.com" || ui.Str("name") != "Alice" {
		t.Fatalf("userinfo %d %s", ui.Status, ui.Raw)
	}

	t.Run("introspection needs an authenticated client", func(t *testing.T) {
		r := h.MustPost("/introspect", url.Values{"token": {at}, "client_id": {"cli"}}, "", "")
		if r.Status != 401 || r.Str("error") != "invalid_client" {
			t.Errorf("%d %s", r.Status, r.Raw)
		}
		if r := h.MustPost("/introspect", url.Values{"token": {at}}, "svc", "wrong"); r.Status != 401 {
			t.Errorf("%d %s", r.Status, r.Raw)
		}
	})
	t.Run("unknown token", func(t *testing.T) {
		if h.Active("lk_at_nope") {
			t.Error("unknown token active")
		}
		if r := h.MustPost("/revoke", url.Values{"token": {"lk_at_nope"}}, "web", stack.WebSecret); r.Status != 200 {
			t.Errorf("revoking an unknown token: %d", r.Status)
		}
	})
	t.Run("another client cannot revoke", func(t *testing.T) {
		h.MustPost("/revoke", url.Values{"token": {at}}, "other", stack.OtherSecret)
		if !h.Active(at) {
			t.Error("another client revoked the token")
		}
	})
	t.Run("refresh tokens are described only to their client", func(t *testing.T) {
		if h.Active(rt) {
			t.Error("svc may not introspect web's refresh token")
		}
		r := h.MustPost("/introspect", url.Values{"token": {rt}}, "web", stack.WebSecret)
		if r.Body["active"] != true || r.Str("token_type") != "refresh_token" {
			t.Errorf("%s", r.Raw)
		}
	})
	t.Run("revoking the access token", func(t *testing.T) {
		r := h.MustPost("/revoke", url.Values{"token": {at}, "token_type_hint": {"access_token"}}, "web", stack.WebSecret)
		if r.Status != 200 || r.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("%d %s", r.Status, r.Raw)
		}
		if h.Active(at) {
			t.Error("revoked token active at introspection")
		}
		if u := h.Userinfo(at); u.Status != 401 || !strings.Contains(u.Header.Get("WWW-Authenticate"), `error="invalid_token"`) {
			t.Errorf("revoked token at userinfo: %d %v", u.Status, u.Header)
		}
	})
	t.Run("revoking the refresh token ends its family", func(t *testing.T) {
		r1 := h.RefreshAs("web", stack.WebSecret, rt)
		if r1.Status != 200 {
			t.Fatal(r1.Raw)
		}
		h.MustPost("/revoke", url.Values{"token": {r1.Str("refresh_token")}}, "web", stack.WebSecret)
		if h.Active(r1.Str("access_token")) {
			t.Error("access token of a revoked family still active")
		}
		if r := h.RefreshAs("web", stack.WebSecret, r1.Str("refresh_token")); r.Status != 400 {
			t.Error("revoked refresh token still works")
		}
	})
	t.Run("expired access token", func(t *testing.T) {
		r := h.CodeFlowAs(b, "web", stack.WebSecret, "openid", "alice@example.com", stack.AlicePassword)
		h.Clock.Advance(config.DefaultLifetimes().AccessToken + time.Second)
		if h.Active(r.Str("access_token")) || h.Userinfo(r.Str("access_token")).Status != 401 {
			t.Error("expired token accepted")
		}
	})
	t.Run("client_credentials token is for nobody", func(t *testing.T) {
		r := h.Token(url.Values{"grant_type": {"client_credentials"}}, "svc", stack.ServiceSecret)
		if u := h.Userinfo(r.Str("access_token")); u.Status != 401 {
			t.Errorf("%d %s", u.Status, u.Raw)
		}
	})
	t.Run("no token", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, h.Issuer+"/userinfo", nil)
		if r := h.Send(req); r.Status != 401 {
			t.Errorf("%d", r.Status)
		}
	})
}

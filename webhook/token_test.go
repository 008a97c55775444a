package webhook_test

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
)

func TestClientCredentials(t *testing.T) {
	h := newHarness(t)
	cc := url.Values{"grant_type": {"client_credentials"}}

	t.Run("client_secret_post", func(t *testing.T) {
		r := h.token(url.Values{"grant_type": {"client_credentials"}, "client_id": {"svc"}, "client_secret": {svcSecret}, "scope": {"read"}}, "", "")
		if r.status != 200 || r.str("scope") != "read" || r.str("refresh_token") != "" || !strings.HasPrefix(r.str("access_token"), "lk_at_") {
			t.Fatalf("%d %s", r.status, r.raw)
		}
		// The token names no person: no sub at all, and the subject type says so.
		in := h.introspect(r.str("access_token"))
		if _, hasSub := in.json["sub"]; in.json["active"] != true || in.str("client_id") != "svc" || hasSub ||
			in.str("latchkey_subject_type") != "client" {
			t.Errorf("introspection %s", in.raw)
		}
	})
	t.Run("client_secret_basic with form-encoded credentials", func(t *testing.T) {
		// RFC 6749 §2.3.1: id and secret are form-url-encoded inside the header.
		h.update(func(p *config.Project) {
			c := *p.Clients["svc"]
			c.ID = "svc:with space"
			clients := maps.Clone(p.Clients)
			clients[c.ID] = &c
			p.Clients = clients
		})
		req, _ := http.NewRequest(http.MethodPost, h.base+"/token", strings.NewReader(cc.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("svc%3Awith+space:"+url.QueryEscape(svcSecret))))
		if r := h.send(req); r.status != 200 {
			t.Errorf("%d %s", r.status, r.raw)
		}
	})
	t.Run("default scope is the client's", func(t *testing.T) {
		if r := h.token(cc, "svc", svcSecret); r.status != 200 || r.str("scope") != "read write" {
			t.Errorf("%d %s", r.status, r.raw)
		}
	})
	t.Run("no resource, no audience", func(t *testing.T) {
		r := h.token(cc, "svc", svcSecret)
		if aud := h.introspect(r.str("access_token")).json["aud"]; r.status != 200 || aud != nil {
			t.Errorf("aud %v (%s)", aud, r.raw)
		}
	})
	t.Run("resource becomes the audience when the client declares it", func(t *testing.T) {
		h.update(func(p *config.Project) {
			c := *p.Clients["svc"]
			c.Resources = []string{"https://api.example/", "https://b.example/"}
			clients := maps.Clone(p.Clients)
			clients[c.ID] = &c
			p.Clients = clients
		})
		r := h.token(url.Values{"grant_type": {"client_credentials"}, "resource": {"https://api.example/", "https://b.example/"}}, "svc", svcSecret)
		if aud := strs(h.introspect(r.str("access_token")).json["aud"]); len(aud) != 2 || aud[0] != "https://api.example/" {
			t.Errorf("aud %v (%s)", aud, r.raw)
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
		"two methods":            {url.Values{"grant_type": {"client_credentials"}, "client_secret": {svcSecret}}, "svc", svcSecret, 400, "invalid_request"},
		"confidential as public": {url.Values{"grant_type": {"client_credentials"}, "client_id": {"svc"}}, "", "", 401, "invalid_client"},
		"grant not allowed":      {url.Values{"grant_type": {"authorization_code"}, "code": {"x"}}, "svc", svcSecret, 400, "unauthorized_client"},
		"unknown grant":          {url.Values{"grant_type": {"password"}}, "svc", svcSecret, 400, "unsupported_grant_type"},
		"no grant":               {url.Values{}, "svc", svcSecret, 400, "invalid_request"},
		"scope beyond client":    {url.Values{"grant_type": {"client_credentials"}, "scope": {"admin"}}, "svc", svcSecret, 400, "invalid_scope"},
		"repeated parameter":     {url.Values{"grant_type": {"client_credentials", "client_credentials"}}, "svc", svcSecret, 400, "invalid_request"},
		"repeated scope":         {url.Values{"grant_type": {"client_credentials"}, "scope": {"read", "write"}}, "svc", svcSecret, 400, "invalid_request"},
		"client assertion":       {url.Values{"grant_type": {"client_credentials"}, "client_assertion": {"x"}}, "", "", 401, "invalid_client"},
		"bad resource":           {url.Values{"grant_type": {"client_credentials"}, "resource": {"https://x/#frag"}}, "svc", svcSecret, 400, "invalid_target"},
		// A token that names no person reaches only what the OAuthClient declares.
		"undeclared resource":                    {url.Values{"grant_type": {"client_credentials"}, "resource": {"https://mcp.example/mcp"}}, "svc", svcSecret, 400, "invalid_target"},
		"one resource undeclared":                {url.Values{"grant_type": {"client_credentials"}, "resource": {"https://api.example/", "https://mcp.example/mcp"}}, "svc", svcSecret, 400, "invalid_target"},
		"scope from a client that declares none": {url.Values{"grant_type": {"client_credentials"}, "scope": {"read"}}, "jwt", jwtSecret, 400, "invalid_scope"},
	} {
		t.Run(name, func(t *testing.T) {
			r := h.token(c.form, c.user, c.pass)
			if r.status != c.status || r.str("error") != c.code {
				t.Fatalf("%d %s", r.status, r.raw)
			}
			if r.header.Get("Cache-Control") != "no-store" || r.header.Get("Content-Type") != "application/json" {
				t.Errorf("headers %v", r.header)
			}
			if c.status == 401 && !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Basic") {
				t.Errorf("401 without a Basic challenge: %v", r.header)
			}
		})
	}

	t.Run("not a form", func(t *testing.T) {
		for _, req := range []*http.Request{
			mustReq(http.MethodGet, h.base+"/token", "", ""),
			mustReq(http.MethodPost, h.base+"/token", "application/json", `{"grant_type":"client_credentials"}`),
			mustReq(http.MethodPost, h.base+"/token", "application/x-www-form-urlencoded", "grant_type=%zz"),
			mustReq(http.MethodPost, h.base+"/token", "application/x-www-form-urlencoded", "grant_type=client_credentials&x="+strings.Repeat("a", 70<<10)),
		} {
			r := h.send(req)
			if r.status < 400 || r.status >= 500 || r.str("error") == "" {
				t.Errorf("%s %s: %d %s", req.Method, req.Header.Get("Content-Type"), r.status, r.raw)
			}
		}
	})

	t.Run("jwt access tokens", func(t *testing.T) {
		r := h.token(cc, "jwt", jwtSecret)
		if r.status != 200 {
			t.Fatal(r.raw)
		}
		at := r.str("access_token")
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
		pub := h.project.SigningKeys[0].Private.(*ecdsa.PrivateKey).Public()
		if err := tok.Claims(pub, &claims, &raw); err != nil {
			t.Fatal(err)
		}
		// The token names no person: no sub (where RFC 9068 would put the client id), and the
		// subject type says so, as introspection does.
		_, hasSub := raw["sub"]
		if err := claims.ValidateWithLeeway(jwt.Expected{Issuer: h.base, Time: h.clock.Now()}, 0); err != nil ||
			claims.ClientID != "jwt" || hasSub || claims.SubjectType != "client" {
			t.Errorf("claims %v %v", raw, err)
		}
		if in := h.introspect(at); in.str("latchkey_subject_type") != "client" || in.json["sub"] != nil {
			t.Errorf("introspection of the JWT: %s", in.raw)
		}
		if !h.active(at) {
			t.Error("a JWT access token must be known to introspection")
		}
		h.postForm("/revoke", url.Values{"token": {at}}, "jwt", jwtSecret)
		if h.active(at) {
			t.Error("a revoked JWT must be inactive at once")
		}
	})
	t.Run("jwt client without keys gets opaque tokens", func(t *testing.T) {
		h.update(func(p *config.Project) { p.SigningKeys = nil })
		if r := h.token(cc, "jwt", jwtSecret); !strings.HasPrefix(r.str("access_token"), "lk_at_") {
			t.Errorf("%s", r.raw)
		}
		if p := h.browser().get(h.base + "/jwks.json"); strings.TrimSpace(p.body) != `{"keys":[]}` {
			t.Errorf("jwks without keys: %s", p.body)
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
	h := newHarness(t)
	b := h.browser()
	res := h.codeFlow(b, "web", webSecret, "openid email profile", "alice@example.com", alicePass)
	at, rt := res.str("access_token"), res.str("refresh_token")

	ui := h.userinfo(at)
	if ui.status != 200 || ui.str("email") != "alice@example.com" || ui.str("name") != "Alice" {
		t.Fatalf("userinfo %d %s", ui.status, ui.raw)
	}

	t.Run("introspection needs an authenticated client", func(t *testing.T) {
		r := h.postForm("/introspect", url.Values{"token": {at}, "client_id": {"cli"}}, "", "")
		if r.status != 401 || r.str("error") != "invalid_client" {
			t.Errorf("%d %s", r.status, r.raw)
		}
		if r := h.postForm("/introspect", url.Values{"token": {at}}, "svc", "wrong"); r.status != 401 {
			t.Errorf("%d %s", r.status, r.raw)
		}
	})
	t.Run("unknown token", func(t *testing.T) {
		if h.active("lk_at_nope") {
			t.Error("unknown token active")
		}
		if r := h.postForm("/revoke", url.Values{"token": {"lk_at_nope"}}, "web", webSecret); r.status != 200 {
			t.Errorf("revoking an unknown token: %d", r.status)
		}
	})
	t.Run("another client cannot revoke", func(t *testing.T) {
		h.postForm("/revoke", url.Values{"token": {at}}, "other", otherSecr)
		if !h.active(at) {
			t.Error("another client revoked the token")
		}
	})
	t.Run("refresh tokens are described only to their client", func(t *testing.T) {
		if h.active(rt) {
			t.Error("svc may not introspect web's refresh token")
		}
		r := h.postForm("/introspect", url.Values{"token": {rt}}, "web", webSecret)
		if r.json["active"] != true || r.str("token_type") != "refresh_token" {
			t.Errorf("%s", r.raw)
		}
	})
	t.Run("revoking the access token", func(t *testing.T) {
		r := h.postForm("/revoke", url.Values{"token": {at}, "token_type_hint": {"access_token"}}, "web", webSecret)
		if r.status != 200 || r.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("%d %s", r.status, r.raw)
		}
		if h.active(at) {
			t.Error("revoked token active at introspection")
		}
		if u := h.userinfo(at); u.status != 401 || !strings.Contains(u.header.Get("WWW-Authenticate"), `error="invalid_token"`) {
			t.Errorf("revoked token at userinfo: %d %v", u.status, u.header)
		}
	})
	t.Run("revoking the refresh token ends its family", func(t *testing.T) {
		r1 := h.refresh("web", webSecret, rt)
		if r1.status != 200 {
			t.Fatal(r1.raw)
		}
		h.postForm("/revoke", url.Values{"token": {r1.str("refresh_token")}}, "web", webSecret)
		if h.active(r1.str("access_token")) {
			t.Error("access token of a revoked family still active")
		}
		if r := h.refresh("web", webSecret, r1.str("refresh_token")); r.status != 400 {
			t.Error("revoked refresh token still works")
		}
	})
	t.Run("expired access token", func(t *testing.T) {
		r := h.codeFlow(b, "web", webSecret, "openid", "alice@example.com", alicePass)
		h.clock.Advance(config.DefaultLifetimes().AccessToken + time.Second)
		if h.active(r.str("access_token")) || h.userinfo(r.str("access_token")).status != 401 {
			t.Error("expired token accepted")
		}
	})
	t.Run("client_credentials token is for nobody", func(t *testing.T) {
		r := h.token(url.Values{"grant_type": {"client_credentials"}}, "svc", svcSecret)
		if u := h.userinfo(r.str("access_token")); u.status != 401 {
			t.Errorf("%d %s", u.status, u.raw)
		}
	})
	t.Run("no token", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, h.base+"/userinfo", nil)
		if r := h.send(req); r.status != 401 {
			t.Errorf("%d", r.status)
		}
	})
}

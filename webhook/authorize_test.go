package webhook_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestAuthorizeErrors(t *testing.T) {
	h := newHarness(t)
	b := h.browser()
	b.signIn("", "alice@example.com", alicePass)
	pk := newPKCE()

	t.Run("never redirect to an unverified address", func(t *testing.T) {
		for name, u := range map[string]string{
			"unknown client":           authorizeURL(h, "nope", "https://app.example/cb", "", pk, nil),
			"unregistered redirect":    authorizeURL(h, "web", "https://evil.example/cb", "", pk, nil),
			"prefix of registered":     authorizeURL(h, "web", "https://app.example/cb/more", "", pk, nil),
			"same origin, other path":  authorizeURL(h, "web", "https://app.example/other", "", pk, nil),
			"case differs":             authorizeURL(h, "web", "https://APP.example/cb", "", pk, nil),
			"localhost is not literal": authorizeURL(h, "web", "http://localhost:8080/callback", "", pk, nil),
			"loopback other path":      authorizeURL(h, "web", "http://127.0.0.1:8080/other", "", pk, nil),
			"loopback other address":   authorizeURL(h, "web", "http://127.0.0.2:8080/callback", "", pk, nil),
			"loopback with userinfo":   authorizeURL(h, "web", "http://x@127.0.0.1:8080/callback", "", pk, nil),
			"missing with two":         authorizeURL(h, "web", "", "", pk, nil),
			"client_id repeated":       authorizeURL(h, "web", "https://app.example/cb", "", pk, url.Values{"client_id": {"web", "cli"}}),
		} {
			t.Run(name, func(t *testing.T) {
				p := b.get(u)
				if p.status != http.StatusBadRequest || p.location() != "" || !strings.Contains(p.header.Get("Content-Type"), "text/html") {
					t.Errorf("%d location=%q", p.status, p.location())
				}
			})
		}
	})

	t.Run("loopback port may differ", func(t *testing.T) {
		loc, _ := b.authorize(authorizeURL(h, "cli", "http://127.0.0.1:53219/callback", "", pk, nil), "", "")
		if loc.Host != "127.0.0.1:53219" || loc.Query().Get("code") == "" {
			t.Errorf("redirect %s", loc)
		}
	})

	for name, c := range map[string]struct {
		extra url.Values
		code  string
	}{
		"no code_challenge":           {url.Values{"code_challenge": {""}, "code_challenge_method": {""}}, "invalid_request"},
		"plain challenge":             {url.Values{"code_challenge_method": {"plain"}}, "invalid_request"},
		"challenge method missing":    {url.Values{"code_challenge_method": {""}}, "invalid_request"},
		"malformed challenge":         {url.Values{"code_challenge": {"short"}}, "invalid_request"},
		"implicit":                    {url.Values{"response_type": {"token"}}, "unsupported_response_type"},
		"no response_type":            {url.Values{"response_type": {""}}, "invalid_request"},
		"scope not allowed":           {url.Values{"scope": {"admin"}}, "invalid_scope"},
		"bad resource":                {url.Values{"resource": {"not-absolute"}}, "invalid_target"},
		"repeated parameter":          {url.Values{"scope": {"read", "write"}}, "invalid_request"},
		"request object":              {url.Values{"request": {"eyJ..."}}, "request_not_supported"},
		"prompt none with login":      {url.Values{"prompt": {"none login"}}, "invalid_request"},
		"prompt none, consent needed": {url.Values{"prompt": {"none"}, "scope": {"write"}}, "consent_required"},
	} {
		t.Run(name, func(t *testing.T) {
			p := b.get(authorizeURL(h, "web", "https://app.example/cb", "read", pk, c.extra))
			loc, err := url.Parse(p.location())
			if p.status != http.StatusFound || err != nil || !strings.HasPrefix(p.location(), "https://app.example/cb?") {
				t.Fatalf("%d %q", p.status, p.location())
			}
			q := loc.Query()
			if q.Get("error") != c.code || q.Get("state") != "st-web" || q.Get("iss") != h.base || q.Get("code") != "" {
				t.Errorf("response %v", q)
			}
		})
	}

	t.Run("prompt=none without a session", func(t *testing.T) {
		p := h.browser().get(authorizeURL(h, "web", "https://app.example/cb", "", pk, url.Values{"prompt": {"none"}}))
		loc, _ := url.Parse(p.location())
		if loc == nil || loc.Query().Get("error") != "login_required" {
			t.Errorf("%d %q", p.status, p.location())
		}
	})

	t.Run("not signed in goes to sign-in and back", func(t *testing.T) {
		nb := h.browser()
		p := nb.get(authorizeURL(h, "web", "https://app.example/cb", "read", pk, nil))
		if p.status != http.StatusSeeOther || !strings.HasPrefix(p.location(), "/team/demo/sign-in?") {
			t.Fatalf("%d %q", p.status, p.location())
		}
	})
}

func TestCodeFlow(t *testing.T) {
	h := newHarness(t)
	b := h.browser()
	pk := newPKCE()
	extra := url.Values{"resource": {"https://mcp.example/"}, "nonce": {"n-1"}}
	loc, consented := b.authorize(authorizeURL(h, "web", "https://app.example/cb", "openid email read", pk, extra), "alice@example.com", alicePass)
	if !consented {
		t.Fatal("first authorization must ask for consent")
	}
	q := loc.Query()
	if q.Get("state") != "st-web" || q.Get("iss") != h.base || !strings.HasPrefix(q.Get("code"), "lk_ac_") {
		t.Fatalf("authorization response %v", q)
	}

	redeem := url.Values{"grant_type": {"authorization_code"}, "code": {q.Get("code")}, "redirect_uri": {"https://app.example/cb"}}
	t.Run("wrong verifier", func(t *testing.T) {
		// A wrong verifier uses the code up: guessing gets one try.
		loc, _ := b.authorize(authorizeURL(h, "web", "https://app.example/cb", "read", pk, nil), "", "")
		r := h.token(url.Values{"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")},
			"redirect_uri": {"https://app.example/cb"}, "code_verifier": {newPKCE().verifier}}, "web", webSecret)
		if r.status != 400 || r.str("error") != "invalid_grant" {
			t.Errorf("%d %s", r.status, r.raw)
		}
	})
	t.Run("missing verifier", func(t *testing.T) {
		r := h.token(redeem, "web", webSecret)
		if r.status != 400 || r.str("error") != "invalid_request" {
			t.Errorf("%d %s", r.status, r.raw)
		}
	})

	redeem.Set("code_verifier", pk.verifier)
	res := h.token(redeem, "web", webSecret)
	if res.status != 200 || res.header.Get("Cache-Control") != "no-store" || res.header.Get("Pragma") != "no-cache" {
		t.Fatalf("redeem: %d %s %v", res.status, res.raw, res.header)
	}
	at, rt := res.str("access_token"), res.str("refresh_token")
	if !strings.HasPrefix(at, "lk_at_") || !strings.HasPrefix(rt, "lk_rt_") || res.str("token_type") != "Bearer" || res.str("scope") != "openid email read" || res.str("id_token") == "" {
		t.Fatalf("token response %s", res.raw)
	}

	t.Run("introspection", func(t *testing.T) {
		r := h.introspect(at)
		if r.json["active"] != true || r.str("client_id") != "web" || r.str("scope") != "openid email read" ||
			r.str("token_type") != "Bearer" || r.json["exp"] == nil || r.json["iat"] == nil || r.str("sub") == "" ||
			r.str("latchkey_subject_type") != "person" {
			t.Errorf("%s", r.raw)
		}
		if aud := strs(r.json["aud"]); len(aud) != 1 || aud[0] != "https://mcp.example/" {
			t.Errorf("aud = %v", aud)
		}
	})
	t.Run("userinfo", func(t *testing.T) {
		r := h.userinfo(at)
		if r.status != 200 || r.str("email") != "alice@example.com" || r.str("sub") == "" || r.str("name") != "" {
			t.Errorf("%d %s", r.status, r.raw)
		}
	})
	t.Run("consent remembered", func(t *testing.T) {
		loc, consented := b.authorize(authorizeURL(h, "web", "https://app.example/cb", "read", newPKCE(), nil), "", "")
		if consented || loc.Query().Get("code") == "" {
			t.Errorf("consent asked again for granted scopes (consented=%v)", consented)
		}
		g, err := h.store.GetGrant(context.Background(), projectKey, r0(h, at), "web")
		if err != nil || len(g.Scopes) != 3 {
			t.Errorf("grant %+v %v", g, err)
		}
	})
	t.Run("new scope asks again", func(t *testing.T) {
		if _, consented := b.authorize(authorizeURL(h, "web", "https://app.example/cb", "read write", newPKCE(), nil), "", ""); !consented {
			t.Error("a new scope must be consented to")
		}
	})
	t.Run("prompt=consent asks again", func(t *testing.T) {
		if _, consented := b.authorize(authorizeURL(h, "web", "https://app.example/cb", "read", newPKCE(), url.Values{"prompt": {"consent"}}), "", ""); !consented {
			t.Error("prompt=consent must ask")
		}
	})
	t.Run("prompt=login signs in again", func(t *testing.T) {
		h.clock.Advance(time.Minute)
		p := b.get(authorizeURL(h, "web", "https://app.example/cb", "read", newPKCE(), url.Values{"prompt": {"login"}}))
		if p.status != http.StatusSeeOther || !strings.Contains(p.location(), "prompt=login") {
			t.Fatalf("prompt=login: %d %q", p.status, p.location())
		}
		h.clock.Advance(time.Second)
		loc, _ := b.authorize(p.location(), "alice@example.com", alicePass)
		if loc.Query().Get("code") == "" {
			t.Errorf("no code after signing in again: %s", loc)
		}
	})
	t.Run("max_age", func(t *testing.T) {
		h.clock.Advance(10 * time.Minute)
		p := b.get(authorizeURL(h, "web", "https://app.example/cb", "read", newPKCE(), url.Values{"max_age": {"300"}}))
		if p.status != http.StatusSeeOther || !strings.Contains(p.location(), "/sign-in") {
			t.Fatalf("max_age exceeded: %d %q", p.status, p.location())
		}
		loc, _ := b.authorize(authorizeURL(h, "web", "https://app.example/cb", "read", newPKCE(), url.Values{"max_age": {"300"}}), "alice@example.com", alicePass)
		if loc.Query().Get("code") == "" {
			t.Errorf("no code: %s", loc)
		}
	})
	t.Run("deny", func(t *testing.T) {
		p := b.get(authorizeURL(h, "web", "https://app.example/cb", "read", newPKCE(), url.Values{"prompt": {"consent"}}))
		f := p.hidden()
		f.Set("decision", "deny")
		d := b.post(h.base+"/authorize", f)
		loc, _ := url.Parse(d.location())
		if d.status != http.StatusSeeOther || loc.Query().Get("error") != "access_denied" || loc.Query().Get("iss") != h.base {
			t.Errorf("deny: %d %q", d.status, d.location())
		}
		if csp := p.header.Get("Content-Security-Policy"); !strings.Contains(csp, "form-action 'self' https://app.example") {
			t.Errorf("consent CSP %q must let the answer reach the client", csp)
		}
	})
	t.Run("consent without the form token", func(t *testing.T) {
		p := b.get(authorizeURL(h, "web", "https://app.example/cb", "read", newPKCE(), url.Values{"prompt": {"consent"}}))
		f := p.hidden()
		f.Set("decision", "allow")
		f.Set("csrf_token", "forged")
		if d := b.post(h.base+"/authorize", f); d.status != http.StatusForbidden || d.location() != "" {
			t.Errorf("forged consent: %d %q", d.status, d.location())
		}
	})

	t.Run("code replay revokes what it issued", func(t *testing.T) {
		r := h.token(redeem, "web", webSecret)
		if r.status != 400 || r.str("error") != "invalid_grant" {
			t.Fatalf("replay: %d %s", r.status, r.raw)
		}
		if h.active(at) {
			t.Error("access token from a replayed code still active")
		}
		if r := h.refresh("web", webSecret, rt); r.status != 400 {
			t.Errorf("refresh token from a replayed code still works: %s", r.raw)
		}
	})
}

// r0 is the subject of a live access token.
func r0(h *harness, at string) string {
	return h.introspect(at).str("sub")
}

func TestCodeFlowPublicClient(t *testing.T) {
	h := newHarness(t)
	b := h.browser()
	pk := newPKCE()
	loc, _ := b.authorize(authorizeURL(h, "cli", "com.example.cli:/cb", "", pk, nil), "bob@example.com", bobPass)
	if !strings.HasPrefix(loc.String(), "com.example.cli:/cb?") {
		t.Fatalf("redirect %s", loc)
	}
	form := url.Values{"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")},
		"redirect_uri": {"com.example.cli:/cb"}, "code_verifier": {pk.verifier}, "client_id": {"cli"}}
	r := h.token(form, "", "")
	if r.status != 200 || r.str("refresh_token") == "" {
		t.Fatalf("%d %s", r.status, r.raw)
	}
}

func TestCodeBoundToClientAndRedirect(t *testing.T) {
	h := newHarness(t)
	b := h.browser()
	for name, tc := range map[string]struct {
		client, secret, redirect string
	}{
		"another client":       {"other", otherSecr, "https://app.example/cb"},
		"another redirect_uri": {"web", webSecret, "http://127.0.0.1/callback"},
		"no redirect_uri":      {"web", webSecret, ""},
	} {
		t.Run(name, func(t *testing.T) {
			pk := newPKCE()
			loc, _ := b.authorize(authorizeURL(h, "web", "https://app.example/cb", "", pk, nil), "alice@example.com", alicePass)
			form := url.Values{"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")}, "code_verifier": {pk.verifier}}
			if tc.redirect != "" {
				form.Set("redirect_uri", tc.redirect)
			}
			if r := h.token(form, tc.client, tc.secret); r.status != 400 || r.str("error") != "invalid_grant" {
				t.Errorf("%d %s", r.status, r.raw)
			}
		})
	}
	t.Run("expired code", func(t *testing.T) {
		pk := newPKCE()
		loc, _ := b.authorize(authorizeURL(h, "web", "https://app.example/cb", "", pk, nil), "alice@example.com", alicePass)
		h.clock.Advance(2 * time.Minute)
		r := h.token(url.Values{"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")},
			"redirect_uri": {"https://app.example/cb"}, "code_verifier": {pk.verifier}}, "web", webSecret)
		if r.status != 400 || r.str("error") != "invalid_grant" {
			t.Errorf("%d %s", r.status, r.raw)
		}
	})
}

package consent_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/test/stack"
)

func TestAuthorizeErrors(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{})
	b := h.Browser()
	b.SignInPage("", "alice@example.com", stack.AlicePassword)
	pk := stack.NewPKCE()

	t.Run("never redirect to an unverified address", func(t *testing.T) {
		for name, u := range map[string]string{
			"unknown client":           h.AuthorizeURL("nope", "https://app.example/cb", "", pk, nil),
			"unregistered redirect":    h.AuthorizeURL("web", "https://evil.example/cb", "", pk, nil),
			"prefix of registered":     h.AuthorizeURL("web", "https://app.example/cb/more", "", pk, nil),
			"same origin, other path":  h.AuthorizeURL("web", "https://app.example/other", "", pk, nil),
			"case differs":             h.AuthorizeURL("web", "https://APP.example/cb", "", pk, nil),
			"localhost is not literal": h.AuthorizeURL("web", "http://localhost:8080/callback", "", pk, nil),
			"loopback other path":      h.AuthorizeURL("web", "http://127.0.0.1:8080/other", "", pk, nil),
			"loopback other address":   h.AuthorizeURL("web", "http://127.0.0.2:8080/callback", "", pk, nil),
			"loopback with userinfo":   h.AuthorizeURL("web", "http://x@127.0.0.1:8080/callback", "", pk, nil),
			"missing with two":         h.AuthorizeURL("web", "", "", pk, nil),
			"client_id repeated":       h.AuthorizeURL("web", "https://app.example/cb", "", pk, url.Values{"client_id": {"web", "cli"}}),
		} {
			t.Run(name, func(t *testing.T) {
				p := b.MustGet(u)
				if p.Status != http.StatusBadRequest || p.Header.Get("Location") != "" || !strings.Contains(p.Header.Get("Content-Type"), "text/html") {
					t.Errorf("%d location=%q", p.Status, p.Header.Get("Location"))
				}
			})
		}
	})

	t.Run("loopback port may differ", func(t *testing.T) {
		loc, _ := b.MustAuthorizeAt(h.AuthorizeURL("cli", "http://127.0.0.1:53219/callback", "", pk, nil), "", "")
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
			p := b.MustGet(h.AuthorizeURL("web", "https://app.example/cb", "read", pk, c.extra))
			loc, err := url.Parse(p.Header.Get("Location"))
			if p.Status != http.StatusFound || err != nil || !strings.HasPrefix(p.Header.Get("Location"), "https://app.example/cb?") {
				t.Fatalf("%d %q", p.Status, p.Header.Get("Location"))
			}
			q := loc.Query()
			if q.Get("error") != c.code || q.Get("state") != "st-web" || q.Get("iss") != h.Issuer || q.Get("code") != "" {
				t.Errorf("response %v", q)
			}
		})
	}

	t.Run("prompt=none without a session", func(t *testing.T) {
		p := h.Browser().MustGet(h.AuthorizeURL("web", "https://app.example/cb", "", pk, url.Values{"prompt": {"none"}}))
		loc, _ := url.Parse(p.Header.Get("Location"))
		if loc == nil || loc.Query().Get("error") != "login_required" {
			t.Errorf("%d %q", p.Status, p.Header.Get("Location"))
		}
	})

	t.Run("not signed in goes to sign-in and back", func(t *testing.T) {
		nb := h.Browser()
		p := nb.MustGet(h.AuthorizeURL("web", "https://app.example/cb", "read", pk, nil))
		if p.Status != http.StatusSeeOther || !strings.HasPrefix(p.Header.Get("Location"), "/team/demo/sign-in?") {
			t.Fatalf("%d %q", p.Status, p.Header.Get("Location"))
		}
	})
}

func TestCodeFlow(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{})
	b := h.Browser()
	pk := stack.NewPKCE()
	extra := url.Values{"resource": {"https://mcp.example/"}, "nonce": {"n-1"}}
	loc, consented := b.MustAuthorizeAt(h.AuthorizeURL("web", "https://app.example/cb", "openid email read", pk, extra), "alice@example.com", stack.AlicePassword)
	if !consented {
		t.Fatal("first authorization must ask for consent")
	}
	q := loc.Query()
	if q.Get("state") != "st-web" || q.Get("iss") != h.Issuer || !strings.HasPrefix(q.Get("code"), "lk_ac_") {
		t.Fatalf("authorization response %v", q)
	}

	redeem := url.Values{"grant_type": {"authorization_code"}, "code": {q.Get("code")}, "redirect_uri": {"https://app.example/cb"}}
	t.Run("wrong verifier", func(t *testing.T) {
		// A wrong verifier uses the code up: guessing gets one try.
		loc, _ := b.MustAuthorizeAt(h.AuthorizeURL("web", "https://app.example/cb", "read", pk, nil), "", "")
		r := h.Token(url.Values{"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")},
			"redirect_uri": {"https://app.example/cb"}, "code_verifier": {stack.NewPKCE().Verifier}}, "web", stack.WebSecret)
		if r.Status != 400 || r.Str("error") != "invalid_grant" {
			t.Errorf("%d %s", r.Status, r.Raw)
		}
	})
	t.Run("missing verifier", func(t *testing.T) {
		r := h.Token(redeem, "web", stack.WebSecret)
		if r.Status != 400 || r.Str("error") != "invalid_request" {
			t.Errorf("%d %s", r.Status, r.Raw)
		}
	})

	redeem.Set("code_verifier", pk.Verifier)
	res := h.Token(redeem, "web", stack.WebSecret)
	if res.Status != 200 || res.Header.Get("Cache-Control") != "no-store" || res.Header.Get("Pragma") != "no-cache" {
		t.Fatalf("redeem: %d %s %v", res.Status, res.Raw, res.Header)
	}
	at, rt := res.Str("access_token"), res.Str("refresh_token")
	if !strings.HasPrefix(at, "lk_at_") || !strings.HasPrefix(rt, "lk_rt_") || res.Str("token_type") != "Bearer" || res.Str("scope") != "openid email read" || res.Str("id_token") == "" {
		t.Fatalf("token response %s", res.Raw)
	}

	t.Run("introspection", func(t *testing.T) {
		r := h.Introspect(at)
		if r.Body["active"] != true || r.Str("client_id") != "web" || r.Str("scope") != "openid email read" ||
			r.Str("token_type") != "Bearer" || r.Body["exp"] == nil || r.Body["iat"] == nil || r.Str("sub") == "" ||
			r.Str("latchkey_subject_type") != "person" {
			t.Errorf("%s", r.Raw)
		}
		if aud := stack.Strings(r.Body["aud"]); len(aud) != 1 || aud[0] != "https://mcp.example/" {
			t.Errorf("aud = %v", aud)
		}
	})
	t.Run("userinfo", func(t *testing.T) {
		r := h.Userinfo(at)
		if r.Status != 200 || r.Str("email") != "alice@example.com" || r.Str("sub") == "" || r.Str("name") != "" {
			t.Errorf("%d %s", r.Status, r.Raw)
		}
	})
	t.Run("consent remembered", func(t *testing.T) {
		loc, consented := b.MustAuthorizeAt(h.AuthorizeURL("web", "https://app.example/cb", "read", stack.NewPKCE(), nil), "", "")
		if consented || loc.Query().Get("code") == "" {
			t.Errorf("consent asked again for granted scopes (consented=%v)", consented)
		}
		g, err := h.Store().GetGrant(context.Background(), stack.ProjectKey, h.Introspect(at).Str("sub"), "web")
		if err != nil || len(g.Scopes) != 3 {
			t.Errorf("grant %+v %v", g, err)
		}
	})
	t.Run("new scope asks again", func(t *testing.T) {
		if _, consented := b.MustAuthorizeAt(h.AuthorizeURL("web", "https://app.example/cb", "read write", stack.NewPKCE(), nil), "", ""); !consented {
			t.Error("a new scope must be consented to")
		}
	})
	t.Run("prompt=consent asks again", func(t *testing.T) {
		if _, consented := b.MustAuthorizeAt(h.AuthorizeURL("web", "https://app.example/cb", "read", stack.NewPKCE(), url.Values{"prompt": {"consent"}}), "", ""); !consented {
			t.Error("prompt=consent must ask")
		}
	})
	t.Run("prompt=login signs in again", func(t *testing.T) {
		h.Clock.Advance(time.Minute)
		p := b.MustGet(h.AuthorizeURL("web", "https://app.example/cb", "read", stack.NewPKCE(), url.Values{"prompt": {"login"}}))
		if p.Status != http.StatusSeeOther || !strings.Contains(p.Header.Get("Location"), "prompt=login") {
			t.Fatalf("prompt=login: %d %q", p.Status, p.Header.Get("Location"))
		}
		h.Clock.Advance(time.Second)
		loc, _ := b.MustAuthorizeAt(p.Header.Get("Location"), "alice@example.com", stack.AlicePassword)
		if loc.Query().Get("code") == "" {
			t.Errorf("no code after signing in again: %s", loc)
		}
	})
	t.Run("max_age", func(t *testing.T) {
		h.Clock.Advance(10 * time.Minute)
		p := b.MustGet(h.AuthorizeURL("web", "https://app.example/cb", "read", stack.NewPKCE(), url.Values{"max_age": {"300"}}))
		if p.Status != http.StatusSeeOther || !strings.Contains(p.Header.Get("Location"), "/sign-in") {
			t.Fatalf("max_age exceeded: %d %q", p.Status, p.Header.Get("Location"))
		}
		loc, _ := b.MustAuthorizeAt(h.AuthorizeURL("web", "https://app.example/cb", "read", stack.NewPKCE(), url.Values{"max_age": {"300"}}), "alice@example.com", stack.AlicePassword)
		if loc.Query().Get("code") == "" {
			t.Errorf("no code: %s", loc)
		}
	})
	t.Run("deny", func(t *testing.T) {
		p := b.MustGet(h.AuthorizeURL("web", "https://app.example/cb", "read", stack.NewPKCE(), url.Values{"prompt": {"consent"}}))
		d, err := b.Press(p, "Deny")
		if err != nil {
			t.Fatal(err)
		}
		loc, _ := url.Parse(d.Header.Get("Location"))
		if d.Status != http.StatusSeeOther || loc.Query().Get("error") != "access_denied" || loc.Query().Get("iss") != h.Issuer {
			t.Errorf("deny: %d %q", d.Status, d.Header.Get("Location"))
		}
		if csp := p.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "form-action 'self' https://app.example") {
			t.Errorf("consent CSP %q must let the answer reach the client", csp)
		}
	})
	t.Run("consent without the form token", func(t *testing.T) {
		p := b.MustGet(h.AuthorizeURL("web", "https://app.example/cb", "read", stack.NewPKCE(), url.Values{"prompt": {"consent"}}))
		f, ok := p.FindForm("Allow")
		if !ok {
			t.Fatalf("no Allow button among %q", p.Buttons())
		}
		f.Fields.Set("csrf_token", "forged")
		if d, err := b.Submit(f); err != nil || d.Status != http.StatusForbidden || d.Header.Get("Location") != "" {
			t.Errorf("forged consent: %d %q", d.Status, d.Header.Get("Location"))
		}
	})

	t.Run("code replay revokes what it issued", func(t *testing.T) {
		r := h.Token(redeem, "web", stack.WebSecret)
		if r.Status != 400 || r.Str("error") != "invalid_grant" {
			t.Fatalf("replay: %d %s", r.Status, r.Raw)
		}
		if h.Active(at) {
			t.Error("access token from a replayed code still active")
		}
		if r := h.RefreshAs("web", stack.WebSecret, rt); r.Status != 400 {
			t.Errorf("refresh token from a replayed code still works: %s", r.Raw)
		}
	})
}

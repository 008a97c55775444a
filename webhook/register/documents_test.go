package register_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/clientdoc"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/register"
)

// refusal is what spec.redirects.onlyRecognisedApps answers an app it refuses.
const refusal = "This organisation only allows recognised apps to connect"

// Clients described by a client ID metadata document (their client_id is the document's
// HTTPS URL) are fetched, checked and shown for what they are.
func TestClientIDMetadataDocuments(t *testing.T) {
	t.Parallel()
	s := stack.New(t, stack.Options{})
	site := stack.NewDocSite(t)
	s.Server().Env().ClientDocument = register.ClientDocument(clientdoc.New(clientdoc.Options{AllowLoopback: true, RootCAs: site.Pool, Now: s.Clock.Now}))
	b := s.Browser()
	b.SignInPage("", stack.AliceEmail, stack.AlicePassword)
	id := site.Serve("/oauth/client.json", nil)
	host := strings.TrimPrefix(site.URL, "https://")

	p := b.MustGet(s.AuthorizeURL(id, "http://127.0.0.1/callback", "read", stack.NewPKCE(), nil))
	if p.Status != http.StatusBadRequest || !strings.Contains(p.Text(), "Unknown app") {
		t.Errorf("documents are off unless the project accepts them: %d %s", p.Status, p.Text())
	}
	s.Update(func(p *config.Project) { p.Registration.ClientIDMetadataDocuments = true })

	t.Run("happy path", func(t *testing.T) {
		pk := stack.NewPKCE()
		p := b.MustGet(s.AuthorizeURL(id, "http://127.0.0.1:41999/callback", "read", pk, nil))
		text := p.Text()
		if p.Status != http.StatusOK || strings.Index(text, "Where access goes") > strings.Index(text, "Claude Code") ||
			!strings.Contains(text, "Access goes to an app on this device") ||
			!strings.Contains(text, "The app calls itself “Claude Code”") ||
			!strings.Contains(text, host+" vouches for it: it publishes the app’s description at "+id) {
			t.Fatalf("consent page: %d\n%s", p.Status, text)
		}
		f, ok := p.FindForm("Allow")
		if !ok {
			t.Fatalf("no Allow button: %q", p.Buttons())
		}
		d, err := b.Submit(f)
		if err != nil {
			t.Fatal(err)
		}
		loc, _ := url.Parse(d.Header.Get("Location"))
		r := s.Token(url.Values{"grant_type": {"authorization_code"}, "client_id": {id}, "code": {loc.Query().Get("code")},
			"redirect_uri": {"http://127.0.0.1:41999/callback"}, "code_verifier": {pk.Verifier}}, "", "")
		if r.Status != http.StatusOK || r.Str("refresh_token") == "" {
			t.Fatalf("token: %d %s", r.Status, r.Raw)
		}
		if !s.Active(r.Str("access_token")) {
			t.Error("token not active")
		}
		rr := s.Token(url.Values{"grant_type": {"refresh_token"}, "client_id": {id}, "refresh_token": {r.Str("refresh_token")}}, "", "")
		if rr.Status != http.StatusOK {
			t.Errorf("refresh: %d %s", rr.Status, rr.Raw)
		}
		// A client described by a document has no secret to present.
		if r := s.Token(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rr.Str("refresh_token")}}, id, "guess"); r.Status != http.StatusUnauthorized {
			t.Errorf("secret for a public client: %d %s", r.Status, r.Raw)
		}
	})

	t.Run("the document's logo is not loaded", func(t *testing.T) {
		// The consent page must not make the person's browser tell the logo's server who is
		// looking (docs/decisions/0022).
		id := site.Serve("/logo.json", map[string]any{"logo_uri": "https://logo-tracker.example/l.png"})
		p := b.MustGet(s.AuthorizeURL(id, "http://127.0.0.1/callback", "read", stack.NewPKCE(), nil))
		if p.Status != http.StatusOK || strings.Contains(p.Body, "logo-tracker.example") || strings.Contains(p.Body, "<img") {
			t.Errorf("consent page: %d\n%s", p.Status, p.Body)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		big := strings.Repeat("x", clientdoc.DefaultMaxBytes)
		for name, tc := range map[string]struct {
			id, redirect, want string
		}{
			"not self-naming": {site.Serve("/a.json", map[string]any{"client_id": "https://claude.ai/oauth/client.json"}), "http://127.0.0.1/callback", "client_id must be exactly"},
			"bad redirect":    {site.Serve("/b.json", map[string]any{"redirect_uris": []string{"https://claude.ai@evil.example/cb"}}), "https://claude.ai@evil.example/cb", "redirect_uris"},
			"oversized":       {site.Serve("/c.json", map[string]any{"padding": big}), "http://127.0.0.1/callback", "larger than"},
			"secret":          {site.Serve("/d.json", map[string]any{"token_endpoint_auth_method": "client_secret_basic"}), "http://127.0.0.1/callback", "must be none"},
			"grant":           {site.Serve("/e.json", map[string]any{"grant_types": []string{"authorization_code", "urn:ietf:params:oauth:grant-type:token-exchange"}}), "http://127.0.0.1/callback", "not available to clients described by a document"},
			"missing":         {site.URL + "/nothing.json", "http://127.0.0.1/callback", "HTTP 404"},
			"query":           {site.URL + "/a.json?x=1", "http://127.0.0.1/callback", "query"},
		} {
			t.Run(name, func(t *testing.T) {
				p := b.MustGet(s.AuthorizeURL(tc.id, tc.redirect, "read", stack.NewPKCE(), nil))
				if p.Status != http.StatusBadRequest || p.Header.Get("Location") != "" || !strings.Contains(p.Text(), "This app cannot be used") || !strings.Contains(p.Text(), tc.want) {
					t.Errorf("%d %q\n%s", p.Status, p.Header.Get("Location"), p.Text())
				}
				// The same client at the token endpoint is unknown: the client's mistake, not a 500.
				if r := s.Token(url.Values{"grant_type": {"authorization_code"}, "client_id": {tc.id}, "code": {"x"}, "code_verifier": {stack.NewPKCE().Verifier}}, "", ""); r.Status != http.StatusUnauthorized || r.Str("error") != "invalid_client" {
					t.Errorf("token endpoint: %d %s", r.Status, r.Raw)
				}
			})
		}
	})

	t.Run("private address", func(t *testing.T) {
		strict := register.ClientDocument(clientdoc.New(clientdoc.Options{RootCAs: site.Pool, Now: s.Clock.Now}))
		env := s.Server().Env()
		saved := env.ClientDocument
		env.ClientDocument = strict
		defer func() { env.ClientDocument = saved }()
		for _, cid := range []string{id, strings.Replace(id, "127.0.0.1", "localhost", 1), "https://10.0.0.1/oauth/client.json"} {
			p := b.MustGet(s.AuthorizeURL(cid, "http://127.0.0.1/callback", "read", stack.NewPKCE(), nil))
			if p.Status != http.StatusBadRequest || !strings.Contains(p.Text(), "This app cannot be used") {
				t.Errorf("%s: %d\n%s", cid, p.Status, p.Text())
			}
		}
	})

	t.Run("the policy applies to its redirects as to registered ones", func(t *testing.T) {
		web := site.Serve("/web.json", map[string]any{"redirect_uris": []string{"https://claude.ai/api/mcp/auth_callback", "https://app.example/cb"}})
		p := b.MustGet(s.AuthorizeURL(web, "https://app.example/cb", "read", stack.NewPKCE(), nil))
		if p.Status != http.StatusOK || !p.HasField("I set up this connection and expected access to go to") {
			t.Errorf("a website redirect in a document gets the tick box: %d", p.Status)
		}
		s.OnlyRecognisedApps(true)
		defer s.OnlyRecognisedApps(false)
		p = b.MustGet(s.AuthorizeURL(web, "https://claude.ai/api/mcp/auth_callback", "read", stack.NewPKCE(), nil))
		if p.Status != http.StatusForbidden || !strings.Contains(p.Text(), refusal) {
			t.Errorf("%d\n%s", p.Status, p.Text())
		}
		p = b.MustGet(s.AuthorizeURL(id, "http://127.0.0.1/callback", "read", stack.NewPKCE(), url.Values{"prompt": {"consent"}}))
		if p.Status != http.StatusOK {
			t.Errorf("an on-device document client is allowed: %d %s", p.Status, p.Text())
		}
	})
}

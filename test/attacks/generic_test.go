package attacks

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"

	"latchkey.dev/latchkey/test/stack"
)

// TestReturnToIsNeverAnOpenRedirect tries return_to values that browsers would take to another
// site or another project, at the sign-in page (already signed in: a redirect; not signed in:
// the page after the form), and checks where the browser is sent.
func TestReturnToIsNeverAnOpenRedirect(t *testing.T) {
	e := newEnv(t)
	e.addOtherProject()
	base := "/team/demo"
	evil := []string{
		"//evil.example",
		"//evil.example/team/demo/account",
		"/\\evil.example",
		"\\\\evil.example",
		"/\\/evil.example",
		"%2F%2Fevil.example",
		"/%2F%2Fevil.example",
		"/%2Fevil.example",
		"/%5Cevil.example",
		"https:evil.example",
		"https:/evil.example",
		"https://evil.example",
		"https://evil.example/team/demo/account",
		"http://127.0.0.1:1/team/demo/account",
		"javascript:alert(1)",
		"JavaScript:alert(1)",
		"data:text/html,<script>alert(1)</script>",
		"/team/demo/../../other/account",
		"/team/demo/../other/account",
		"/team/demo/..%2F..%2Fevil.example",
		"/team/demo/%2e%2e/%2e%2e/evil.example",
		"/team/demo/%2E%2E/other/account",
		"/team/demo/./../other",
		"/team/demo\\..\\other", //nolint:misspell // backslashes in a path, not the word "ther"
		"/team/demo/\t/evil.example",
		"/team/demo/\r\nLocation: https://evil.example",
		"/team/demo/%0d%0aLocation:%20https://evil.example",
		"/team/demox/account",
		"/team/other/account",
		"/team/other",
		"/team/demo@evil.example",
		"/team/demo/;url=https://evil.example",
		" /team/demo/account",
		"/team/demo/accöunt",
		"team/demo/account",
		"/-/healthz",
	}
	check := func(t *testing.T, raw, where string) {
		t.Helper()
		u, err := url.Parse(where)
		if err != nil || u.Scheme != "" || u.Host != "" || u.Opaque != "" || !strings.HasPrefix(where, base+"/") && where != base {
			t.Errorf("return_to %q sends the browser to %q", raw, where)
			return
		}
		if strings.HasPrefix(where, "//") || strings.ContainsAny(where, "\\\r\n\t ") {
			t.Errorf("return_to %q sends the browser to %q", raw, where)
		}
		for seg := range strings.SplitSeq(u.Path, "/") {
			if seg == ".." || seg == "." {
				t.Errorf("return_to %q climbs out: %q", raw, where)
			}
		}
		// What a browser makes of it, resolved against the sign-in page.
		abs, _ := url.Parse(e.Issuer + "/sign-in")
		if got := abs.ResolveReference(u); got.Host != abs.Host || !strings.HasPrefix(got.Path, base+"/") && got.Path != base {
			t.Errorf("return_to %q resolves to %s", raw, got)
		}
	}
	alice := e.signedIn(stack.AliceEmail)
	for _, raw := range evil {
		// Signed in: the sign-in page redirects at once.
		p := alice.MustGet(e.Issuer + "/sign-in?return_to=" + url.QueryEscape(raw))
		if p.Status != http.StatusSeeOther {
			t.Errorf("return_to %q: %d", raw, p.Status)
			continue
		}
		check(t, raw, p.Header.Get("Location"))
		// Signed out: the form carries it, and the answer to the form moves on.
		b := e.Browser()
		form := b.MustGet(e.Issuer + "/sign-in?return_to=" + url.QueryEscape(raw))
		res := signInAt(t, b, form, stack.AliceEmail, stack.AlicePassword)
		check(t, raw, res.Continue())
		// The form field itself, edited.
		_, f, _ := b.MustGet(e.Issuer + "/sign-in?prompt=login").Form("Sign in")
		f.Set("return_to", raw)
		f.Set("username", stack.AliceEmail)
		f.Set("password", stack.AlicePassword)
		check(t, raw, b.MustPost(e.Issuer+"/sign-in", f).Continue())
	}
}

// TestSignInErrorsAreUniform: an unknown person and a wrong password get the same answer.
func TestSignInErrorsAreUniform(t *testing.T) {
	e := newEnv(t)
	try := func(user, pw string) stack.Page {
		b := e.Browser()
		res := signInAt(t, b, b.MustGet(e.Issuer+"/sign-in"), user, pw)
		res.Body = strings.ReplaceAll(res.Body, user, "USER")
		// An error page shows the request's own id, random and different every time.
		res.Body = strings.ReplaceAll(res.Body, res.Header.Get("X-Request-Id"), "REQUEST-ID")
		// And its form's anti-forgery token, new for every page.
		if tok := res.Hidden().Get("csrf_token"); tok != "" {
			res.Body = strings.ReplaceAll(res.Body, tok, "CSRF")
		}
		return res
	}
	wrong := try(stack.AliceEmail, "not her password")
	unknown := try("nobody@example.com", "not her password")
	if wrong.Status != unknown.Status || wrong.Body != unknown.Body {
		t.Fatalf("wrong password (%d) and unknown person (%d) differ:\n%s\n---\n%s", wrong.Status, unknown.Status, wrong.Text(), unknown.Text())
	}
	if !strings.Contains(wrong.Text(), "That email and password do not match") {
		t.Errorf("sign-in error: %s", wrong.Text())
	}
	for _, k := range []string{"Cache-Control", "Content-Security-Policy", "Content-Type"} {
		if wrong.Header.Get(k) != unknown.Header.Get(k) {
			t.Errorf("header %s differs", k)
		}
	}
	// The limit counts unknown people like known ones, so it says nothing either.
	var last [2]stack.Page
	for range 12 {
		last[0] = try(stack.MalloryEmail, "guess")
		last[1] = try("ghost@example.com", "guess")
	}
	if last[0].Status != last[1].Status || last[0].Body != last[1].Body {
		t.Errorf("after many attempts a known (%d) and an unknown (%d) account differ", last[0].Status, last[1].Status)
	}
}

// TestHeadersOnEveryResponse: every response that carries a code, a token or a person's data is
// never cached, and every page refuses to be framed.
func TestHeadersOnEveryResponse(t *testing.T) {
	e := newEnv(t)
	c := e.registerPublic("App", loopback)
	alice := e.signedIn(stack.AliceEmail)
	link, _, subject := e.linkFor(stack.AliceEmail)
	mallory := e.signedIn(stack.MalloryEmail)
	pk := newPKCE()
	consent := alice.MustGet(e.authorizeURL(c.ID, loopback, pk, nil))
	action, f, _ := consentFields(t, consent)
	codeRedirect := alice.MustPost(action, f)
	tok := e.redeem(c.ID, codeFrom(codeRedirect), loopback, pk.verifier)
	silent := alice.MustGet(e.authorizeURL(c.ID, loopback, newPKCE(), nil)) // consent remembered: 302 with a code
	_, _, authURL := e.connectFromLink(stack.MalloryEmail)
	cb := e.atGitHub(alice, stack.AliceLogin, authURL)
	req, _ := http.NewRequest(http.MethodGet, e.Issuer+"/userinfo", nil)
	req.Header.Set("Authorization", "Bearer "+tok.Str("access_token"))
	ui := e.send(req)

	pages := map[string]stack.Page{
		"sign-in":              e.Browser().MustGet(e.Issuer + "/sign-in"),
		"link offer":           alice.MustGet(link),
		"wrong-person page":    mallory.MustGet(link),
		"404":                  alice.MustGet(e.Issuer + "/account/services/link/nope"),
		"consent page":         consent,
		"account":              alice.MustGet(e.Issuer + "/account"),
		"confirmation page":    alice.MustGet(cb),
		"consent answer":       codeRedirect,
		"remembered consent":   silent,
		"sign-out page":        alice.MustGet(e.Issuer + "/sign-out"),
		"cross-origin refusal": alice.MustPostFrom(link+"/decline", url.Values{}, "http://127.0.0.3"),
		"project home":         alice.MustGet(e.Issuer + "/"),
	}
	if codeFrom(codeRedirect) == "" || codeFrom(silent) == "" {
		t.Fatalf("no code redirects to check: %d %d", codeRedirect.Status, silent.Status)
	}
	for name, p := range pages {
		h := p.Header
		if h.Get("Cache-Control") != "no-store" {
			t.Errorf("%s: Cache-Control %q", name, h.Get("Cache-Control"))
		}
		if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "form-action 'self'") {
			t.Errorf("%s: CSP %q", name, csp)
		}
		if h.Get("X-Frame-Options") != "DENY" || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("%s: X-Frame-Options %q, nosniff %q, Referrer-Policy %q", name, h.Get("X-Frame-Options"), h.Get("X-Content-Type-Options"), h.Get("Referrer-Policy"))
		}
	}
	exchange := e.AgentExchange(subject)
	apis := map[string]http.Header{
		"token":         tok.Header,
		"userinfo":      ui.Header,
		"introspection": e.postBasic("/introspect", stack.MCP, stack.MCPSecret, url.Values{"token": {tok.Str("access_token")}}).Header,
		"revocation":    e.tokenCall("/revoke", c.ID, "", url.Values{"token": {tok.Str("refresh_token")}}).Header,
		"exchange":      exchange.Header,
		"token error":   e.redeem(c.ID, "nope", loopback, pk.verifier).Header,
	}
	for name, h := range apis {
		if h.Get("Cache-Control") != "no-store" {
			t.Errorf("%s: Cache-Control %q", name, h.Get("Cache-Control"))
		}
	}
	// Registration answers carry a client secret and a registration token.
	resp, err := http.Post(e.Issuer+"/register", "application/json", strings.NewReader(`{"redirect_uris":["`+loopback+`"]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("registration: Cache-Control %q", resp.Header.Get("Cache-Control"))
	}
}

// TestNoSecretsInLogs runs every flow with the most verbose logger and looks for every secret
// that passed through: passwords, cookies, form tokens, link codes, states, codes, tokens at
// both ends, client secrets and registration tokens.
func TestNoSecretsInLogs(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	var buf bytes.Buffer
	e.Server().Env().Logger = funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		buf.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: 10})

	var secrets []string
	keep := func(s ...string) {
		for _, v := range s {
			if len(v) >= 8 {
				secrets = append(secrets, v)
			}
		}
	}
	keep(stack.AlicePassword, stack.MalloryPassword, stack.AgentSecret, stack.MCPSecret)

	// Sign-in, a wrong password, the link, connect, the callback in both browsers, exchange.
	bad := e.Browser()
	signInAt(t, bad, bad.MustGet(e.Issuer+"/sign-in"), stack.AliceEmail, "alice's wrong password guess")
	keep("alice's wrong password guess")
	mallory, _, authURL := e.connectFromLink(stack.MalloryEmail)
	for _, ck := range mallory.Jar.Cookies(mustURL(e.Issuer + "/")) {
		keep(ck.Value)
	}
	keep(mallory.BindingCookie().Value)
	au, _ := url.Parse(authURL)
	keep(au.Query().Get("state"), au.Query().Get("code_challenge"))
	// The forwarded address in a browser signed in as nobody, which is offered confirmation (a
	// browser signed in as Alice would end Mallory's attempt).
	victim := e.Browser()
	cb := e.atGitHub(victim, stack.AliceLogin, authURL)
	cbu, _ := url.Parse(cb)
	keep(cbu.Query().Get("code"))
	confirm := victim.MustGet(cb)
	_, cf, _ := confirm.Form("Finish connecting")
	keep(cf.Get("confirm_token"))
	victim.Post(e.CallbackURL, url.Values{"code": {"x"}, "state": {cbu.Query().Get("state")}, "confirm_token": {"wrong-token-value"}})
	alice := e.signedIn(stack.AliceEmail)
	mcb := e.atGitHub(mallory, stack.MalloryLogin, authURL)
	keep(must(url.Parse(mcb)).Query().Get("code"))
	if res := mallory.MustGet(mcb); !strings.Contains(res.Text(), "is now connected") {
		t.Fatalf("Mallory's callback: %s", res.Text())
	}
	subject := e.AccessToken(stack.MalloryEmail, stack.Agent)
	keep(subject)
	got := e.AgentExchange(subject)
	keep(got.Str("access_token"))
	link, refusal, _ := e.linkFor(stack.AliceEmail)
	keep(strings.TrimPrefix(link, "/team/demo/account/services/link/"), refusal.Str("connect_uri"))
	alice.Get(link)
	mallory.Get(link) // wrong person: an audit record and a log line
	_, lf, _ := alice.MustGet(link).Form("Decline")
	keep(lf.Get("csrf_token"))
	for _, ck := range alice.Jar.Cookies(mustURL(e.Issuer + "/")) {
		keep(ck.Value)
	}

	// A client registers, runs the code flow, refreshes, reuses, revokes.
	status, out := e.register(map[string]any{"client_name": "Logged app", "redirect_uris": []string{loopback}, "grant_types": []string{"authorization_code", "refresh_token"}})
	if status != http.StatusCreated {
		t.Fatal(status)
	}
	id, sec, rat := out["client_id"].(string), out["client_secret"].(string), out["registration_access_token"].(string)
	keep(sec, rat)
	pk := newPKCE()
	p, _ := e.authorizeAs(alice, e.authorizeURL(id, loopback, pk, nil))
	code := codeFrom(p)
	keep(code, pk.verifier)
	tok := e.tokenCall("/token", id, sec, url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {loopback}, "code_verifier": {pk.verifier}})
	keep(tok.Str("access_token"), tok.Str("refresh_token"))
	r1 := e.tokenCall("/token", id, sec, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok.Str("refresh_token")}})
	if r1.Status != http.StatusOK {
		t.Fatalf("refresh: %d %s", r1.Status, r1.Raw)
	}
	keep(r1.Str("access_token"), r1.Str("refresh_token"))
	e.tokenCall("/token", id, sec, url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {loopback}, "code_verifier": {pk.verifier}})
	e.tokenCall("/token", id, "wrong-client-secret-value", url.Values{"grant_type": {"client_credentials"}})
	keep("wrong-client-secret-value")
	e.tokenCall("/revoke", id, sec, url.Values{"token": {r1.Str("refresh_token")}})
	e.postBasic("/introspect", stack.MCP, stack.MCPSecret, url.Values{"token": {r1.Str("access_token")}})
	req, _ := http.NewRequest(http.MethodGet, e.Issuer+"/register/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+rat)
	e.send(req)

	mu.Lock()
	logs := buf.String()
	mu.Unlock()
	if !strings.Contains(logs, "request") || !strings.Contains(logs, "audit") {
		t.Fatalf("the logger saw nothing; the test proves nothing:\n%s", logs)
	}
	for _, s := range secrets {
		if strings.Contains(logs, s) {
			t.Errorf("a secret is in the logs: %.12s…", s)
		}
	}
	if t.Failed() {
		t.Logf("logs:\n%s", logs)
	}
}

func mustURL(s string) *url.URL { return must(url.Parse(s)) }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

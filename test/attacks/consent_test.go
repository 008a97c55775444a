package attacks

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/redirect"
	"latchkey.dev/latchkey/test/stack"
)

// neverRedirects fails unless p is an HTML page that sends the browser nowhere.
func neverRedirects(t *testing.T, what string, p stack.Page) {
	t.Helper()
	if p.Status >= 300 && p.Status < 400 || p.Header.Get("Location") != "" {
		t.Errorf("%s: redirects (%d) to %s", what, p.Status, p.Header.Get("Location"))
	}
	if !strings.HasPrefix(p.Header.Get("Content-Type"), "text/html") {
		t.Errorf("%s: answered %s, want an HTML page", what, p.Header.Get("Content-Type"))
	}
	if strings.Contains(p.Body, "http-equiv") {
		t.Errorf("%s: the page moves on by itself", what)
	}
}

// TestRedirectURIMustMatchExactly presents near misses of registered redirect URIs at
// /authorize: each gets an HTML error page and never a redirect, signed in or not.
func TestRedirectURIMustMatchExactly(t *testing.T) {
	e := newEnv(t)
	c := e.registerPublic("Claude", "https://app.example.test/cb?tenant=1", "http://127.0.0.1:8400/cb",
		"http://localhost:8400/cb", "com.example.app:/cb", "https://127.0.0.1:8443/cb")
	alice := e.signedIn(stack.AliceEmail)
	pk := newPKCE()
	misses := []string{
		"https://app.example.test/cb",                       // registered with a query
		"https://app.example.test/cb?tenant=1&x=1",          // extra query
		"https://app.example.test/cb?tenant=2",              // other query
		"https://app.example.test/cb?tenant=1#f",            // fragment
		"https://app.example.test/cb/?tenant=1",             // trailing slash
		"https://app.example.test/c",                        // prefix
		"https://app.example.test/cb/extra?tenant=1",        // longer path
		"https://APP.example.test/cb?tenant=1",              // host case
		"HTTPS://app.example.test/cb?tenant=1",              // scheme case
		"https://app.example.test./cb?tenant=1",             // trailing dot
		"https://app.example.test:443/cb?tenant=1",          // default port spelled out
		"https://app.example.test/%63b?tenant=1",            // percent-encoded path
		"https://app.example.test/cb?tenant=%31",            // percent-encoded query
		"https://user@app.example.test/cb?tenant=1",         // userinfo
		"https://app.example.test.evil.example/cb?tenant=1", // suffix
		"https://evil.example/cb?tenant=1",
		"http://app.example.test/cb?tenant=1",   // scheme downgrade
		"http://localhost:9999/cb",              // a name gets no port leeway
		"http://localhost/cb",                   //
		"http://127.0.0.2:8400/cb",              // another loopback address
		"http://[::1]:8400/cb",                  //
		"http://127.0.0.1:8400/cb/",             //
		"http://127.0.0.1:8400/cb?x=1",          //
		"http://127.0.0.1:08400/cb",             // leading zero
		"http://127.000.000.001:8400/cb",        //
		"http://127.1:8400/cb",                  //
		"https://127.0.0.1:9999/cb",             // the port exception is for http only
		"http://127.0.0.1:8400@evil.example/cb", //
		"http://127.0.0.1:8400\\@evil.example/cb",
		"com.example.app:/cb/",
		"com.example.app://cb",
		"com.example.App:/cb",
		"",
		"javascript:alert(1)",
		"//evil.example/cb",
		"/cb",
	}
	for _, b := range []*stack.Browser{alice, e.Browser()} {
		for _, m := range misses {
			p := b.MustGet(e.authorizeURL(c.ID, m, pk, nil))
			if p.Status != http.StatusBadRequest {
				t.Errorf("redirect_uri %q: %d %s", m, p.Status, p.Text())
			}
			neverRedirects(t, "redirect_uri "+m, p)
			if strings.Contains(p.Body, "evil.example") {
				t.Errorf("redirect_uri %q: the page shows the address as a link target", m)
			}
		}
		// Repeated redirect_uri or client_id, even when one of them is right.
		for _, q := range []url.Values{
			{"redirect_uri": {"http://127.0.0.1:8400/cb", "https://evil.example/cb"}},
			{"client_id": {c.ID, "other"}},
		} {
			p := b.MustGet(e.authorizeURL(c.ID, "http://127.0.0.1:8400/cb", pk, q))
			if p.Status != http.StatusBadRequest {
				t.Errorf("repeated %v: %d", q, p.Status)
			}
			neverRedirects(t, "repeated parameter", p)
		}
	}
	// The loopback exception (RFC 8252 §7.3): another port on the same IP literal goes on.
	p := alice.MustGet(e.authorizeURL(c.ID, "http://127.0.0.1:51234/cb", pk, nil))
	if p.Status != http.StatusOK || !strings.Contains(p.Text(), "Access goes to an app on this device") {
		t.Fatalf("loopback port exception: %d %s", p.Status, p.Text())
	}
	// An unknown client never redirects either.
	p = alice.MustGet(e.authorizeURL("no-such-client", "https://evil.example/cb", pk, nil))
	if p.Status != http.StatusBadRequest {
		t.Errorf("unknown client: %d", p.Status)
	}
	neverRedirects(t, "unknown client", p)
}

// TestLookAlikeRedirects registers "Claude" with addresses that look like Claude's, ChatGPT's
// or the person's device: each is refused at registration, or shown as a website with the tick
// box. None may read as Claude, ChatGPT or "an app on this device".
func TestLookAlikeRedirects(t *testing.T) {
	e := newEnv(t)
	alice := e.signedIn(stack.AliceEmail)
	cases := []string{
		redirect.ClaudeAICallback + "/",
		redirect.ClaudeAICallback + "?x=1",
		redirect.ClaudeAICallback + "?",
		"https://claude.ai:443/api/mcp/auth_callback",
		"https://claude.ai:8443/api/mcp/auth_callback",
		"https://Claude.ai/api/mcp/auth_callback",
		"https://CLAUDE.AI/api/mcp/auth_callback",
		"https://claude.ai./api/mcp/auth_callback",
		"https://claude.ai/api/mcp/auth%5Fcallback",
		"https://claude.ai/api/mcp/./auth_callback",
		"https://claude.ai/api/mcp/x/../auth_callback",
		"https://claude.ai/api/mcp/auth_callback/..%2F..%2F..%2Fevil",
		"https://claude.ai%2eevil.example/api/mcp/auth_callback",
		"https://claude.ai@evil.example/api/mcp/auth_callback",
		"https://evil.example/https://claude.ai/api/mcp/auth_callback",
		"https://claude.ai.evil.example/api/mcp/auth_callback",
		"https://evil.example/?https://claude.ai/api/mcp/auth_callback",
		"https://xn--claud-zxa.ai/api/mcp/auth_callback",
		"https://clаude.ai/api/mcp/auth_callback", // Cyrillic а
		"https://claude.ai/api/mcp/auth_callback#",
		"https://claude.ai\\@evil.example/api/mcp/auth_callback",
		"https://chatgpt.com/connector/oauth/../../evil",
		"https://chatgpt.com/connector/oauth/..",
		"https://chatgpt.com/connector/oauth/a/b",
		"https://chatgpt.com/connector/oauth/%2e%2e",
		"https://chatgpt.com/connector/oauth/a%2Fb",
		"https://chatgpt.com/connector/oauth/",
		"https://chatgpt.com/connector/oauth/x?y=1",
		"https://chatgpt.com.evil.example/connector_platform_oauth_redirect",
		"https://chatgpt.com/connector_platform_oauth_redirect/",
		"http://localhost.evil.example/cb",
		"https://localhost.evil.example/cb",
		"https://localhost./cb",
		"http://localhost./cb",
		"http://LOCALHOST/cb",
		"https://127.0.0.1.nip.io/cb",
		"http://127.0.0.1.nip.io/cb",
		"http://127.1/cb",
		"http://0x7f000001/cb",
		"http://2130706433/cb",
		"http://0177.0.0.1/cb",
		"http://[::ffff:127.0.0.1]/cb",
		"http://[0:0:0:0:0:0:0:1]/cb",
		"http://127.0.0.1:80@evil.example/cb",
		"http://evil.example/cb",
		"https:evil.example/cb",
		"https:/evil.example/cb",
		"javascript:alert(1)",
		"data:text/html,hi",
		"file:///etc/passwd",
		"localhost:/cb",
	}
	for _, uri := range cases {
		status, out := e.register(map[string]any{
			"client_name": "Claude", "redirect_uris": []string{uri}, "token_endpoint_auth_method": "none",
		})
		if status != http.StatusCreated {
			if out["error"] != "invalid_redirect_uri" && out["error"] != "invalid_client_metadata" {
				t.Errorf("%q refused with %d %v", uri, status, out)
			}
			t.Logf("refused at registration: %s", uri)
			continue
		}
		t.Logf("registered, shown as a website with the tick box: %s", uri)
		id, _ := out["client_id"].(string)
		p := alice.MustGet(e.authorizeURL(id, uri, newPKCE(), url.Values{"prompt": {"consent"}}))
		text := p.Text()
		if p.Status != http.StatusOK || !strings.Contains(text, websiteWarning) || !strings.Contains(text, tickBoxText) {
			t.Errorf("%q registered, and its consent page is %d without the website warning and tick box: %s", uri, p.Status, text)
		}
		for _, claim := range []string{"Access goes to Claude", "Access goes to ChatGPT", "Access goes to an app on this device"} {
			if strings.Contains(text, claim) {
				t.Errorf("%q reads as %q", uri, claim)
			}
		}
		if _, _, box := consentFields(t, p); box != uri {
			t.Errorf("%q: the tick box confirms %q", uri, box)
		}
	}
	// The genuine addresses read as what they are, without a tick box.
	for uri, want := range map[string]string{
		redirect.ClaudeAICallback:                     "Access goes to Claude",
		redirect.ChatGPTPlatformCallback:              "Access goes to ChatGPT",
		"https://chatgpt.com/connector/oauth/abc-123": "Access goes to ChatGPT",
		"http://127.0.0.1/cb":                         "Access goes to an app on this device",
		"http://[::1]:9/cb":                           "Access goes to an app on this device",
		"com.example.app:/oauth":                      "Access goes to an app on this device",
	} {
		c := e.registerPublic("Whatever", uri)
		p := alice.MustGet(e.authorizeURL(c.ID, uri, newPKCE(), nil))
		if !strings.Contains(p.Text(), want) || strings.Contains(p.Text(), tickBoxText) {
			t.Errorf("%q: want %q without a tick box, got %d %s", uri, want, p.Status, p.Text())
		}
	}
}

// TestTickBoxCannotBeSkipped: for a website the project does not recognise, Allow issues a code
// only with the box ticked for exactly the address the page showed.
func TestTickBoxCannotBeSkipped(t *testing.T) {
	e := newEnv(t)
	const cb, other = "https://evil.example/cb", "https://evil.example/other"
	c := e.registerPublic("Claude", cb, other)
	alice := e.signedIn(stack.AliceEmail)
	pk := newPKCE()
	page := alice.MustGet(e.authorizeURL(c.ID, cb, pk, url.Values{"prompt": {"consent"}}))
	action, base, box := consentFields(t, page)
	if box != cb || !strings.Contains(page.Text(), websiteWarning) {
		t.Fatalf("consent page: box %q: %s", box, page.Text())
	}
	variants := map[string]func(f url.Values){
		"no box":                    func(f url.Values) {},
		"box=on":                    func(f url.Values) { f.Set("confirm_destination", "on") },
		"empty box":                 func(f url.Values) { f.Set("confirm_destination", "") },
		"box for the other address": func(f url.Values) { f.Set("confirm_destination", other) },
		"box for cb, redirect other": func(f url.Values) {
			f.Set("confirm_destination", cb)
			f.Set("redirect_uri", other)
		},
		"box with a trailing space": func(f url.Values) { f.Set("confirm_destination", cb+" ") },
		"box in another case":       func(f url.Values) { f.Set("confirm_destination", strings.ToUpper(cb)) },
		"box twice":                 func(f url.Values) { f["confirm_destination"] = []string{cb, cb} },
		"no decision": func(f url.Values) {
			f.Set("confirm_destination", cb)
			f.Del("decision")
		},
		"no form token": func(f url.Values) {
			f.Set("confirm_destination", cb)
			f.Del("csrf_token")
		},
		"Mallory's form token": func(f url.Values) {
			f.Set("confirm_destination", cb)
			mp := e.signedIn(stack.MalloryEmail).MustGet(e.authorizeURL(c.ID, cb, pk, nil))
			_, mf, _ := consentFields(t, mp)
			f.Set("csrf_token", mf.Get("csrf_token"))
		},
	}
	for name, change := range variants {
		f := url.Values{}
		for k, v := range base {
			f[k] = append([]string(nil), v...)
		}
		change(f)
		res := alice.MustPost(action, f)
		if code := codeFrom(res); code != "" {
			t.Errorf("%s: a code was issued (%s)", name, res.Location())
		}
		if res.Status >= 300 && res.Status < 400 && !strings.Contains(res.Location(), "error=") {
			t.Errorf("%s: redirected to %s", name, res.Location())
		}
	}
	if n := e.CountRows("auth_codes"); n != 0 {
		t.Fatalf("%d codes stored", n)
	}
	// Control: ticked for the address shown, the person gets what they said they expected.
	f := url.Values{}
	for k, v := range base {
		f[k] = v
	}
	f.Set("confirm_destination", cb)
	res := alice.MustPost(action, f)
	if code := codeFrom(res); code == "" || !strings.HasPrefix(res.Location(), cb+"?") {
		t.Fatalf("ticked: %d %s", res.Status, res.Location())
	}
}

// TestRememberedConsentIsNotABypass: consent is remembered per person and app, but the tick box
// is about an address. An app whose consent was given for a recognised or on-device address must
// not then send a code to a website nobody confirmed — whether it registered that website from
// the start or added it later (RFC 7592) — without the warning and the tick box.
func TestRememberedConsentIsNotABypass(t *testing.T) {
	const evil = "https://evil.example/cb"
	for _, how := range []string{"registered with both", "Claude's address, then updated", "a device address, then updated"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t)
			first := redirect.ClaudeAICallback
			var c registered
			switch how {
			case "registered with both":
				c = e.registerPublic("Claude", first, evil)
			case "Claude's address, then updated":
				c = e.registerPublic("Claude", first)
			default:
				first = "http://127.0.0.1/cb"
				c = e.registerPublic("Claude", first)
			}
			alice := e.signedIn(stack.AliceEmail)
			res, shown := e.authorizeAs(alice, e.authorizeURL(c.ID, first, newPKCE(), nil))
			if !shown || codeFrom(res) == "" {
				t.Fatalf("first consent: shown %v, %d %s", shown, res.Status, res.Location())
			}
			if how != "registered with both" {
				body, _ := json.Marshal(map[string]any{
					"client_id": c.ID, "client_name": "Claude", "redirect_uris": []string{first, evil},
					"token_endpoint_auth_method": "none", "grant_types": []string{"authorization_code", "refresh_token"},
				})
				req, _ := http.NewRequest(http.MethodPut, e.Issuer+"/register/"+c.ID, strings.NewReader(string(body)))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+c.RegToken)
				if a := e.send(req); a.Status != http.StatusOK {
					t.Fatalf("update: %d %s", a.Status, a.Raw)
				}
			}
			// Mallory sends Alice the second link.
			p := alice.MustGet(e.authorizeURL(c.ID, evil, newPKCE(), nil))
			if code := codeFrom(p); code != "" {
				t.Fatalf("a code went to %s without the warning or the tick box: %s", evil, p.Location())
			}
			if p.Status != http.StatusOK || !strings.Contains(p.Text(), websiteWarning) || !strings.Contains(p.Text(), tickBoxText) {
				t.Fatalf("want the consent page with the warning and the tick box, got %d %s", p.Status, p.Text())
			}
		})
	}
}

// TestOnlyRecognisedApps switches the setting on with a client already connected that has one
// honest and one foreign redirect: consent, registration, refresh, introspection, userinfo and
// codes issued before all refuse it.
func TestOnlyRecognisedApps(t *testing.T) {
	e := newEnv(t)
	const evil = "https://evil.example/cb"
	mixed := e.registerPublic("Claude", redirect.ClaudeAICallback, evil)
	honest := e.registerPublic("Claude", redirect.ClaudeAICallback)
	alice := e.signedIn(stack.AliceEmail)
	tok := e.codeFlow(alice, mixed.ID, redirect.ClaudeAICallback)
	good := e.codeFlow(alice, honest.ID, redirect.ClaudeAICallback)
	// A code issued before the switch, not yet redeemed.
	pk := newPKCE()
	late := codeFrom(alice.MustGet(e.authorizeURL(mixed.ID, redirect.ClaudeAICallback, pk, nil)))
	if late == "" {
		t.Fatal("no code before the switch")
	}

	e.update(func(p *config.Project) { p.Redirects.OnlyRecognisedApps = true })

	for _, uri := range []string{redirect.ClaudeAICallback, evil} {
		p := alice.MustGet(e.authorizeURL(mixed.ID, uri, newPKCE(), url.Values{"prompt": {"consent"}}))
		if p.Status != http.StatusForbidden || !strings.Contains(p.Text(), policyRefusal) || !strings.Contains(p.Text(), evil) {
			t.Errorf("consent via %s: %d %s", uri, p.Status, p.Text())
		}
		neverRedirects(t, "refused consent", p)
	}
	found := false
	for _, r := range e.Audit() {
		if r.Action == events.ConsentRefusedByPolicy && r.Target == mixed.ID {
			found = true
		}
	}
	if !found {
		t.Error("the refusal was not recorded as a security event")
	}
	if a := e.redeem(mixed.ID, late, redirect.ClaudeAICallback, pk.verifier); a.Status == http.StatusOK {
		t.Errorf("a code issued before the switch was redeemed: %s", a.Raw)
	}
	a := e.refresh(mixed.ID, tok.Str("refresh_token"))
	if a.Status != http.StatusBadRequest || a.Str("error") != "invalid_grant" || a.Str("error_description") != policyRefusal {
		t.Errorf("refresh: %d %s", a.Status, a.Raw)
	}
	if e.active(tok.Str("access_token")) {
		t.Error("the refused client's access token is active")
	}
	req, _ := http.NewRequest(http.MethodGet, e.Issuer+"/userinfo", nil)
	req.Header.Set("Authorization", "Bearer "+tok.Str("access_token"))
	if ui := e.send(req); ui.Status != http.StatusUnauthorized {
		t.Errorf("userinfo: %d %s", ui.Status, ui.Raw)
	}
	status, out := e.register(map[string]any{"client_name": "Claude", "redirect_uris": []string{redirect.ClaudeAICallback, evil}, "token_endpoint_auth_method": "none"})
	if status != http.StatusBadRequest || out["error"] != "invalid_redirect_uri" {
		t.Errorf("registration with a foreign redirect: %d %v", status, out)
	}
	body, _ := json.Marshal(map[string]any{"client_id": honest.ID, "redirect_uris": []string{redirect.ClaudeAICallback, evil}, "token_endpoint_auth_method": "none", "grant_types": []string{"authorization_code", "refresh_token"}})
	req, _ = http.NewRequest(http.MethodPut, e.Issuer+"/register/"+honest.ID, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+honest.RegToken)
	if up := e.send(req); up.Status != http.StatusBadRequest {
		t.Errorf("adding a foreign redirect by update: %d %s", up.Status, up.Raw)
	}
	// The honest client is unaffected.
	if r := e.refresh(honest.ID, good.Str("refresh_token")); r.Status != http.StatusOK {
		t.Errorf("the honest client's refresh: %d %s", r.Status, r.Raw)
	}

	// Switching the setting off again does not bring the ended grant back.
	e.update(func(p *config.Project) { p.Redirects.OnlyRecognisedApps = false })
	if a := e.refresh(mixed.ID, tok.Str("refresh_token")); a.Status == http.StatusOK {
		t.Errorf("the refused refresh token works again once the setting is off: %s", a.Raw)
	}
}

// TestClientDocumentsCannotReachInside: with client ID metadata documents accepted, a client id
// that names this machine (or an address that resolves to it) is refused on a page, and the
// server never fetches it.
func TestClientDocumentsCannotReachInside(t *testing.T) {
	e := newEnv(t)
	e.update(func(p *config.Project) { p.Registration.ClientIDMetadataDocuments = true })
	var hits atomic.Int64
	inside := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"client_id":"` + "https://" + r.Host + r.URL.Path + `","client_name":"Claude","redirect_uris":["https://evil.example/cb"],"token_endpoint_auth_method":"none"}`))
	}))
	t.Cleanup(inside.Close)
	port := inside.URL[strings.LastIndex(inside.URL, ":")+1:]
	alice := e.signedIn(stack.AliceEmail)
	for _, id := range []string{
		"https://127.0.0.1:" + port + "/client.json",
		"https://localhost:" + port + "/client.json",
		"https://[::1]:" + port + "/client.json",
		"https://127.1:" + port + "/client.json",
		"https://0.0.0.0:" + port + "/client.json",
		"https://[::ffff:127.0.0.1]:" + port + "/client.json",
		"https://2130706433:" + port + "/client.json",
		"http://127.0.0.1:" + port + "/client.json",
	} {
		p := alice.MustGet(e.authorizeURL(id, "https://evil.example/cb", newPKCE(), nil))
		if p.Status != http.StatusBadRequest {
			t.Errorf("client id %s: %d %s", id, p.Status, p.Text())
		}
		neverRedirects(t, "client id "+id, p)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the server fetched %d documents from this machine", n)
	}
}

// TestConsentPageLoadsNoClientLogo: a self-registered client's logo_uri is never put on the
// consent page, so the person's browser never fetches it and its server never learns who is
// looking, from which address, or when; and the page's CSP lets no image come from elsewhere.
func TestConsentPageLoadsNoClientLogo(t *testing.T) {
	e := newEnv(t)
	const tracker = "logo-tracker.example"
	status, out := e.register(map[string]any{
		"client_name": "Claude", "redirect_uris": []string{loopback}, "token_endpoint_auth_method": "none",
		"logo_uri": "https://" + tracker + "/logo.png?campaign=alice",
	})
	if status != http.StatusCreated {
		t.Fatalf("registering: %d %v", status, out)
	}
	id, _ := out["client_id"].(string)
	alice := e.signedIn(stack.AliceEmail)
	p := alice.MustGet(e.authorizeURL(id, loopback, newPKCE(), url.Values{"prompt": {"consent"}}))
	if p.Status != http.StatusOK || !strings.Contains(p.Body, "Where access goes") {
		t.Fatalf("consent page: %d %s", p.Status, p.Text())
	}
	if strings.Contains(p.Body, tracker) {
		t.Errorf("the consent page names the client's logo host, so the browser would fetch it:\n%s", p.Body)
	}
	csp := p.Header.Get("Content-Security-Policy")
	for _, directive := range strings.Split(csp, ";") {
		if f := strings.Fields(directive); len(f) > 0 && f[0] == "img-src" && strings.Join(f[1:], " ") != "'self'" {
			t.Errorf("the consent page may load images from elsewhere: %q", csp)
		}
	}
}

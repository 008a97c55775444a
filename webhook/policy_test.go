package webhook_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"latchkey.dev/latchkey/internal/clientdoc"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/register"
)

const refusal = "This organisation only allows recognised apps to connect"

// text is the page as a person reads it.
func (p page) text() string { return p.sp().Text() }

func (h *harness) registerClient(t *testing.T, body string) string {
	t.Helper()
	r := h.jsonReq(http.MethodPost, h.base+"/register", "", body)
	if r.status != http.StatusCreated {
		t.Fatalf("registration: %d %s", r.status, r.raw)
	}
	return r.str("client_id")
}

func (h *harness) onlyRecognised(on bool) {
	h.update(func(p *config.Project) { p.Redirects.OnlyRecognisedApps = on })
}

func (h *harness) audit(action string) []store.AuditRecord {
	h.t.Helper()
	recs, err := h.store.ListAudit(context.Background(), projectKey, 1000)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []store.AuditRecord
	for _, r := range recs {
		if r.Action == action {
			out = append(out, r)
		}
	}
	return out
}

// Consent phishing (docs/recognised-apps.md), told end to end: anybody can register a client called "Claude"
// with a callback on their own site and send people a link to the consent page.
func TestConsentPhishingStory(t *testing.T) {
	h := newHarness(t)
	attacker := "https://claude-ai.evil.example/api/mcp/auth_callback"
	phish := h.registerClient(t, `{"client_name":"Claude","logo_uri":"https://claude-ai.evil.example/logo.png",
		"redirect_uris":["`+attacker+`"],"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"]}`)
	b := h.browser()
	b.signIn("", "alice@example.com", alicePass)
	// Signing in again finds Alice as she is (and tells the test her id).
	alice, err := h.store.UpsertPerson(context.Background(), store.Person{Project: projectKey, ID: "unused", Source: "password",
		SourceSubject: "alice@example.com", Email: "alice@example.com", Name: "Alice"})
	if err != nil || alice.ID == "unused" {
		t.Fatalf("alice: %+v %v", alice, err)
	}

	p := b.get(authorizeURL(h, phish, attacker, "read", newPKCE(), nil))
	if p.status != http.StatusOK {
		t.Fatalf("consent page: %d %s", p.status, p.body)
	}
	text := p.text()
	where, who := strings.Index(text, "Where access goes"), strings.Index(text, "Claude")
	if where < 0 || who < where {
		t.Errorf("the page must lead with where access goes, before the app's name:\n%s", text)
	}
	for _, want := range []string{
		"Access goes to a website this organisation does not recognise",
		attacker, // in full, in the address block
		"I set up this connection and expected access to go to " + attacker,
		"The app calls itself “Claude”",
		"The name was chosen by whoever registered the app: it proves nothing",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the person must see %q:\n%s", want, text)
		}
	}
	if strings.Contains(p.body, "Access goes to <strong>Claude</strong>") {
		t.Error("a registered name must never read as where access goes")
	}
	if !strings.Contains(p.body, `<strong>claude-ai.evil.example</strong>`) {
		t.Error("the host the person must check is not emphasised")
	}

	decide := p.hidden()
	decide.Set("decision", "allow")
	t.Run("Allow without the tick box issues no code", func(t *testing.T) {
		for _, confirm := range []string{"", "https://claude.ai/api/mcp/auth_callback", attacker + "/"} {
			f := url.Values{}
			for k, v := range decide {
				f[k] = v
			}
			if confirm != "" {
				f.Set("confirm_destination", confirm)
			}
			d := b.post(h.base+"/authorize", f)
			if d.status != http.StatusBadRequest || d.location() != "" || !strings.Contains(d.text(), "Tick the box") ||
				!strings.Contains(d.body, `name="confirm_destination"`) {
				t.Errorf("confirm %q: %d %q", confirm, d.status, d.location())
			}
		}
		if _, err := h.store.GetGrant(context.Background(), projectKey, alice.ID, phish); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("consent was stored without the tick box: %v", err)
		}
	})
	t.Run("ticked, the person gets what they said they expected", func(t *testing.T) {
		decide.Set("confirm_destination", attacker)
		d := b.post(h.base+"/authorize", decide)
		loc, _ := url.Parse(d.location())
		if d.status != http.StatusSeeOther || !strings.HasPrefix(d.location(), attacker+"?") || loc.Query().Get("code") == "" {
			t.Errorf("%d %q", d.status, d.location())
		}
	})

	t.Run("with the setting on, no code at all", func(t *testing.T) {
		h.onlyRecognised(true)
		defer h.onlyRecognised(false)
		p := b.get(authorizeURL(h, phish, attacker, "read", newPKCE(), url.Values{"prompt": {"consent"}}))
		if p.status != http.StatusForbidden || p.location() != "" || !strings.Contains(p.text(), refusal) ||
			!strings.Contains(p.text(), attacker) || strings.Contains(p.body, `name="decision"`) {
			t.Errorf("%d %q\n%s", p.status, p.location(), p.text())
		}
		// The form from before the switch is refused too: the decision is checked again.
		if d := b.post(h.base+"/authorize", decide); d.status != http.StatusForbidden || d.location() != "" {
			t.Errorf("decision after the switch: %d %q", d.status, d.location())
		}
		recs := h.audit(events.ConsentRefusedByPolicy)
		if len(recs) != 2 || recs[0].Actor != alice.ID || recs[0].Target != phish || recs[0].Details["unrecognised_redirect_uris"] != attacker {
			t.Errorf("security events: %+v", recs)
		}
		// And the attacker's developer learns at registration.
		r := h.jsonReq(http.MethodPost, h.base+"/register", "", `{"client_name":"Claude","redirect_uris":["`+attacker+`"],"token_endpoint_auth_method":"none"}`)
		if r.status != http.StatusBadRequest || r.str("error") != "invalid_redirect_uri" || r.str("error_description") != refusal {
			t.Errorf("registration: %d %s", r.status, r.raw)
		}
	})

	t.Run("one honest and one foreign redirect is refused", func(t *testing.T) {
		both := h.registerClient(t, `{"client_name":"Claude","redirect_uris":["https://claude.ai/api/mcp/auth_callback","`+attacker+`"],
			"token_endpoint_auth_method":"none"}`)
		h.onlyRecognised(true)
		defer h.onlyRecognised(false)
		p := b.get(authorizeURL(h, both, "https://claude.ai/api/mcp/auth_callback", "read", newPKCE(), nil))
		if p.status != http.StatusForbidden || p.location() != "" || !strings.Contains(p.text(), refusal) {
			t.Errorf("%d %q", p.status, p.location())
		}
		r := h.jsonReq(http.MethodPost, h.base+"/register", "", `{"redirect_uris":["https://claude.ai/api/mcp/auth_callback","`+attacker+`"],"token_endpoint_auth_method":"none"}`)
		if r.str("error") != "invalid_redirect_uri" || r.str("error_description") != refusal {
			t.Errorf("registration: %s", r.raw)
		}
	})

	t.Run("recognised and on-device addresses read as what they are", func(t *testing.T) {
		h.onlyRecognised(true)
		defer h.onlyRecognised(false)
		claude := h.registerClient(t, `{"client_name":"Claude","redirect_uris":["https://claude.ai/api/mcp/auth_callback"],"token_endpoint_auth_method":"none"}`)
		p := b.get(authorizeURL(h, claude, "https://claude.ai/api/mcp/auth_callback", "read", newPKCE(), nil))
		if p.status != http.StatusOK || !strings.Contains(p.body, "Access goes to <strong>Claude</strong>") ||
			strings.Contains(p.body, `name="confirm_destination"`) || !strings.Contains(p.text(), "https://claude.ai/api/mcp/auth_callback") {
			t.Errorf("Claude's callback: %d\n%s", p.status, p.text())
		}
		f := p.hidden()
		f.Set("decision", "allow")
		if d := b.post(h.base+"/authorize", f); d.status != http.StatusSeeOther || !strings.Contains(d.location(), "code=") {
			t.Errorf("recognised, no tick box needed: %d %q", d.status, d.location())
		}
		p = b.get(authorizeURL(h, "cli", "com.example.cli:/cb", "read", newPKCE(), url.Values{"prompt": {"consent"}}))
		if !strings.Contains(p.body, "Access goes to <strong>an app on this device</strong>") || strings.Contains(p.body, `name="confirm_destination"`) {
			t.Errorf("app scheme:\n%s", p.text())
		}
		p = b.get(authorizeURL(h, "cli", "http://127.0.0.1:53682/callback", "read", newPKCE(), url.Values{"prompt": {"consent"}}))
		if !strings.Contains(p.body, "Access goes to <strong>an app on this device</strong>") {
			t.Errorf("loopback:\n%s", p.text())
		}
	})
}

// The policy holds wherever a refused client's tokens are used, at once, before any controller
// has revoked anything: refresh ends the family, introspection and userinfo say inactive, and
// codes or credentials issued before the switch yield nothing.
func TestPolicyAtUse(t *testing.T) {
	h := newHarness(t)
	b := h.browser()
	website := "https://helper.example/cb"
	bad := h.registerClient(t, `{"client_name":"Helper","redirect_uris":["`+website+`"],"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"]}`)
	ok := h.registerClient(t, `{"client_name":"CLI","redirect_uris":["http://127.0.0.1/cb"],"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"]}`)
	flow := func(client, redirect string) tokenResult {
		t.Helper()
		pk := newPKCE()
		loc, _ := b.authorize(authorizeURL(h, client, redirect, "openid read", pk, nil), "alice@example.com", alicePass)
		r := h.token(url.Values{"grant_type": {"authorization_code"}, "client_id": {client}, "code": {loc.Query().Get("code")},
			"redirect_uri": {redirect}, "code_verifier": {pk.verifier}}, "", "")
		if r.status != http.StatusOK {
			t.Fatalf("code flow for %s: %d %s", client, r.status, r.raw)
		}
		return r
	}
	badTok, okTok := flow(bad, website), flow(ok, "http://127.0.0.1/cb")
	// A code issued before the switch, redeemed after.
	pk := newPKCE()
	loc, _ := b.authorize(authorizeURL(h, bad, website, "read", pk, url.Values{"prompt": {"consent"}}), "alice@example.com", alicePass)
	// A confidential registered client with a website redirect, using client credentials.
	r := h.jsonReq(http.MethodPost, h.base+"/register", "", `{"redirect_uris":["`+website+`"],"grant_types":["authorization_code","client_credentials"]}`)
	ccID, ccSecret := r.str("client_id"), r.str("client_secret")

	h.onlyRecognised(true)
	if h.active(badTok.str("access_token")) || !h.active(okTok.str("access_token")) {
		t.Error("introspection must follow the policy at once")
	}
	if u := h.userinfo(badTok.str("access_token")); u.status != http.StatusUnauthorized {
		t.Errorf("userinfo for a refused client: %d %s", u.status, u.raw)
	}
	if u := h.userinfo(okTok.str("access_token")); u.status != http.StatusOK {
		t.Errorf("userinfo for an allowed client: %d %s", u.status, u.raw)
	}
	rr := h.token(url.Values{"grant_type": {"refresh_token"}, "client_id": {bad}, "refresh_token": {badTok.str("refresh_token")}}, "", "")
	if rr.status != http.StatusBadRequest || rr.str("error") != "invalid_grant" || rr.str("error_description") != refusal || rr.header.Get("Cache-Control") != "no-store" {
		t.Errorf("refresh by a refused client: %d %s", rr.status, rr.raw)
	}
	if rr := h.token(url.Values{"grant_type": {"refresh_token"}, "client_id": {ok}, "refresh_token": {okTok.str("refresh_token")}}, "", ""); rr.status != http.StatusOK {
		t.Errorf("refresh by an allowed client: %d %s", rr.status, rr.raw)
	}
	rc := h.token(url.Values{"grant_type": {"authorization_code"}, "client_id": {bad}, "code": {loc.Query().Get("code")},
		"redirect_uri": {website}, "code_verifier": {pk.verifier}}, "", "")
	if rc.status != http.StatusBadRequest || rc.str("error") != "invalid_grant" || rc.str("error_description") != refusal {
		t.Errorf("code from before the switch: %d %s", rc.status, rc.raw)
	}
	if cc := h.token(url.Values{"grant_type": {"client_credentials"}}, ccID, ccSecret); cc.status != http.StatusBadRequest ||
		cc.str("error") != "unauthorized_client" || cc.str("error_description") != refusal {
		t.Errorf("client credentials: %d %s", cc.status, cc.raw)
	}

	// The refused refresh ended the token: relaxing the policy brings nothing back.
	h.onlyRecognised(false)
	if h.active(badTok.str("access_token")) {
		t.Error("the refused family's access token came back")
	}
	rr = h.token(url.Values{"grant_type": {"refresh_token"}, "client_id": {bad}, "refresh_token": {badTok.str("refresh_token")}}, "", "")
	if rr.status != http.StatusBadRequest || rr.str("error") != "invalid_grant" {
		t.Errorf("the refused refresh token works again: %d %s", rr.status, rr.raw)
	}
	if recs := h.audit("refresh.refused"); len(recs) != 1 || recs[0].Details["client_id"] != bad {
		t.Errorf("audit: %+v", recs)
	}
}

// docSite is an app's web site on 127.0.0.1 (https), serving client ID metadata documents.
type docSite struct {
	ts    *httptest.Server
	mu    sync.Mutex
	docs  map[string][]byte
	pool  *x509.CertPool
	extra map[string]http.HandlerFunc
}

func newDocSite(t *testing.T) *docSite {
	s := &docSite{docs: map[string][]byte{}, extra: map[string]http.HandlerFunc{}}
	s.ts = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		doc, h := s.docs[r.URL.Path], s.extra[r.URL.Path]
		s.mu.Unlock()
		switch {
		case h != nil:
			h(w, r)
		case doc != nil:
			w.Header().Set("Content-Type", "application/json")
			w.Write(doc)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.ts.Close)
	s.pool = x509.NewCertPool()
	s.pool.AddCert(s.ts.Certificate())
	return s
}

// serve publishes a document at path; fields override the defaults ("client_id" defaults to
// the document's own URL).
func (s *docSite) serve(path string, fields map[string]any) string {
	id := s.ts.URL + path
	doc := map[string]any{
		"client_id": id, "client_name": "Claude Code", "redirect_uris": []string{"http://127.0.0.1/callback"},
		"token_endpoint_auth_method": "none", "grant_types": []string{"authorization_code", "refresh_token"},
		"client_uri": "https://claude.ai/",
	}
	for k, v := range fields {
		if v == nil {
			delete(doc, k)
		} else {
			doc[k] = v
		}
	}
	b, _ := json.Marshal(doc)
	s.mu.Lock()
	s.docs[path] = b
	s.mu.Unlock()
	return id
}

func TestClientIDMetadataDocuments(t *testing.T) {
	h := newHarness(t)
	site := newDocSite(t)
	h.srv.Env().ClientDocument = register.ClientDocument(clientdoc.New(clientdoc.Options{AllowLoopback: true, RootCAs: site.pool, Now: h.clock.Now}))
	b := h.browser()
	b.signIn("", "alice@example.com", alicePass)
	id := site.serve("/oauth/client.json", nil)
	host := strings.TrimPrefix(site.ts.URL, "https://")

	p := b.get(authorizeURL(h, id, "http://127.0.0.1/callback", "read", newPKCE(), nil))
	if p.status != http.StatusBadRequest || !strings.Contains(p.text(), "Unknown app") {
		t.Errorf("documents are off unless the project accepts them: %d %s", p.status, p.text())
	}
	h.update(func(p *config.Project) { p.Registration.ClientIDMetadataDocuments = true })

	t.Run("happy path", func(t *testing.T) {
		pk := newPKCE()
		p := b.get(authorizeURL(h, id, "http://127.0.0.1:41999/callback", "read", pk, nil))
		text := p.text()
		if p.status != http.StatusOK || strings.Index(text, "Where access goes") > strings.Index(text, "Claude Code") ||
			!strings.Contains(text, "Access goes to an app on this device") ||
			!strings.Contains(text, "The app calls itself “Claude Code”") ||
			!strings.Contains(text, host+" vouches for it: it publishes the app’s description at "+id) {
			t.Fatalf("consent page: %d\n%s", p.status, text)
		}
		f := p.hidden()
		f.Set("decision", "allow")
		d := b.post(h.base+"/authorize", f)
		loc, _ := url.Parse(d.location())
		r := h.token(url.Values{"grant_type": {"authorization_code"}, "client_id": {id}, "code": {loc.Query().Get("code")},
			"redirect_uri": {"http://127.0.0.1:41999/callback"}, "code_verifier": {pk.verifier}}, "", "")
		if r.status != http.StatusOK || r.str("refresh_token") == "" {
			t.Fatalf("token: %d %s", r.status, r.raw)
		}
		if !h.active(r.str("access_token")) {
			t.Error("token not active")
		}
		rr := h.token(url.Values{"grant_type": {"refresh_token"}, "client_id": {id}, "refresh_token": {r.str("refresh_token")}}, "", "")
		if rr.status != http.StatusOK {
			t.Errorf("refresh: %d %s", rr.status, rr.raw)
		}
		// A client described by a document has no secret to present.
		if r := h.token(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rr.str("refresh_token")}}, id, "guess"); r.status != http.StatusUnauthorized {
			t.Errorf("secret for a public client: %d %s", r.status, r.raw)
		}
	})

	t.Run("the document's logo is not loaded", func(t *testing.T) {
		// The consent page must not make the person's browser tell the logo's server who is
		// looking (docs/decisions/0022).
		id := site.serve("/logo.json", map[string]any{"logo_uri": "https://logo-tracker.example/l.png"})
		p := b.get(authorizeURL(h, id, "http://127.0.0.1/callback", "read", newPKCE(), nil))
		if p.status != http.StatusOK || strings.Contains(p.body, "logo-tracker.example") || strings.Contains(p.body, "<img") {
			t.Errorf("consent page: %d\n%s", p.status, p.body)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		big := strings.Repeat("x", clientdoc.DefaultMaxBytes)
		for name, tc := range map[string]struct {
			id, redirect, want string
		}{
			"not self-naming": {site.serve("/a.json", map[string]any{"client_id": "https://claude.ai/oauth/client.json"}), "http://127.0.0.1/callback", "client_id must be exactly"},
			"bad redirect":    {site.serve("/b.json", map[string]any{"redirect_uris": []string{"https://claude.ai@evil.example/cb"}}), "https://claude.ai@evil.example/cb", "redirect_uris"},
			"oversized":       {site.serve("/c.json", map[string]any{"padding": big}), "http://127.0.0.1/callback", "larger than"},
			"secret":          {site.serve("/d.json", map[string]any{"token_endpoint_auth_method": "client_secret_basic"}), "http://127.0.0.1/callback", "must be none"},
			"grant":           {site.serve("/e.json", map[string]any{"grant_types": []string{"authorization_code", "urn:ietf:params:oauth:grant-type:token-exchange"}}), "http://127.0.0.1/callback", "not available to clients described by a document"},
			"missing":         {site.ts.URL + "/nothing.json", "http://127.0.0.1/callback", "HTTP 404"},
			"query":           {site.ts.URL + "/a.json?x=1", "http://127.0.0.1/callback", "query"},
		} {
			t.Run(name, func(t *testing.T) {
				p := b.get(authorizeURL(h, tc.id, tc.redirect, "read", newPKCE(), nil))
				if p.status != http.StatusBadRequest || p.location() != "" || !strings.Contains(p.text(), "This app cannot be used") || !strings.Contains(p.text(), tc.want) {
					t.Errorf("%d %q\n%s", p.status, p.location(), p.text())
				}
				// The same client at the token endpoint is unknown: the client's mistake, not a 500.
				if r := h.token(url.Values{"grant_type": {"authorization_code"}, "client_id": {tc.id}, "code": {"x"}, "code_verifier": {newPKCE().verifier}}, "", ""); r.status != http.StatusUnauthorized || r.str("error") != "invalid_client" {
					t.Errorf("token endpoint: %d %s", r.status, r.raw)
				}
			})
		}
	})

	t.Run("private address", func(t *testing.T) {
		strict := register.ClientDocument(clientdoc.New(clientdoc.Options{RootCAs: site.pool, Now: h.clock.Now}))
		env := h.srv.Env()
		saved := env.ClientDocument
		env.ClientDocument = strict
		defer func() { env.ClientDocument = saved }()
		for _, cid := range []string{id, strings.Replace(id, "127.0.0.1", "localhost", 1), "https://10.0.0.1/oauth/client.json"} {
			p := b.get(authorizeURL(h, cid, "http://127.0.0.1/callback", "read", newPKCE(), nil))
			if p.status != http.StatusBadRequest || !strings.Contains(p.text(), "This app cannot be used") {
				t.Errorf("%s: %d\n%s", cid, p.status, p.text())
			}
		}
	})

	t.Run("the policy applies to its redirects as to registered ones", func(t *testing.T) {
		web := site.serve("/web.json", map[string]any{"redirect_uris": []string{"https://claude.ai/api/mcp/auth_callback", "https://app.example/cb"}})
		p := b.get(authorizeURL(h, web, "https://app.example/cb", "read", newPKCE(), nil))
		if p.status != http.StatusOK || !strings.Contains(p.body, `name="confirm_destination"`) {
			t.Errorf("a website redirect in a document gets the tick box: %d", p.status)
		}
		h.onlyRecognised(true)
		defer h.onlyRecognised(false)
		p = b.get(authorizeURL(h, web, "https://claude.ai/api/mcp/auth_callback", "read", newPKCE(), nil))
		if p.status != http.StatusForbidden || !strings.Contains(p.text(), refusal) {
			t.Errorf("%d\n%s", p.status, p.text())
		}
		p = b.get(authorizeURL(h, id, "http://127.0.0.1/callback", "read", newPKCE(), url.Values{"prompt": {"consent"}}))
		if p.status != http.StatusOK {
			t.Errorf("an on-device document client is allowed: %d %s", p.status, p.text())
		}
	})
}

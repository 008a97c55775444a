package attacks

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/consent"
)

// push sends an authorization request to the pushed authorization request endpoint as a public
// client (client_id in the form) or, with a secret, with Basic authentication.
func (e *env) push(clientID, clientSecret string, params url.Values) stack.Answer {
	e.t.Helper()
	return e.tokenCall("/par", clientID, clientSecret, params)
}

func pushParams(redirect string, pk pkce) url.Values {
	return url.Values{"response_type": {"code"}, "redirect_uri": {redirect}, "code_challenge": {pk.challenge},
		"code_challenge_method": {"S256"}, "scope": {"openid"}, "state": {"st"}}
}

func (e *env) authorizeWith(clientID, requestURI string) string {
	return e.Issuer + "/authorize?" + url.Values{"client_id": {clientID}, "request_uri": {requestURI}}.Encode()
}

const expiredRequestText = "has expired or has already been used"

// TestPushedAuthorizationRequests plays the ways around a pushed request (RFC 9126): using its
// request_uri twice, late, or under another client's id, pushing what /authorize would refuse,
// and, where pushing is required, skipping it or changing the request after it was pushed.
func TestPushedAuthorizationRequests(t *testing.T) {
	e := newEnv(t)
	c := e.registerPublic("Claude Desktop", loopback)
	other := e.registerPublic("Other app", loopback)
	alice := e.signedIn(stack.AliceEmail)

	pk := newPKCE()
	a := e.push(c.ID, "", pushParams(loopback, pk))
	uri := a.Str("request_uri")
	if a.Status != http.StatusCreated || !strings.HasPrefix(uri, "urn:ietf:params:oauth:request_uri:") || a.Body["expires_in"] != float64(60) {
		t.Fatalf("push: %d %s", a.Status, a.Raw)
	}
	// Another client's id with this request_uri gets nothing, and does not spend it.
	if p := alice.MustGet(e.authorizeWith(other.ID, uri)); p.Status != http.StatusBadRequest || !strings.Contains(p.Text(), expiredRequestText) || p.Location() != "" {
		t.Fatalf("request_uri under another client_id: %d %q %s", p.Status, p.Location(), p.Text())
	}
	p, _ := e.authorizeAs(alice, e.authorizeWith(c.ID, uri))
	code := codeFrom(p)
	if code == "" {
		t.Fatalf("no code for the pushed request: %d %s %s", p.Status, p.Location(), p.Text())
	}
	if r := e.redeem(c.ID, code, loopback, pk.verifier); r.Status != http.StatusOK {
		t.Fatalf("redeeming: %d %s", r.Status, r.Raw)
	}
	if p := alice.MustGet(e.authorizeWith(c.ID, uri)); p.Status != http.StatusBadRequest || !strings.Contains(p.Text(), expiredRequestText) {
		t.Errorf("request_uri used twice: %d %q %s", p.Status, p.Location(), p.Text())
	}

	late := e.push(c.ID, "", pushParams(loopback, newPKCE())).Str("request_uri")
	e.Clock.Advance(61 * time.Second)
	if p := alice.MustGet(e.authorizeWith(c.ID, late)); p.Status != http.StatusBadRequest || !strings.Contains(p.Text(), expiredRequestText) {
		t.Errorf("expired request_uri: %d %q %s", p.Status, p.Location(), p.Text())
	}

	t.Run("pushing checks what /authorize checks", func(t *testing.T) {
		if r := e.push(c.ID, "", pushParams("https://evil.example/cb", newPKCE())); r.Status != http.StatusBadRequest || r.Str("error") != "invalid_request" {
			t.Errorf("unregistered redirect_uri: %d %s", r.Status, r.Raw)
		}
		if r := e.push(c.ID, "", url.Values{"response_type": {"code"}, "redirect_uri": {loopback}}); r.Status != http.StatusBadRequest {
			t.Errorf("no PKCE: %d %s", r.Status, r.Raw)
		}
		if r := e.push(c.ID, "", url.Values{"request_uri": {uri}}); r.Status != http.StatusBadRequest {
			t.Errorf("a request_uri pushed: %d %s", r.Status, r.Raw)
		}
		// A confidential client authenticates as at the token endpoint.
		if r := e.push(stack.Agent, "wrong", pushParams("http://127.0.0.1/cb", newPKCE())); r.Status != http.StatusUnauthorized {
			t.Errorf("wrong secret: %d %s", r.Status, r.Raw)
		}
		if r := e.push(stack.Agent, stack.AgentSecret, pushParams("http://127.0.0.1/cb", newPKCE())); r.Status != http.StatusCreated {
			t.Errorf("confidential client: %d %s", r.Status, r.Raw)
		}
	})

	t.Run("only recognised apps", func(t *testing.T) {
		web := e.registerPublic("Web app", "https://app.example/cb")
		e.update(func(p *config.Project) { p.Redirects.OnlyRecognisedApps = true })
		defer e.update(func(p *config.Project) { p.Redirects.OnlyRecognisedApps = false })
		r := e.push(web.ID, "", pushParams("https://app.example/cb", newPKCE()))
		if r.Status != http.StatusBadRequest || !strings.Contains(r.Str("error_description"), policyRefusal) {
			t.Fatalf("pushed with a redirect the policy refuses: %d %s", r.Status, r.Raw)
		}
	})

	t.Run("registered require_pushed_authorization_requests", func(t *testing.T) {
		status, out := e.register(map[string]any{
			"client_name": "Pusher", "redirect_uris": []string{loopback}, "token_endpoint_auth_method": "none",
			"grant_types": []string{"authorization_code"}, "require_pushed_authorization_requests": true,
		})
		if status != http.StatusCreated {
			t.Fatalf("registering: %d %v", status, out)
		}
		id, _ := out["client_id"].(string)
		p := alice.MustGet(e.authorizeURL(id, loopback, newPKCE(), nil))
		if loc, _ := url.Parse(p.Location()); loc == nil || loc.Query().Get("error") != "invalid_request" {
			t.Fatalf("a request that was not pushed: %d %q", p.Status, p.Location())
		}
	})

	t.Run("required", func(t *testing.T) {
		e.update(func(p *config.Project) { p.RequirePAR = true })
		defer e.update(func(p *config.Project) { p.RequirePAR = false })
		md := e.send(mustGet(t, e.Issuer+"/.well-known/oauth-authorization-server"))
		if md.Body["require_pushed_authorization_requests"] != true || md.Body["pushed_authorization_request_endpoint"] != e.Issuer+"/par" {
			t.Errorf("metadata: %s", md.Raw)
		}
		p := alice.MustGet(e.authorizeURL(c.ID, loopback, newPKCE(), nil))
		if loc, _ := url.Parse(p.Location()); loc == nil || loc.Query().Get("error") != "invalid_request" || codeFrom(p) != "" {
			t.Fatalf("a request that was not pushed: %d %q", p.Status, p.Location())
		}
		// Pushed, then changed on the way (the consent form's scope, the sealed request's
		// redirect): refused, no code.
		pk := newPKCE()
		params := pushParams(loopback, pk)
		params.Set("prompt", "consent")
		uri := e.push(c.ID, "", params).Str("request_uri")
		page := alice.MustGet(e.authorizeWith(c.ID, uri))
		action, f, _ := consentFields(t, page)
		if f.Get("pushed") == "" {
			t.Fatalf("the consent form does not carry the pushed request's seal: %v", f)
		}
		f.Set("scope", "openid email")
		if d := alice.MustPost(action, f); codeFrom(d) != "" {
			t.Fatalf("a pushed request changed after pushing got a code: %s", d.Location())
		}
		seal := f.Get("pushed")
		f.Set("pushed", "forged."+secret.NewID())
		f.Set("scope", "openid")
		if d := alice.MustPost(action, f); codeFrom(d) != "" {
			t.Fatalf("a forged seal got a code: %s", d.Location())
		}
		// Someone who must sign in first still finishes the pushed request.
		pk2 := newPKCE()
		uri2 := e.push(c.ID, "", pushParams(loopback, pk2)).Str("request_uri")
		fresh := e.Browser()
		signInPage := fresh.MustFollow(fresh.MustGet(e.authorizeWith(c.ID, uri2)))
		next := signInAt(t, fresh, signInPage, stack.AliceEmail, stack.AlicePassword).Continue()
		if next == "" {
			t.Fatalf("no way back from sign-in: %s", signInPage.Text())
		}
		if r := e.redeem(c.ID, codeFrom(fresh.MustGet(next)), loopback, pk2.verifier); r.Status != http.StatusOK {
			t.Fatalf("after signing in: redeeming: %d %s", r.Status, r.Raw)
		}
		// As pushed, the request goes through.
		f.Set("pushed", seal)
		d := alice.MustPost(action, f)
		if r := e.redeem(c.ID, codeFrom(d), loopback, pk.verifier); r.Status != http.StatusOK {
			t.Fatalf("the pushed request as pushed: %s; redeeming: %d %s", d.Location(), r.Status, r.Raw)
		}
	})
}

func mustGet(t *testing.T, u string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestPushedRequestsAreLimited: pushing stores a row, so one address cannot fill the store with
// a public client's id; refused pushes, which store nothing, do not count.
func TestPushedRequestsAreLimited(t *testing.T) {
	burst := consent.PushBurst
	consent.PushBurst = 3
	defer func() { consent.PushBurst = burst }()
	e := newEnv(t)
	c := e.registerPublic("Claude Desktop", loopback)
	for range 5 {
		if r := e.push(c.ID, "", pushParams("https://evil.example/cb", newPKCE())); r.Status != http.StatusBadRequest {
			t.Fatalf("a refused push: %d %s", r.Status, r.Raw)
		}
	}
	for i := range 3 {
		if r := e.push(c.ID, "", pushParams(loopback, newPKCE())); r.Status != http.StatusCreated {
			t.Fatalf("push %d: %d %s", i, r.Status, r.Raw)
		}
	}
	r := e.push(c.ID, "", pushParams(loopback, newPKCE()))
	if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Fatalf("over the limit: %d %s", r.Status, r.Raw)
	}
}

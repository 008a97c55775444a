package attacks

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/exchange"
)

const loopback = "http://127.0.0.1/cb"

// TestRefreshTokenReuse is reuse detection for rotated refresh tokens (docs/recognised-apps.md): a
// copied refresh token used first by the attacker. The legitimate client's next refresh fails, and
// the attacker's pair dies with it; another client of the same person is untouched.
func TestRefreshTokenReuse(t *testing.T) {
	e := newEnv(t)
	c := e.registerPublic("Claude Desktop", loopback)
	other := e.registerPublic("Other app", loopback)
	alice := e.signedIn(stack.AliceEmail)
	legit := e.codeFlow(alice, c.ID, loopback)
	bystander := e.codeFlow(alice, other.ID, loopback)

	stolen := e.refresh(c.ID, legit.Str("refresh_token"))
	if stolen.Status != http.StatusOK {
		t.Fatalf("attacker's refresh: %d %s", stolen.Status, stolen.Raw)
	}
	e.Clock.Advance(time.Minute) // well outside the grace window
	if a := e.refresh(c.ID, legit.Str("refresh_token")); a.Status != http.StatusBadRequest || a.Str("error") != "invalid_grant" {
		t.Fatalf("legitimate refresh after the attacker's: %d %s", a.Status, a.Raw)
	}
	if a := e.refresh(c.ID, stolen.Str("refresh_token")); a.Status == http.StatusOK {
		t.Fatalf("the attacker's pair survived reuse detection: %s", a.Raw)
	}
	for name, tok := range map[string]string{"attacker's access token": stolen.Str("access_token"), "legit access token": legit.Str("access_token")} {
		if e.active(tok) {
			t.Errorf("%s is still active", name)
		}
	}
	if !e.active(bystander.Str("access_token")) {
		t.Error("another client's access token was ended")
	}
	if a := e.refresh(other.ID, bystander.Str("refresh_token")); a.Status != http.StatusOK {
		t.Errorf("another client's refresh: %d %s", a.Status, a.Raw)
	}
	// Another client cannot use, or end, this client's token.
	fresh := e.codeFlow(alice, c.ID, loopback)
	if a := e.refresh(other.ID, fresh.Str("refresh_token")); a.Status != http.StatusBadRequest {
		t.Errorf("another client refreshed this client's token: %d %s", a.Status, a.Raw)
	}
	if a := e.refresh(c.ID, fresh.Str("refresh_token")); a.Status != http.StatusOK {
		t.Errorf("a foreign attempt ended the token: %d %s", a.Status, a.Raw)
	}
}

// TestRefreshGraceWindow: a double submit inside the grace window gets the same pair; a token
// two generations old, even inside the window, ends the family.
func TestRefreshGraceWindow(t *testing.T) {
	e := newEnv(t)
	c := e.registerPublic("Claude Desktop", loopback)
	alice := e.signedIn(stack.AliceEmail)
	t0 := e.codeFlow(alice, c.ID, loopback)

	first := e.refresh(c.ID, t0.Str("refresh_token"))
	second := e.refresh(c.ID, t0.Str("refresh_token"))
	if first.Status != http.StatusOK || second.Status != http.StatusOK {
		t.Fatalf("double submit: %d %s / %d %s", first.Status, first.Raw, second.Status, second.Raw)
	}
	if first.Str("refresh_token") != second.Str("refresh_token") || first.Str("access_token") != second.Str("access_token") {
		t.Fatal("the double submit forked the grant: two different pairs are live")
	}
	t2 := e.refresh(c.ID, first.Str("refresh_token"))
	if t2.Status != http.StatusOK {
		t.Fatalf("next generation: %d %s", t2.Status, t2.Raw)
	}
	// t0 is now two generations old; presented inside the window it is reuse.
	if a := e.refresh(c.ID, t0.Str("refresh_token")); a.Status == http.StatusOK {
		t.Fatalf("a token two generations old was accepted: %s", a.Raw)
	}
	if e.active(t2.Str("access_token")) {
		t.Error("the family survived a two-generations-old token")
	}
	if a := e.refresh(c.ID, t2.Str("refresh_token")); a.Status == http.StatusOK {
		t.Error("the newest refresh token survived")
	}
}

// TestCodeInjection: a code works once, for its own client, redirect, project and verifier; a
// replay ends what the first redemption issued.
func TestCodeInjection(t *testing.T) {
	e := newEnv(t)
	otherIssuer := e.addOtherProject()
	a := e.registerPublic("App A", loopback)
	b := e.registerPublic("App B", loopback)
	alice := e.signedIn(stack.AliceEmail)
	code := func(c registered) (string, pkce) {
		t.Helper()
		pk := newPKCE()
		p, _ := e.authorizeAs(alice, e.authorizeURL(c.ID, loopback, pk, nil))
		if codeFrom(p) == "" {
			t.Fatalf("no code: %d %s", p.Status, p.Text())
		}
		return codeFrom(p), pk
	}

	t.Run("client B redeems client A's code", func(t *testing.T) {
		ca, pk := code(a)
		if r := e.redeem(b.ID, ca, loopback, pk.verifier); r.Status != http.StatusBadRequest || r.Str("error") != "invalid_grant" {
			t.Fatalf("B redeemed A's code: %d %s", r.Status, r.Raw)
		}
		live, _ := e.Store().CountLiveTokens(t.Context(), stack.ProjectKey, e.Clock.Now())
		if live[b.ID] != 0 {
			t.Fatalf("B holds %d tokens", live[b.ID])
		}
	})
	t.Run("wrong verifier, wrong redirect, other project", func(t *testing.T) {
		for name, try := range map[string]func(code string, pk pkce) stack.Answer{
			"wrong verifier": func(c string, pk pkce) stack.Answer { return e.redeem(a.ID, c, loopback, newPKCE().verifier) },
			"no verifier":    func(c string, pk pkce) stack.Answer { return e.redeem(a.ID, c, loopback, "") },
			"challenge as verifier": func(c string, pk pkce) stack.Answer {
				return e.redeem(a.ID, c, loopback, pk.challenge)
			},
			"other redirect": func(c string, pk pkce) stack.Answer { return e.redeem(a.ID, c, "http://127.0.0.1:9/cb", pk.verifier) },
			"no redirect":    func(c string, pk pkce) stack.Answer { return e.redeem(a.ID, c, "", pk.verifier) },
			"other project": func(c string, pk pkce) stack.Answer {
				req, _ := http.NewRequest(http.MethodPost, otherIssuer+"/token", strings.NewReader(url.Values{
					"grant_type": {"authorization_code"}, "code": {c}, "redirect_uri": {loopback}, "code_verifier": {pk.verifier}, "client_id": {a.ID},
				}.Encode()))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				return e.send(req)
			},
		} {
			c, pk := code(a)
			r := try(c, pk)
			if r.Status == http.StatusOK || r.Status >= 500 || r.Str("access_token") != "" {
				t.Errorf("%s: %d %s", name, r.Status, r.Raw)
			}
			// A try by someone who cannot redeem the code does not spend it: the client it was
			// issued to still can (a leaked code cannot be burnt).
			if r := e.redeem(a.ID, c, loopback, pk.verifier); r.Status != http.StatusOK {
				t.Errorf("%s: the code no longer works for its own client afterwards: %d %s", name, r.Status, r.Raw)
			}
		}
	})
	t.Run("replay ends what the first redemption issued", func(t *testing.T) {
		c, pk := code(a)
		first := e.redeem(a.ID, c, loopback, pk.verifier)
		if first.Status != http.StatusOK {
			t.Fatalf("first redemption: %d %s", first.Status, first.Raw)
		}
		if r := e.redeem(a.ID, c, loopback, pk.verifier); r.Status != http.StatusBadRequest {
			t.Fatalf("replay: %d %s", r.Status, r.Raw)
		}
		if e.active(first.Str("access_token")) {
			t.Error("the first redemption's access token survived the replay")
		}
		if r := e.refresh(a.ID, first.Str("refresh_token")); r.Status == http.StatusOK {
			t.Error("the first redemption's refresh token survived the replay")
		}
	})
}

// TestIntrospectionAcrossClients decides who may learn about a token (RFC 7662 §2.2, §4: the
// server answers active:false for a token the caller may not introspect, and SHOULD let only
// resource servers it authorised introspect). A declared confidential client (a resource server
// an administrator set up, such as an MCP server) may ask about any access token of the
// project; a client that registered itself may ask only about tokens issued to it or naming it
// as their audience; refresh tokens are described only to their holder; public clients may not
// ask at all.
func TestIntrospectionAcrossClients(t *testing.T) {
	e := newEnv(t)
	pub := e.registerPublic("App", loopback)
	alice := e.signedIn(stack.AliceEmail)
	tok := e.codeFlow(alice, pub.ID, loopback)
	status, out := e.register(map[string]any{
		"client_name": "Resource server?", "redirect_uris": []string{"https://rs.example/cb"},
		"grant_types": []string{"authorization_code", "client_credentials"},
	})
	if status != http.StatusCreated {
		t.Fatalf("registering: %d %v", status, out)
	}
	selfID, _ := out["client_id"].(string)
	selfSecret, _ := out["client_secret"].(string)

	ask := func(id, sec, token string) stack.Answer {
		t.Helper()
		return e.tokenCall("/introspect", id, sec, url.Values{"token": {token}})
	}
	if a := ask(stack.MCP, stack.MCPSecret, tok.Str("access_token")); a.Body["active"] != true || a.Str("sub") == "" {
		t.Errorf("declared resource server: %d %s", a.Status, a.Raw)
	}
	if a := ask(stack.MCP, stack.MCPSecret, tok.Str("refresh_token")); a.Body["active"] != false {
		t.Errorf("declared resource server learns about another client's refresh token: %s", a.Raw)
	}
	if a := ask(pub.ID, "", tok.Str("access_token")); a.Status != http.StatusUnauthorized || a.Str("error") != "invalid_client" {
		t.Errorf("public client: %d %s", a.Status, a.Raw)
	}
	if a := ask(selfID, selfSecret, tok.Str("access_token")); a.Status != http.StatusOK || a.Body["active"] != false || len(a.Body) != 1 {
		t.Errorf("a self-registered client learns about another client's access token: %d %s", a.Status, a.Raw)
	}
	// Its own token is its business.
	own := e.tokenCall("/token", selfID, selfSecret, url.Values{"grant_type": {"client_credentials"}})
	if own.Status != http.StatusOK {
		t.Fatalf("client_credentials: %d %s", own.Status, own.Raw)
	}
	if a := ask(selfID, selfSecret, own.Str("access_token")); a.Body["active"] != true {
		t.Errorf("a self-registered client cannot introspect its own token: %s", a.Raw)
	}
	// Guessing is just inactive, and the same answer as a foreign token.
	if a := ask(stack.MCP, stack.MCPSecret, secret.New(secret.PrefixAccessToken)); a.Body["active"] != false || len(a.Body) != 1 {
		t.Errorf("unknown token: %s", a.Raw)
	}
}

// TestTokenExchangeAttacks: only the person's own agent (or the resource server the token was
// issued for) gets the person's link or token; every other request is refused without a link.
func TestTokenExchangeAttacks(t *testing.T) {
	e := newEnv(t)
	conn := e.ConnectDirectly(stack.AliceEmail, "2002", stack.AliceLogin, "gho_alice_secret")
	e.Allow(stack.AliceEmail, stack.Agent, conn)
	aliceTok := e.AccessToken(stack.AliceEmail, stack.Agent)
	if a := e.AgentExchange(aliceTok); a.Status != http.StatusOK || a.Str("access_token") != "gho_alice_secret" {
		t.Fatalf("control: Alice's agent: %d %s", a.Status, a.Raw)
	}
	base := func(subject string) url.Values {
		return url.Values{
			"grant_type": {exchange.GrantType}, "subject_token": {subject},
			"subject_token_type": {exchange.TokenTypeAccessToken}, "audience": {stack.Audience},
		}
	}
	with := func(v url.Values, k string, vals ...string) url.Values {
		c := url.Values{}
		for kk, vv := range v {
			c[kk] = vv
		}
		if vals == nil {
			c.Del(k)
		} else {
			c[k] = vals
		}
		return c
	}
	otherIssuer := e.addOtherProject()
	refresh := secret.New(secret.PrefixRefreshToken)
	{
		// A refresh token of Alice's, as the code grant would store it.
		if err := e.Store().CreateTokens(t.Context(), tokenRow(e, refresh, stack.AliceEmail)); err != nil {
			t.Fatal(err)
		}
	}
	revoked := e.AccessToken(stack.AliceEmail, stack.Agent)
	if err := e.Store().RevokeToken(t.Context(), secret.Hash(revoked), e.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	mcpTok := e.AccessToken(stack.AliceEmail, "some-agent") // issued to another client, not for the MCP server

	cases := []struct {
		name, client, secret string
		form                 url.Values
		wantErr              string
	}{
		{"unrelated client presents Alice's token", stack.Copycat, stack.CopycatSecret, base(aliceTok), "invalid_grant"},
		{"MCP server presents a token not issued for it", stack.MCP, stack.MCPSecret, base(mcpTok), "invalid_grant"},
		{"registered client with the exchange grant", stack.Registered, stack.RegisteredSecret, base(e.AccessToken(stack.AliceEmail, stack.Registered)), "unauthorized_client"},
		{"refresh token as subject", stack.Agent, stack.AgentSecret, base(refresh), "invalid_grant"},
		{"revoked subject", stack.Agent, stack.AgentSecret, base(revoked), "invalid_grant"},
		{"made-up subject", stack.Agent, stack.AgentSecret, base(secret.New(secret.PrefixAccessToken)), "invalid_grant"},
		{"subject as refresh type", stack.Agent, stack.AgentSecret, with(base(aliceTok), "subject_token_type", "urn:ietf:params:oauth:token-type:refresh_token"), "invalid_request"},
		{"id token requested", stack.Agent, stack.AgentSecret, with(base(aliceTok), "requested_token_type", "urn:ietf:params:oauth:token-type:id_token"), "invalid_request"},
		{"repeated subject_token", stack.Agent, stack.AgentSecret, with(base(aliceTok), "subject_token", aliceTok, mcpTok), "invalid_request"},
		{"repeated grant_type", stack.Agent, stack.AgentSecret, with(base(aliceTok), "grant_type", exchange.GrantType, exchange.GrantType), "invalid_request"},
		{"two services", stack.Agent, stack.AgentSecret, with(base(aliceTok), "audience", stack.Audience, "gitlab"), "invalid_target"},
		{"audience and a conflicting resource", stack.Agent, stack.AgentSecret, with(base(aliceTok), "resource", "https://api.github.com/"), "invalid_target"},
		{"no audience", stack.Agent, stack.AgentSecret, with(base(aliceTok), "audience"), "invalid_target"},
		{"another project's connector key", stack.Agent, stack.AgentSecret, with(base(aliceTok), "audience", "team/github"), "invalid_target"},
		{"actor token", stack.Agent, stack.AgentSecret, with(base(aliceTok), "actor_token", aliceTok), "invalid_request"},
		{"wrong client secret", stack.Agent, "nope", base(aliceTok), "invalid_client"},
	}
	for _, c := range cases {
		a := e.tokenCall("/token", c.client, c.secret, c.form)
		if a.Status < 400 || a.Status >= 500 || a.Str("error") != c.wantErr {
			t.Errorf("%s: %d %s; want %s", c.name, a.Status, a.Raw, c.wantErr)
		}
		noLinkIn(t, c.name, a)
		if strings.Contains(string(a.Raw), "gho_") {
			t.Errorf("%s: the answer carries an upstream token", c.name)
		}
		if a.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("%s: Cache-Control %q", c.name, a.Header.Get("Cache-Control"))
		}
	}
	// An expired subject token.
	e.Clock.Advance(2 * time.Hour)
	a := e.AgentExchange(aliceTok)
	if a.Str("error") != "invalid_grant" {
		t.Errorf("expired subject: %d %s", a.Status, a.Raw)
	}
	noLinkIn(t, "expired subject", a)
	// The same request at the other project's token endpoint: the token is not that project's.
	req, _ := http.NewRequest(http.MethodPost, otherIssuer+"/token", strings.NewReader(base(e.AccessToken(stack.AliceEmail, stack.Agent)).Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(stack.Agent, stack.AgentSecret)
	if a := e.send(req); a.Str("error") != "invalid_grant" {
		t.Errorf("other project: %d %s", a.Status, a.Raw)
	} else {
		noLinkIn(t, "other project", a)
	}
	// Each person's refusal carries their own link only.
	ma := e.AgentExchange(e.AccessToken(stack.MalloryEmail, stack.Agent))
	if ma.Str("connect_uri") == "" {
		t.Fatalf("Mallory's refusal: %s", ma.Raw)
	}
	if raw, _ := json.Marshal(ma.Body); strings.Contains(string(raw), "alice") {
		t.Errorf("Mallory's refusal mentions Alice: %s", raw)
	}
}

// tokenRow is a live refresh token of the person's, issued to Repo Helper.
func tokenRow(e *env, raw, email string) store.Token {
	now := e.Clock.Now()
	return store.Token{
		Hash: secret.Hash(raw), Kind: store.RefreshToken, Project: stack.ProjectKey, ClientID: stack.Agent,
		Subject: e.PersonID(email), FamilyID: secret.New(""), AuthTime: now, IssuedAt: now, ExpiresAt: now.Add(24 * time.Hour),
	}
}

// TestConcurrentRedemptions: many parties redeem one code at the same moment (an attacker who
// stole it racing the client). At most one gets tokens, and since the code was replayed, what it
// got is ended too — however the requests interleave.
func TestConcurrentRedemptions(t *testing.T) {
	e := newEnv(t)
	c := e.registerPublic("App", loopback)
	alice := e.signedIn(stack.AliceEmail)
	for round := range 5 {
		pk := newPKCE()
		p, _ := e.authorizeAs(alice, e.authorizeURL(c.ID, loopback, pk, nil))
		code := codeFrom(p)
		if code == "" {
			t.Fatalf("no code: %d", p.Status)
		}
		const n = 12
		var wg sync.WaitGroup
		answers := make([]stack.Answer, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers[i] = e.redeem(c.ID, code, loopback, pk.verifier)
			}()
		}
		wg.Wait()
		won := 0
		for _, a := range answers {
			if a.Status == http.StatusOK {
				won++
				if e.active(a.Str("access_token")) {
					t.Errorf("round %d: tokens from a replayed code are still active", round)
				}
				if r := e.refresh(c.ID, a.Str("refresh_token")); r.Status == http.StatusOK {
					t.Errorf("round %d: the refresh token from a replayed code still works", round)
				}
			}
		}
		if won > 1 {
			t.Fatalf("round %d: %d redemptions of one code succeeded", round, won)
		}
	}
}

// TestOtherClientsCannotManageOrRevoke: a client's registration token manages only that client,
// and revocation by another client changes nothing.
func TestOtherClientsCannotManageOrRevoke(t *testing.T) {
	e := newEnv(t)
	a := e.registerPublic("App A", loopback)
	b := e.registerPublic("App B", loopback)
	alice := e.signedIn(stack.AliceEmail)
	tok := e.codeFlow(alice, a.ID, loopback)

	for _, method := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		for name, bearer := range map[string]string{"B's token": b.RegToken, "none": "", "A's token with a suffix": a.RegToken + "x"} {
			req, _ := http.NewRequest(method, e.Issuer+"/register/"+a.ID, strings.NewReader(`{"client_id":"`+a.ID+`","redirect_uris":["https://evil.example/cb"],"token_endpoint_auth_method":"none"}`))
			req.Header.Set("Content-Type", "application/json")
			if bearer != "" {
				req.Header.Set("Authorization", "Bearer "+bearer)
			}
			if r := e.send(req); r.Status != http.StatusUnauthorized {
				t.Errorf("%s /register/A with %s: %d %s", method, name, r.Status, r.Raw)
			}
		}
	}
	if c, err := e.Store().GetClient(t.Context(), stack.ProjectKey, a.ID); err != nil || len(c.RedirectURIs) != 1 || c.RedirectURIs[0] != loopback {
		t.Fatalf("client A changed: %+v %v", c, err)
	}
	for _, which := range []string{"refresh_token", "access_token"} {
		if r := e.tokenCall("/revoke", b.ID, "", url.Values{"token": {tok.Str(which)}}); r.Status != http.StatusOK {
			t.Errorf("revocation answer: %d %s", r.Status, r.Raw)
		}
	}
	if !e.active(tok.Str("access_token")) {
		t.Fatal("B revoked A's access token")
	}
	if r := e.refresh(a.ID, tok.Str("refresh_token")); r.Status != http.StatusOK {
		t.Fatalf("B revoked A's refresh token: %s", r.Raw)
	}
}

// TestHostHeaderChangesNothing: addresses Latchkey hands out come from its configured public
// URL, never from what a request claims its host is.
func TestHostHeaderChangesNothing(t *testing.T) {
	e := newEnv(t)
	subject := e.AccessToken(stack.AliceEmail, stack.Agent)
	form := url.Values{
		"grant_type": {exchange.GrantType}, "subject_token": {subject},
		"subject_token_type": {exchange.TokenTypeAccessToken}, "audience": {stack.Audience},
	}
	req, _ := http.NewRequest(http.MethodPost, e.Issuer+"/token", strings.NewReader(form.Encode()))
	req.Host = "evil.example"
	req.Header.Set("X-Forwarded-Host", "evil.example")
	req.Header.Set("X-Forwarded-Proto", "https")
	req.Header.Set("Forwarded", "host=evil.example;proto=https")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(stack.Agent, stack.AgentSecret)
	a := e.send(req)
	if !strings.HasPrefix(a.Str("connect_uri"), e.Issuer+"/") {
		t.Fatalf("connect_uri with a forged Host: %s", a.Raw)
	}
	mreq, _ := http.NewRequest(http.MethodGet, e.Issuer+"/.well-known/oauth-authorization-server", nil)
	mreq.Host = "evil.example"
	mreq.Header.Set("X-Forwarded-Host", "evil.example")
	m := e.send(mreq)
	if strings.Contains(string(m.Raw), "evil.example") || m.Str("issuer") != e.Issuer {
		t.Fatalf("metadata with a forged Host: %d %s", m.Status, m.Raw)
	}
	b := e.Browser()
	sreq, _ := http.NewRequest(http.MethodGet, e.Front.URL+e.LinkPath(a.Str("connect_uri")), nil)
	sreq.Host = "evil.example"
	if p := b.MustDo(sreq); strings.Contains(p.Header.Get("Location"), "evil.example") {
		t.Fatalf("the link page redirects to %s", p.Header.Get("Location"))
	}
}

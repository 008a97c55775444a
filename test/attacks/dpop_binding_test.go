package attacks

import (
	"crypto"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/mcp/dpop"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/exchange"
)

func thumbprint(t *testing.T, k crypto.Signer) string {
	t.Helper()
	jkt, err := dpop.Thumbprint(k)
	if err != nil {
		t.Fatal(err)
	}
	return jkt
}

// pushWithProof pushes an authorization request as a public client, with a DPoP header when
// proof is not "".
func (e *env) pushWithProof(clientID string, params url.Values, proof string) stack.Answer {
	e.t.Helper()
	params.Set("client_id", clientID)
	req, _ := http.NewRequest(http.MethodPost, e.Issuer+"/par", strings.NewReader(params.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if proof != "" {
		req.Header.Set("DPoP", proof)
	}
	return e.send(req)
}

// auditReasons counts the records of action for client by reason.
func (e *env) auditReasons(action, clientID string) map[string]int {
	e.t.Helper()
	recs, err := e.Store().ListAudit(e.t.Context(), stack.ProjectKey, 200)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]int{}
	for _, r := range recs {
		if r.Action == action && r.ClientID == clientID {
			out[r.Reason+"/"+r.Details["proof"]]++
		}
	}
	return out
}

// TestDPoPBoundCode: a code requested with dpop_jkt (RFC 9449 §10), or pushed with a DPoP
// proof (§10.1), is the key holder's only. Whoever intercepts it (a malicious app on the same
// loopback port, a leaked redirect) and redeems it with their own key, or with none, gets
// nothing, and the code stays good for its holder.
func TestDPoPBoundCode(t *testing.T) {
	e := newEnv(t)
	c := e.registerPublic("Claude Desktop", loopback)
	alice := e.signedIn(stack.AliceEmail)
	key, thief := newKey(t), newKey(t)
	jkt := thumbprint(t, key)
	tokenProof := func(k crypto.Signer) string { return e.proof(k, "POST", e.Issuer+"/token", dpop.Claims{}) }
	redeemForm := func(code string, pk pkce) url.Values {
		return url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {loopback}, "code_verifier": {pk.verifier}}
	}
	// stolen plays the thief with the code, then the holder; it returns the holder's answer.
	stolen := func(t *testing.T, code string, pk pkce) stack.Answer {
		t.Helper()
		for _, try := range []struct{ name, proof string }{{"the thief's key", tokenProof(thief)}, {"no proof", ""}} {
			if r := e.tokenWithProof(c.ID, "", redeemForm(code, pk), try.proof); r.Status != http.StatusBadRequest || r.Str("error") != "invalid_grant" {
				t.Fatalf("bound code redeemed with %s: %d %s, want invalid_grant", try.name, r.Status, r.Raw)
			}
		}
		// The refusals did not spend the code: its holder redeems it, bound to the key.
		r := e.tokenWithProof(c.ID, "", redeemForm(code, pk), tokenProof(key))
		if r.Status != http.StatusOK || r.Str("token_type") != "DPoP" {
			t.Fatalf("the holder's redemption: %d %s", r.Status, r.Raw)
		}
		in := e.postBasic("/introspect", stack.MCP, stack.MCPSecret, url.Values{"token": {r.Str("access_token")}})
		if cnf, _ := in.Body["cnf"].(map[string]any); cnf["jkt"] != jkt {
			t.Fatalf("introspection: %s, want cnf.jkt %s", in.Raw, jkt)
		}
		return r
	}

	t.Run("dpop_jkt at /authorize", func(t *testing.T) {
		pk := newPKCE()
		p, _ := e.authorizeAs(alice, e.authorizeURL(c.ID, loopback, pk, url.Values{"dpop_jkt": {jkt}}))
		code := codeFrom(p)
		if code == "" {
			t.Fatalf("no code: %d %s %s", p.Status, p.Location(), p.Text())
		}
		stolen(t, code, pk)
		// Each refusal is recorded, for whoever watches for intercepted codes.
		if got := e.auditReasons(events.DPoPProofRefused, c.ID); got["dpop_key_mismatch/another_key"] != 1 || got["dpop_key_mismatch/none"] != 1 {
			t.Errorf("dpop.proof_refused records: %v, want one for the thief's key and one without a proof", got)
		}
	})

	t.Run("malformed dpop_jkt at /authorize", func(t *testing.T) {
		for name, v := range map[string]string{
			"too short":       "abc",
			"not base64url":   strings.Repeat("+", 43),
			"padded":          jkt + "=",
			"a bad character": jkt[:42] + "!",
		} {
			p := alice.MustGet(e.authorizeURL(c.ID, loopback, newPKCE(), url.Values{"dpop_jkt": {v}}))
			u, err := url.Parse(p.Location())
			if err != nil || p.Status != http.StatusFound || u.Query().Get("error") != "invalid_request" || u.Query().Get("code") != "" {
				t.Errorf("%s: %d %q, want a redirect with invalid_request", name, p.Status, p.Location())
			}
		}
	})

	t.Run("a DPoP proof at the pushed authorization request endpoint", func(t *testing.T) {
		pk := newPKCE()
		a := e.pushWithProof(c.ID, pushParams(loopback, pk), e.proof(key, "POST", e.Issuer+"/par", dpop.Claims{}))
		if a.Status != http.StatusCreated {
			t.Fatalf("push with a proof: %d %s", a.Status, a.Raw)
		}
		p, _ := e.authorizeAs(alice, e.authorizeWith(c.ID, a.Str("request_uri")))
		code := codeFrom(p)
		if code == "" {
			t.Fatalf("no code: %d %s %s", p.Status, p.Location(), p.Text())
		}
		stolen(t, code, pk)
	})

	t.Run("dpop_jkt pushed", func(t *testing.T) {
		pk := newPKCE()
		params := pushParams(loopback, pk)
		params.Set("dpop_jkt", jkt)
		a := e.pushWithProof(c.ID, params, "")
		if a.Status != http.StatusCreated {
			t.Fatalf("push with dpop_jkt: %d %s", a.Status, a.Raw)
		}
		p, _ := e.authorizeAs(alice, e.authorizeWith(c.ID, a.Str("request_uri")))
		stolen(t, codeFrom(p), pk)
	})

	t.Run("pushed requests that contradict themselves", func(t *testing.T) {
		params := pushParams(loopback, newPKCE())
		params.Set("dpop_jkt", thumbprint(t, thief))
		if a := e.pushWithProof(c.ID, params, e.proof(key, "POST", e.Issuer+"/par", dpop.Claims{})); a.Status != http.StatusBadRequest || a.Str("error") != "invalid_request" {
			t.Errorf("dpop_jkt of another key than the proof's: %d %s", a.Status, a.Raw)
		}
		for name, proof := range map[string]string{
			"a proof for the token endpoint": e.proof(key, "POST", e.Issuer+"/token", dpop.Claims{}),
			"a stale proof":                  e.proof(key, "POST", e.Issuer+"/par", dpop.Claims{IssuedAt: e.Clock.Now().Add(-10 * time.Minute)}),
			"not a proof":                    "not-a-proof",
		} {
			if a := e.pushWithProof(c.ID, pushParams(loopback, newPKCE()), proof); a.Status != http.StatusBadRequest || a.Str("error") != "invalid_dpop_proof" {
				t.Errorf("%s: %d %s, want invalid_dpop_proof", name, a.Status, a.Raw)
			}
		}
		// A proof seen on its way to the pushed request endpoint does not bind a second push.
		proof := e.proof(key, "POST", e.Issuer+"/par", dpop.Claims{})
		if a := e.pushWithProof(c.ID, pushParams(loopback, newPKCE()), proof); a.Status != http.StatusCreated {
			t.Fatalf("push: %d %s", a.Status, a.Raw)
		}
		if a := e.pushWithProof(c.ID, pushParams(loopback, newPKCE()), proof); a.Str("error") != "invalid_dpop_proof" {
			t.Errorf("replayed proof at the pushed request endpoint: %d %s", a.Status, a.Raw)
		}
	})

	t.Run("nonces at the pushed request endpoint", func(t *testing.T) {
		e.update(func(p *config.Project) { p.RequireDPoPNonce = true })
		defer e.update(func(p *config.Project) { p.RequireDPoPNonce = false })
		first := e.pushWithProof(c.ID, pushParams(loopback, newPKCE()), e.proof(key, "POST", e.Issuer+"/par", dpop.Claims{}))
		nonce := first.Header.Get("DPoP-Nonce")
		if first.Status != http.StatusBadRequest || first.Str("error") != "use_dpop_nonce" || nonce == "" {
			t.Fatalf("push without a nonce: %d %s nonce %q", first.Status, first.Raw, nonce)
		}
		if a := e.pushWithProof(c.ID, pushParams(loopback, newPKCE()), e.proof(key, "POST", e.Issuer+"/par", dpop.Claims{Nonce: nonce})); a.Status != http.StatusCreated {
			t.Fatalf("push with the nonce: %d %s", a.Status, a.Raw)
		}
	})

	t.Run("an unbound code needs no proof", func(t *testing.T) {
		pk := newPKCE()
		p, _ := e.authorizeAs(alice, e.authorizeURL(c.ID, loopback, pk, nil))
		if r := e.tokenWithProof(c.ID, "", redeemForm(codeFrom(p), pk), ""); r.Status != http.StatusOK || r.Str("token_type") != "Bearer" {
			t.Fatalf("unbound code: %d %s", r.Status, r.Raw)
		}
	})
}

// boundToken stores a live access token of the person's, issued to client and bound to jkt, as
// the code grant issues one redeemed with a DPoP proof.
func (e *env) boundToken(email, client, jkt string, audience ...string) string {
	e.t.Helper()
	tok := secret.New(secret.PrefixAccessToken)
	now := e.Clock.Now()
	if err := e.Store().CreateTokens(e.t.Context(), store.Token{
		Hash: secret.Hash(tok), Kind: store.AccessToken, Project: stack.ProjectKey, ClientID: client,
		Subject: e.PersonID(email), Scopes: []string{"openid"}, Audience: audience, FamilyID: secret.New(""),
		AuthTime: now, IssuedAt: now, ExpiresAt: now.Add(time.Hour), JKT: jkt,
	}); err != nil {
		e.t.Fatal(err)
	}
	return tok
}

// TestDPoPBoundSubjectToken: a DPoP-bound access token copied off the wire does not buy the
// person's upstream token by token exchange unless the request proves the key it is bound to.
func TestDPoPBoundSubjectToken(t *testing.T) {
	e := newEnv(t)
	conn := e.ConnectDirectly(stack.AliceEmail, "2002", stack.AliceLogin, "gho_alice_secret")
	e.Allow(stack.AliceEmail, stack.Agent, conn)
	key, thief := newKey(t), newKey(t)
	bound := e.boundToken(stack.AliceEmail, stack.Agent, thumbprint(t, key), stack.MCPResource)
	form := func() url.Values {
		return url.Values{
			"grant_type": {exchange.GrantType}, "subject_token": {bound},
			"subject_token_type": {exchange.TokenTypeAccessToken}, "audience": {stack.Audience},
		}
	}
	for name, proof := range map[string]string{
		"without a proof":             "",
		"with the thief's key":        e.proof(thief, "POST", e.Issuer+"/token", dpop.Claims{}),
		"with the thief's key, twice": e.proof(thief, "POST", e.Issuer+"/token", dpop.Claims{}),
	} {
		a := e.tokenWithProof(stack.Agent, stack.AgentSecret, form(), proof)
		if a.Status != http.StatusBadRequest || a.Str("error") != "invalid_grant" || strings.Contains(string(a.Raw), "gho_") {
			t.Errorf("bound subject token %s: %d %s, want invalid_grant", name, a.Status, a.Raw)
		}
		noLinkIn(t, name, a)
	}
	// A proof for another endpoint is no proof at the token endpoint.
	if a := e.tokenWithProof(stack.Agent, stack.AgentSecret, form(), e.proof(key, "POST", e.Issuer+"/introspect", dpop.Claims{})); a.Str("error") != "invalid_dpop_proof" {
		t.Errorf("the key's proof for another URL: %d %s", a.Status, a.Raw)
	}
	got := e.auditReasons(events.TokenExchangeRefused, stack.Agent)
	if got["dpop_key_mismatch/none"] != 1 || got["dpop_key_mismatch/another_key"] != 2 {
		t.Errorf("token.exchange_refused records: %v, want dpop_key_mismatch once without a proof and twice with the thief's key", got)
	}
	// The holder, proving the key, gets the upstream token.
	if a := e.tokenWithProof(stack.Agent, stack.AgentSecret, form(), e.proof(key, "POST", e.Issuer+"/token", dpop.Claims{})); a.Status != http.StatusOK || a.Str("access_token") != "gho_alice_secret" {
		t.Fatalf("the holder's exchange: %d %s", a.Status, a.Raw)
	}
	// The MCP server the token was issued for exchanges its caller's token as itself: it checked
	// the caller's proof at its own resource, and the caller's key is not its to hold.
	if a := e.tokenWithProof(stack.MCP, stack.MCPSecret, form(), ""); a.Status != http.StatusOK || a.Str("access_token") != "gho_alice_secret" {
		t.Fatalf("the audience's exchange: %d %s", a.Status, a.Raw)
	}
}

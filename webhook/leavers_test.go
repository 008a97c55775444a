package webhook_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
)

// People who leave lose access (docs/leavers.md): the organisation's provider tells Latchkey
// by back-channel logout, or Latchkey asks it on refresh.

// oidcHarness is a project whose people sign in with an in-process OpenID provider.
func oidcHarness(t *testing.T, recheck time.Duration) (*harness, *fakeIDP) {
	h := newHarness(t)
	idp := newFakeIDP(t, h.clock.Now)
	h.update(func(p *config.Project) {
		p.SignIn.OIDC = &config.OIDCProvider{Issuer: idp.srv.URL, ClientID: "latchkey", ClientSecret: "idp-secret",
			Label: "Sign in with Corp SSO", RecheckInterval: recheck}
	})
	return h, idp
}

// signInAt signs a new browser in as sub through the provider and checks the account page
// shows email.
func (h *harness) signInAt(idp *fakeIDP, sub, email string) *browser {
	h.t.Helper()
	idp.mu.Lock()
	idp.login = sub
	idp.mu.Unlock()
	b := h.browser()
	p := b.get(h.base + "/sign-in/oidc?return_to=" + url.QueryEscape("/team/demo/account"))
	for range 5 {
		if p.status != http.StatusFound && p.status != http.StatusSeeOther || strings.HasPrefix(p.location(), "/team/demo/account") {
			break
		}
		p = b.get(p.location())
	}
	if acct := b.get(h.base + "/account"); acct.status != http.StatusOK || !strings.Contains(acct.body, email) {
		h.t.Fatalf("%s is not signed in: %d %s", sub, acct.status, acct.body)
	}
	return b
}

// agentFor gives the web client ("an agent") tokens for the person signed in to b.
func (h *harness) agentFor(b *browser) tokenResult {
	h.t.Helper()
	return h.codeFlow(b, "web", webSecret, "openid read", "", "")
}

// postLogout is the provider calling the back-channel logout endpoint.
func (h *harness) postLogout(token string) tokenResult {
	h.t.Helper()
	return h.postForm("/sign-in/backchannel-logout", url.Values{"logout_token": {token}}, "", "")
}

// signedOut checks what a person who lost access sees: the account page asks for a sign-in,
// the agent's refresh token is refused, and its access token is no longer active.
func (h *harness) signedOut(who string, b *browser, agent tokenResult) {
	h.t.Helper()
	if pg := b.get(h.base + "/account"); pg.status != http.StatusSeeOther || !strings.Contains(pg.location(), "/sign-in") {
		h.t.Errorf("%s's account page: %d %q, want a redirect to sign in", who, pg.status, pg.location())
	}
	if r := h.refresh("web", webSecret, agent.str("refresh_token")); r.status != http.StatusBadRequest || r.str("error") != "invalid_grant" {
		h.t.Errorf("%s's agent refreshed: %d %s", who, r.status, r.raw)
	}
	if h.active(agent.str("access_token")) {
		h.t.Errorf("%s's agent's access token is still active", who)
	}
}

// stillIn checks that a person kept their access; it rotates the agent's refresh token and
// returns the new pair.
func (h *harness) stillIn(who string, b *browser, agent tokenResult) tokenResult {
	h.t.Helper()
	if pg := b.get(h.base + "/account"); pg.status != http.StatusOK {
		h.t.Errorf("%s's account page: %d %q", who, pg.status, pg.location())
	}
	if !h.active(agent.str("access_token")) {
		h.t.Errorf("%s's agent's access token was ended", who)
	}
	r := h.refresh("web", webSecret, agent.str("refresh_token"))
	if r.status != http.StatusOK {
		h.t.Fatalf("%s's agent cannot refresh: %d %s", who, r.status, r.raw)
	}
	return r
}

// TestBackchannelLogout: alice signs in with her organisation's provider and an agent holds
// her tokens. The provider posts a logout token for her: her session cookie, the agent's refresh
// token and its access token stop working at once. Carol (same provider) and Bob (password
// file) keep theirs.
func TestBackchannelLogout(t *testing.T) {
	h, idp := oidcHarness(t, 0)
	sink := h.withAuditSink()
	alice := h.signInAt(idp, "alice-1", "alice@corp.example")
	aliceAgent := h.agentFor(alice)
	carol := h.signInAt(idp, "carol-123", "carol@corp.example")
	carolAgent := h.agentFor(carol)
	bob := h.browser()
	bobAgent := h.codeFlow(bob, "web", webSecret, "openid", "bob@example.com", bobPass)

	r := h.postLogout(idp.sign(idp.key, "idp", "logout+jwt", idp.logoutClaims("alice-1")))
	if r.status != http.StatusOK || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("logout: %d %v %s", r.status, r.header, r.raw)
	}
	h.signedOut("alice", alice, aliceAgent)
	h.stillIn("carol", carol, carolAgent)
	h.stillIn("bob", bob, bobAgent)
	if recs := h.audit(events.BackchannelLogout); len(recs) != 1 || recs[0].Details["by"] != "sub" || recs[0].Details["tokens"] != "2" {
		t.Errorf("audit: %+v", recs)
	}
	rec := h.trail(sink, events.BackchannelLogout)[events.BackchannelLogout]
	signIns := h.audit(events.SignInSucceeded) // newest first: alice signed in first
	expect(t, rec, "system", signIns[len(signIns)-1].Target, "", store.OutcomeSuccess, "")

	t.Run("a token that names only the provider's session", func(t *testing.T) {
		alice := h.signInAt(idp, "alice-1", "alice@corp.example")
		agent := h.agentFor(alice)
		if strings.Contains(idp.lastScope(), "offline_access") {
			t.Errorf("offline_access was asked for without re-checks: %q", idp.lastScope())
		}
		sid := idp.lastSID("alice-1")
		claims := idp.logoutClaims("")
		delete(claims, "sub")
		claims["sid"] = sid
		if r := h.postLogout(idp.sign(idp.key, "idp", "logout+jwt", claims)); r.status != http.StatusOK {
			t.Fatalf("sid-only logout: %d %s", r.status, r.raw)
		}
		h.signedOut("alice", alice, agent)
		h.stillIn("carol", carol, h.agentFor(carol))
	})
}

// TestBackchannelLogoutAttacks plays someone who can reach the endpoint but is not the
// provider, or who replays what the provider sent: each logout token is refused with a 400
// invalid_request and alice keeps her session and her agent's tokens.
func TestBackchannelLogoutAttacks(t *testing.T) {
	h, idp := oidcHarness(t, 0)
	sink := h.withAuditSink()
	alice := h.signInAt(idp, "alice-1", "alice@corp.example")
	agent := h.agentFor(alice)
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)

	replayed := idp.sign(idp.key, "idp", "logout+jwt", idp.logoutClaims("carol-123"))
	if r := h.postLogout(replayed); r.status != http.StatusOK {
		t.Fatalf("the first use of a logout token: %d %s", r.status, r.raw)
	}

	claims := func(mut func(c map[string]any)) map[string]any {
		c := idp.logoutClaims("alice-1")
		mut(c)
		return c
	}
	for name, token := range map[string]string{
		"signed by another key": idp.sign(otherKey, "idp", "logout+jwt", idp.logoutClaims("alice-1")),
		"with a nonce (an ID token)": idp.sign(idp.key, "idp", "logout+jwt", claims(func(c map[string]any) {
			c["nonce"] = "n-1"
		})),
		"for another audience": idp.sign(idp.key, "idp", "logout+jwt", claims(func(c map[string]any) { c["aud"] = "another-client" })),
		"from another issuer": idp.sign(idp.key, "idp", "logout+jwt", claims(func(c map[string]any) {
			c["iss"] = "https://evil.example"
		})),
		"replayed jti": idp.sign(idp.key, "idp", "logout+jwt", claims(func(c map[string]any) {
			// The jti of the token the provider already sent, now naming alice.
			c["jti"] = jtiOf(t, replayed)
		})),
		"without the events claim": idp.sign(idp.key, "idp", "logout+jwt", claims(func(c map[string]any) { delete(c, "events") })),
		"with another event": idp.sign(idp.key, "idp", "logout+jwt", claims(func(c map[string]any) {
			c["events"] = map[string]any{"https://schemas.openid.net/secevent/risc/event-type/account-disabled": map[string]any{}}
		})),
		"naming neither sub nor sid": idp.sign(idp.key, "idp", "logout+jwt", claims(func(c map[string]any) { delete(c, "sub") })),
		"issued long ago": idp.sign(idp.key, "idp", "logout+jwt", claims(func(c map[string]any) {
			c["iat"] = h.clock.Now().Add(-time.Hour).Unix()
		})),
		"expired": idp.sign(idp.key, "idp", "logout+jwt", claims(func(c map[string]any) {
			c["exp"] = h.clock.Now().Add(-time.Second).Unix()
		})),
		"without a jti": idp.sign(idp.key, "idp", "logout+jwt", claims(func(c map[string]any) { delete(c, "jti") })),
		"not a JWT":     "not-a-jwt",
	} {
		t.Run(name, func(t *testing.T) {
			r := h.postLogout(token)
			if r.status != http.StatusBadRequest || r.str("error") != "invalid_request" || r.header.Get("Cache-Control") != "no-store" {
				t.Errorf("answer: %d %v %s", r.status, r.header, r.raw)
			}
			agent = h.stillIn("alice", alice, agent)
		})
	}

	t.Run("bad requests", func(t *testing.T) {
		if r := h.postForm("/sign-in/backchannel-logout", url.Values{}, "", ""); r.status != http.StatusBadRequest || r.str("error") != "invalid_request" {
			t.Errorf("no logout_token: %d %s", r.status, r.raw)
		}
		req, _ := http.NewRequest(http.MethodGet, h.base+"/sign-in/backchannel-logout", nil)
		if r := h.send(req); r.status != http.StatusMethodNotAllowed {
			t.Errorf("GET: %d %s", r.status, r.raw)
		}
		agent = h.stillIn("alice", alice, agent)
	})

	// Tokens that verified are refused on the record, each with its code; the unverified ones
	// (another key, not a JWT) are nobody's word and only logged.
	h.trail(sink, events.BackchannelLogoutRefused)
	codes := map[string]int{}
	for _, r := range h.audit(events.BackchannelLogoutRefused) {
		expect(t, r, "system", idp.srv.URL, "", store.OutcomeRefused, r.Reason)
		codes[r.Reason]++
	}
	if codes["logout_token_replayed"] != 1 || codes["invalid_logout_token"] < 6 || len(codes) != 2 {
		t.Errorf("refusal codes: %v", codes)
	}
}

// jtiOf reads the jti of a token the provider signed.
func jtiOf(t *testing.T, token string) string {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %s", token)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	var claims struct {
		JTI string `json:"jti"`
	}
	if err != nil || json.Unmarshal(b, &claims) != nil || claims.JTI == "" {
		t.Fatalf("no jti in %s", token)
	}
	return claims.JTI
}

// TestRecheckOnRefresh: with spec.signIn.oidc.recheckInterval at 10 minutes, alice's agent
// refreshes freely inside the interval without a word to the provider; past it, the provider
// is asked once. Once alice is disabled there, the agent's next refresh after the interval is
// refused and all her access ends.
func TestRecheckOnRefresh(t *testing.T) {
	const n = 10 * time.Minute
	h, idp := oidcHarness(t, n)
	sink := h.withAuditSink()
	alice := h.signInAt(idp, "alice-1", "alice@corp.example")
	if !strings.Contains(idp.lastScope(), "offline_access") {
		t.Fatalf("re-checks need offline_access at sign-in; asked for %q", idp.lastScope())
	}
	agent := h.agentFor(alice)
	carol := h.signInAt(idp, "carol-123", "carol@corp.example")
	carolAgent := h.agentFor(carol)

	// Inside the interval: no question to the provider.
	h.clock.Advance(n - time.Minute)
	agent = h.stillIn("alice", alice, agent)
	agent = h.stillIn("alice", alice, agent)
	if c := idp.refreshCount(); c != 0 {
		t.Fatalf("the provider was asked %d times inside the interval", c)
	}

	// Past it: asked once, and the answer holds for another interval.
	h.clock.Advance(2 * time.Minute)
	agent = h.stillIn("alice", alice, agent)
	agent = h.stillIn("alice", alice, agent)
	if c := idp.refreshCount(); c != 1 {
		t.Fatalf("the provider was asked %d times, want 1", c)
	}

	// alice leaves: disabled at the provider. Until the interval is over her agent still
	// refreshes (this is the bound the setting promises), and nobody asks the provider.
	idp.disable("alice-1")
	h.clock.Advance(n - time.Minute)
	agent = h.stillIn("alice", alice, agent)
	if c := idp.refreshCount(); c != 1 {
		t.Fatalf("the provider was asked %d times, want 1", c)
	}
	h.clock.Advance(2 * time.Minute)
	r := h.refresh("web", webSecret, agent.str("refresh_token"))
	if r.status != http.StatusBadRequest || r.str("error") != "invalid_grant" || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("alice's agent after she was disabled: %d %s (provider asked %d times)", r.status, r.raw, idp.refreshCount())
	}
	if c := idp.refreshCount(); c != 2 {
		t.Errorf("the provider was asked %d times, want 2", c)
	}
	h.signedOut("alice", alice, agent)
	if recs := h.audit(events.RecheckFailed); len(recs) != 1 || recs[0].Details["reason"] != "invalid_grant" {
		t.Errorf("audit: %+v", recs)
	}
	rec := h.trail(sink, events.RecheckFailed)[events.RecheckFailed]
	expect(t, rec, "system", rec.Target, "", store.OutcomeRefused, "invalid_grant")
	// Carol is still with the organisation: her agent refreshes (her own check is due too).
	h.stillIn("carol", carol, carolAgent)
}

// TestRecheckProviderDown: a provider that does not answer is not taken as a refusal. Refreshes
// go on while the provider's last word is less than twice the interval old, without asking it
// on every refresh; after that they wait (temporarily_unavailable) and nothing is ended.
func TestRecheckProviderDown(t *testing.T) {
	const n = 10 * time.Minute
	h, idp := oidcHarness(t, n)
	sink := h.withAuditSink()
	alice := h.signInAt(idp, "alice-1", "alice@corp.example")
	agent := h.agentFor(alice)
	idp.mu.Lock()
	idp.down = true
	idp.mu.Unlock()

	h.clock.Advance(n + time.Minute)
	agent = h.stillIn("alice", alice, agent) // asked, no answer: allowed
	agent = h.stillIn("alice", alice, agent) // not asked again so soon
	if c := idp.refreshCount(); c != 1 {
		t.Fatalf("the provider was asked %d times, want 1", c)
	}
	h.clock.Advance(n) // 2n+1m since the sign-in confirmed alice
	r := h.refresh("web", webSecret, agent.str("refresh_token"))
	if r.status != http.StatusServiceUnavailable || r.str("error") != "temporarily_unavailable" {
		t.Fatalf("refresh with the provider down for too long: %d %s", r.status, r.raw)
	}
	rec := h.trail(sink, events.RecheckUnavailable)[events.RecheckUnavailable]
	expect(t, rec, "system", rec.Target, "", store.OutcomeFailed, "")
	if rec.Target == "" || rec.Details["refresh"] != "refused" {
		t.Errorf("the last recheck_unavailable record: %+v", rec)
	}
	// Nothing was ended: once the provider answers, the same token works.
	idp.mu.Lock()
	idp.down = false
	idp.mu.Unlock()
	h.clock.Advance(time.Minute)
	h.stillIn("alice", alice, agent)
	if c := idp.refreshCount(); c != 3 {
		t.Errorf("the provider was asked %d times, want 3", c)
	}
}

// TestRecheckWithoutProviderToken: re-checks turned on after alice signed in leave nothing to
// check her with; her agent must have her sign in again rather than refresh unchecked.
func TestRecheckWithoutProviderToken(t *testing.T) {
	h, idp := oidcHarness(t, 0)
	sink := h.withAuditSink()
	alice := h.signInAt(idp, "alice-1", "alice@corp.example")
	agent := h.agentFor(alice)
	h.update(func(p *config.Project) {
		o := *p.SignIn.OIDC
		o.RecheckInterval = 10 * time.Minute
		p.SignIn.OIDC = &o
	})
	h.clock.Advance(11 * time.Minute)
	r := h.refresh("web", webSecret, agent.str("refresh_token"))
	if r.status != http.StatusBadRequest || r.str("error") != "invalid_grant" {
		t.Fatalf("refresh without anything to re-check with: %d %s", r.status, r.raw)
	}
	rec := h.trail(sink, events.RecheckFailed)[events.RecheckFailed]
	expect(t, rec, "system", rec.Target, "", store.OutcomeRefused, "no_provider_token")
	// Signing in again stores the provider's token; a new authorization then refreshes.
	alice = h.signInAt(idp, "alice-1", "alice@corp.example")
	agent = h.agentFor(alice)
	h.clock.Advance(11 * time.Minute)
	h.stillIn("alice", alice, agent)
}

// TestRecheckConcurrentRefreshes: many agents of one person refreshing at once past the
// interval ask the provider once between them, and all go on.
func TestRecheckConcurrentRefreshes(t *testing.T) {
	const n = 10 * time.Minute
	h, idp := oidcHarness(t, n)
	alice := h.signInAt(idp, "alice-1", "alice@corp.example")
	agents := make([]tokenResult, 8)
	for i := range agents {
		agents[i] = h.agentFor(alice)
	}
	h.clock.Advance(n + time.Minute)
	var wg sync.WaitGroup
	status := make([]int, len(agents))
	for i := range agents {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, h.base+"/token", strings.NewReader(url.Values{
				"grant_type": {"refresh_token"}, "refresh_token": {agents[i].str("refresh_token")}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.SetBasicAuth("web", webSecret)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			status[i] = resp.StatusCode
		})
	}
	wg.Wait()
	for i, s := range status {
		if s != http.StatusOK {
			t.Errorf("agent %d: %d", i, s)
		}
	}
	if c := idp.refreshCount(); c != 1 {
		t.Errorf("the provider was asked %d times, want 1", c)
	}
}

// TestProviderKeysFetchedAtABoundedRate plays someone who posts logout tokens naming key ids
// the provider never published, or its own key id over a signature it did not make: each
// would make Latchkey fetch the provider's key set again, a request to the provider per
// request to Latchkey. A key id the cached set lacks fetches again at most once a minute;
// the provider's real rotation is picked up after that.
func TestProviderKeysFetchedAtABoundedRate(t *testing.T) {
	h, idp := oidcHarness(t, 0)
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	fetches := func() int {
		idp.mu.Lock()
		defer idp.mu.Unlock()
		return idp.keyFetches
	}
	if r := h.postLogout(idp.sign(idp.key, "idp", "logout+jwt", idp.logoutClaims("carol-123"))); r.status != http.StatusOK {
		t.Fatalf("the provider's logout: %d %s", r.status, r.raw)
	}
	before := fetches()
	for i := range 100 {
		token := idp.sign(otherKey, "kid-"+secret.New("")[:8], "logout+jwt", idp.logoutClaims("alice-1"))
		if i%2 == 1 {
			token = idp.sign(otherKey, "idp", "logout+jwt", idp.logoutClaims("alice-1")) // the real kid, a forged signature
		}
		if r := h.postLogout(token); r.status != http.StatusBadRequest {
			t.Fatalf("made-up token %d: %d %s", i, r.status, r.raw)
		}
	}
	if n := fetches() - before; n > 1 {
		t.Errorf("100 tokens with unknown key ids or forged signatures made %d fetches of the provider's keys, want at most 1", n)
	}

	// The provider rotates: its next key's id is unknown here until a minute after the last
	// fetch; then one fetch picks it up.
	next, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	idp.mu.Lock()
	idp.nextKey = next
	idp.mu.Unlock()
	h.clock.Advance(time.Minute)
	if r := h.postLogout(idp.sign(next, "idp-next", "logout+jwt", idp.logoutClaims("bob-2"))); r.status != http.StatusOK {
		t.Fatalf("a token signed with the provider's next key, a minute on: %d %s", r.status, r.raw)
	}
}

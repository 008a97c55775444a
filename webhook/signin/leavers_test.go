package signin_test

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
	"latchkey.dev/latchkey/test/stack"
)

// People who leave lose access (docs/leavers.md): the organisation's provider tells Latchkey
// by back-channel logout, or Latchkey asks it on refresh.

// TestBackchannelLogout: alice signs in with her organisation's provider and an agent holds
// her tokens. The provider posts a logout token for her: her session cookie, the agent's refresh
// token and its access token stop working at once. Carol (same provider) and Bob (password
// file) keep theirs.
func TestBackchannelLogout(t *testing.T) {
	t.Parallel()
	s := stack.New(t, stack.Options{})
	idp := s.UseIDP(0)
	sink := s.NewAuditSink()
	alice := s.SignInWith(idp, "alice-1", "alice@corp.example")
	aliceAgent := s.AgentFor(alice)
	carol := s.SignInWith(idp, "carol-123", "carol@corp.example")
	carolAgent := s.AgentFor(carol)
	bob := s.Browser()
	bobAgent := s.CodeFlowAs(bob, stack.Web, stack.WebSecret, "openid", stack.BobEmail, stack.BobPassword)

	r := s.BackchannelLogout(idp.Sign(idp.Key, "idp", "logout+jwt", idp.LogoutClaims("alice-1")))
	if r.Status != http.StatusOK || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("logout: %d %v %s", r.Status, r.Header, r.Raw)
	}
	s.ExpectSignedOut("alice", alice, aliceAgent)
	s.ExpectStillIn("carol", carol, carolAgent)
	s.ExpectStillIn("bob", bob, bobAgent)
	if recs := s.AuditOf(events.BackchannelLogout); len(recs) != 1 || recs[0].Details["by"] != "sub" || recs[0].Details["tokens"] != "2" {
		t.Errorf("audit: %+v", recs)
	}
	rec := s.TrailTo(sink, events.BackchannelLogout)[events.BackchannelLogout]
	signIns := s.AuditOf(events.SignInSucceeded) // newest first: alice signed in first
	stack.ExpectAudit(t, rec, "system", signIns[len(signIns)-1].Target, "", store.OutcomeSuccess, "")

	t.Run("a token that names only the provider's session", func(t *testing.T) {
		alice := s.SignInWith(idp, "alice-1", "alice@corp.example")
		agent := s.AgentFor(alice)
		if strings.Contains(idp.LastScope(), "offline_access") {
			t.Errorf("offline_access was asked for without re-checks: %q", idp.LastScope())
		}
		sid := idp.LastSID("alice-1")
		claims := idp.LogoutClaims("")
		delete(claims, "sub")
		claims["sid"] = sid
		if r := s.BackchannelLogout(idp.Sign(idp.Key, "idp", "logout+jwt", claims)); r.Status != http.StatusOK {
			t.Fatalf("sid-only logout: %d %s", r.Status, r.Raw)
		}
		s.ExpectSignedOut("alice", alice, agent)
		s.ExpectStillIn("carol", carol, s.AgentFor(carol))
	})
}

// TestBackchannelLogoutAttacks plays someone who can reach the endpoint but is not the
// provider, or who replays what the provider sent: each logout token is refused with a 400
// invalid_request and alice keeps her session and her agent's tokens.
func TestBackchannelLogoutAttacks(t *testing.T) {
	t.Parallel()
	s := stack.New(t, stack.Options{})
	idp := s.UseIDP(0)
	sink := s.NewAuditSink()
	alice := s.SignInWith(idp, "alice-1", "alice@corp.example")
	agent := s.AgentFor(alice)
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)

	replayed := idp.Sign(idp.Key, "idp", "logout+jwt", idp.LogoutClaims("carol-123"))
	if r := s.BackchannelLogout(replayed); r.Status != http.StatusOK {
		t.Fatalf("the first use of a logout token: %d %s", r.Status, r.Raw)
	}

	claims := func(mut func(c map[string]any)) map[string]any {
		c := idp.LogoutClaims("alice-1")
		mut(c)
		return c
	}
	for name, token := range map[string]string{
		"signed by another key": idp.Sign(otherKey, "idp", "logout+jwt", idp.LogoutClaims("alice-1")),
		"with a nonce (an ID token)": idp.Sign(idp.Key, "idp", "logout+jwt", claims(func(c map[string]any) {
			c["nonce"] = "n-1"
		})),
		"for another audience": idp.Sign(idp.Key, "idp", "logout+jwt", claims(func(c map[string]any) { c["aud"] = "another-client" })),
		"from another issuer": idp.Sign(idp.Key, "idp", "logout+jwt", claims(func(c map[string]any) {
			c["iss"] = "https://evil.example"
		})),
		"replayed jti": idp.Sign(idp.Key, "idp", "logout+jwt", claims(func(c map[string]any) {
			// The jti of the token the provider already sent, now naming alice.
			c["jti"] = jtiOf(t, replayed)
		})),
		"without the events claim": idp.Sign(idp.Key, "idp", "logout+jwt", claims(func(c map[string]any) { delete(c, "events") })),
		"with another event": idp.Sign(idp.Key, "idp", "logout+jwt", claims(func(c map[string]any) {
			c["events"] = map[string]any{"https://schemas.openid.net/secevent/risc/event-type/account-disabled": map[string]any{}}
		})),
		"naming neither sub nor sid": idp.Sign(idp.Key, "idp", "logout+jwt", claims(func(c map[string]any) { delete(c, "sub") })),
		"issued long ago": idp.Sign(idp.Key, "idp", "logout+jwt", claims(func(c map[string]any) {
			c["iat"] = s.Clock.Now().Add(-time.Hour).Unix()
		})),
		"expired": idp.Sign(idp.Key, "idp", "logout+jwt", claims(func(c map[string]any) {
			c["exp"] = s.Clock.Now().Add(-time.Second).Unix()
		})),
		"without a jti": idp.Sign(idp.Key, "idp", "logout+jwt", claims(func(c map[string]any) { delete(c, "jti") })),
		"not a JWT":     "not-a-jwt",
	} {
		t.Run(name, func(t *testing.T) {
			r := s.BackchannelLogout(token)
			if r.Status != http.StatusBadRequest || r.Str("error") != "invalid_request" || r.Header.Get("Cache-Control") != "no-store" {
				t.Errorf("answer: %d %v %s", r.Status, r.Header, r.Raw)
			}
			agent = s.ExpectStillIn("alice", alice, agent)
		})
	}

	t.Run("bad requests", func(t *testing.T) {
		if r := s.MustPost("/sign-in/backchannel-logout", url.Values{}, "", ""); r.Status != http.StatusBadRequest || r.Str("error") != "invalid_request" {
			t.Errorf("no logout_token: %d %s", r.Status, r.Raw)
		}
		req, _ := http.NewRequest(http.MethodGet, s.Issuer+"/sign-in/backchannel-logout", nil)
		if r := s.Send(req); r.Status != http.StatusMethodNotAllowed {
			t.Errorf("GET: %d %s", r.Status, r.Raw)
		}
		agent = s.ExpectStillIn("alice", alice, agent)
	})

	// Tokens that verified are refused on the record, each with its code; the unverified ones
	// (another key, not a JWT) are nobody's word and only logged.
	s.TrailTo(sink, events.BackchannelLogoutRefused)
	codes := map[string]int{}
	for _, r := range s.AuditOf(events.BackchannelLogoutRefused) {
		stack.ExpectAudit(t, r, "system", idp.URL, "", store.OutcomeRefused, r.Reason)
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
	t.Parallel()
	s := stack.New(t, stack.Options{})
	idp := s.UseIDP(n)
	sink := s.NewAuditSink()
	alice := s.SignInWith(idp, "alice-1", "alice@corp.example")
	if !strings.Contains(idp.LastScope(), "offline_access") {
		t.Fatalf("re-checks need offline_access at sign-in; asked for %q", idp.LastScope())
	}
	agent := s.AgentFor(alice)
	carol := s.SignInWith(idp, "carol-123", "carol@corp.example")
	carolAgent := s.AgentFor(carol)

	// Inside the interval: no question to the provider.
	s.Clock.Advance(n - time.Minute)
	agent = s.ExpectStillIn("alice", alice, agent)
	agent = s.ExpectStillIn("alice", alice, agent)
	if c := idp.RefreshCount(); c != 0 {
		t.Fatalf("the provider was asked %d times inside the interval", c)
	}

	// Past it: asked once, and the answer holds for another interval.
	s.Clock.Advance(2 * time.Minute)
	agent = s.ExpectStillIn("alice", alice, agent)
	agent = s.ExpectStillIn("alice", alice, agent)
	if c := idp.RefreshCount(); c != 1 {
		t.Fatalf("the provider was asked %d times, want 1", c)
	}

	// alice leaves: disabled at the provider. Until the interval is over her agent still
	// refreshes (this is the bound the setting promises), and nobody asks the provider.
	idp.Disable("alice-1")
	s.Clock.Advance(n - time.Minute)
	agent = s.ExpectStillIn("alice", alice, agent)
	if c := idp.RefreshCount(); c != 1 {
		t.Fatalf("the provider was asked %d times, want 1", c)
	}
	s.Clock.Advance(2 * time.Minute)
	r := s.RefreshAs(stack.Web, stack.WebSecret, agent.Str("refresh_token"))
	if r.Status != http.StatusBadRequest || r.Str("error") != "invalid_grant" || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("alice's agent after she was disabled: %d %s (provider asked %d times)", r.Status, r.Raw, idp.RefreshCount())
	}
	if c := idp.RefreshCount(); c != 2 {
		t.Errorf("the provider was asked %d times, want 2", c)
	}
	s.ExpectSignedOut("alice", alice, agent)
	if recs := s.AuditOf(events.RecheckFailed); len(recs) != 1 || recs[0].Details["reason"] != "invalid_grant" {
		t.Errorf("audit: %+v", recs)
	}
	rec := s.TrailTo(sink, events.RecheckFailed)[events.RecheckFailed]
	stack.ExpectAudit(t, rec, "system", rec.Target, "", store.OutcomeRefused, "invalid_grant")
	// Carol is still with the organisation: her agent refreshes (her own check is due too).
	s.ExpectStillIn("carol", carol, carolAgent)
}

// TestRecheckProviderDown: a provider that does not answer is not taken as a refusal. Refreshes
// go on while the provider's last word is less than twice the interval old, without asking it
// on every refresh; after that they wait (temporarily_unavailable) and nothing is ended.
func TestRecheckProviderDown(t *testing.T) {
	const n = 10 * time.Minute
	t.Parallel()
	s := stack.New(t, stack.Options{})
	idp := s.UseIDP(n)
	sink := s.NewAuditSink()
	alice := s.SignInWith(idp, "alice-1", "alice@corp.example")
	agent := s.AgentFor(alice)
	idp.Lock()
	idp.Down = true
	idp.Unlock()

	s.Clock.Advance(n + time.Minute)
	agent = s.ExpectStillIn("alice", alice, agent) // asked, no answer: allowed
	agent = s.ExpectStillIn("alice", alice, agent) // not asked again so soon
	if c := idp.RefreshCount(); c != 1 {
		t.Fatalf("the provider was asked %d times, want 1", c)
	}
	s.Clock.Advance(n) // 2n+1m since the sign-in confirmed alice
	r := s.RefreshAs(stack.Web, stack.WebSecret, agent.Str("refresh_token"))
	if r.Status != http.StatusServiceUnavailable || r.Str("error") != "temporarily_unavailable" {
		t.Fatalf("refresh with the provider down for too long: %d %s", r.Status, r.Raw)
	}
	rec := s.TrailTo(sink, events.RecheckUnavailable)[events.RecheckUnavailable]
	stack.ExpectAudit(t, rec, "system", rec.Target, "", store.OutcomeFailed, "")
	if rec.Target == "" || rec.Details["refresh"] != "refused" {
		t.Errorf("the last recheck_unavailable record: %+v", rec)
	}
	// Nothing was ended: once the provider answers, the same token works.
	idp.Lock()
	idp.Down = false
	idp.Unlock()
	s.Clock.Advance(time.Minute)
	s.ExpectStillIn("alice", alice, agent)
	if c := idp.RefreshCount(); c != 3 {
		t.Errorf("the provider was asked %d times, want 3", c)
	}
}

// TestRecheckWithoutProviderToken: re-checks turned on after alice signed in leave nothing to
// check her with; her agent must have her sign in again rather than refresh unchecked.
func TestRecheckWithoutProviderToken(t *testing.T) {
	t.Parallel()
	s := stack.New(t, stack.Options{})
	idp := s.UseIDP(0)
	sink := s.NewAuditSink()
	alice := s.SignInWith(idp, "alice-1", "alice@corp.example")
	agent := s.AgentFor(alice)
	s.Update(func(p *config.Project) {
		o := *p.SignIn.OIDC
		o.RecheckInterval = 10 * time.Minute
		p.SignIn.OIDC = &o
	})
	s.Clock.Advance(11 * time.Minute)
	r := s.RefreshAs(stack.Web, stack.WebSecret, agent.Str("refresh_token"))
	if r.Status != http.StatusBadRequest || r.Str("error") != "invalid_grant" {
		t.Fatalf("refresh without anything to re-check with: %d %s", r.Status, r.Raw)
	}
	rec := s.TrailTo(sink, events.RecheckFailed)[events.RecheckFailed]
	stack.ExpectAudit(t, rec, "system", rec.Target, "", store.OutcomeRefused, "no_provider_token")
	// Signing in again stores the provider's token; a new authorization then refreshes.
	alice = s.SignInWith(idp, "alice-1", "alice@corp.example")
	agent = s.AgentFor(alice)
	s.Clock.Advance(11 * time.Minute)
	s.ExpectStillIn("alice", alice, agent)
}

// TestRecheckConcurrentRefreshes: many agents of one person refreshing at once past the
// interval ask the provider once between them, and all go on.
func TestRecheckConcurrentRefreshes(t *testing.T) {
	const n = 10 * time.Minute
	t.Parallel()
	s := stack.New(t, stack.Options{})
	idp := s.UseIDP(n)
	alice := s.SignInWith(idp, "alice-1", "alice@corp.example")
	agents := make([]stack.Answer, 8)
	for i := range agents {
		agents[i] = s.AgentFor(alice)
	}
	s.Clock.Advance(n + time.Minute)
	var wg sync.WaitGroup
	status := make([]int, len(agents))
	for i := range agents {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, s.Issuer+"/token", strings.NewReader(url.Values{
				"grant_type": {"refresh_token"}, "refresh_token": {agents[i].Str("refresh_token")}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.SetBasicAuth(stack.Web, stack.WebSecret)
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
	if c := idp.RefreshCount(); c != 1 {
		t.Errorf("the provider was asked %d times, want 1", c)
	}
}

// TestProviderKeysFetchedAtABoundedRate plays someone who posts logout tokens naming key ids
// the provider never published, or its own key id over a signature it did not make: each
// would make Latchkey fetch the provider's key set again, a request to the provider per
// request to Latchkey. A key id the cached set lacks fetches again at most once a minute;
// the provider's real rotation is picked up after that.
func TestProviderKeysFetchedAtABoundedRate(t *testing.T) {
	t.Parallel()
	s := stack.New(t, stack.Options{})
	idp := s.UseIDP(0)
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	fetches := func() int {
		idp.Lock()
		defer idp.Unlock()
		return idp.KeyFetches
	}
	if r := s.BackchannelLogout(idp.Sign(idp.Key, "idp", "logout+jwt", idp.LogoutClaims("carol-123"))); r.Status != http.StatusOK {
		t.Fatalf("the provider's logout: %d %s", r.Status, r.Raw)
	}
	before := fetches()
	for i := range 100 {
		token := idp.Sign(otherKey, "kid-"+secret.New("")[:8], "logout+jwt", idp.LogoutClaims("alice-1"))
		if i%2 == 1 {
			token = idp.Sign(otherKey, "idp", "logout+jwt", idp.LogoutClaims("alice-1")) // the real kid, a forged signature
		}
		if r := s.BackchannelLogout(token); r.Status != http.StatusBadRequest {
			t.Fatalf("made-up token %d: %d %s", i, r.Status, r.Raw)
		}
	}
	if n := fetches() - before; n > 1 {
		t.Errorf("100 tokens with unknown key ids or forged signatures made %d fetches of the provider's keys, want at most 1", n)
	}

	// The provider rotates: its next key's id is unknown here until a minute after the last
	// fetch; then one fetch picks it up.
	next, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	idp.Lock()
	idp.NextKey = next
	idp.Unlock()
	s.Clock.Advance(time.Minute)
	if r := s.BackchannelLogout(idp.Sign(next, "idp-next", "logout+jwt", idp.LogoutClaims("bob-2"))); r.Status != http.StatusOK {
		t.Fatalf("a token signed with the provider's next key, a minute on: %d %s", r.Status, r.Raw)
	}
}

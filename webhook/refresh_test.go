package webhook_test

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
)

// Refresh-token rotation with reuse detection and a grace window, on SQLite and (when
// LATCHKEY_TEST_POSTGRES_DSN is set) PostgreSQL.
func TestRefreshRotation(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { refreshStories(t, func(t *testing.T) *harness { return newHarness(t) }) })
	t.Run("postgres", func(t *testing.T) {
		postgresDSN(t) // skips when PostgreSQL is not configured
		refreshStories(t, func(t *testing.T) *harness { return newHarnessDSN(t, postgresDSN(t)) })
	})
}

func refreshStories(t *testing.T, newHarness func(t *testing.T) *harness) {
	grace := config.DefaultLifetimes().RefreshGrace

	t.Run("rotates and keeps working", func(t *testing.T) {
		h := newHarness(t)
		first := h.codeFlow(h.browser(), "web", webSecret, "read write", "alice@example.com", alicePass)
		rt := first.str("refresh_token")
		for i := range 3 {
			h.clock.Advance(time.Minute)
			r := h.refresh("web", webSecret, rt)
			if r.status != 200 || r.str("refresh_token") == rt || r.str("access_token") == "" {
				t.Fatalf("refresh %d: %d %s", i, r.status, r.raw)
			}
			if !h.active(r.str("access_token")) {
				t.Fatal("new access token inactive")
			}
			rt = r.str("refresh_token")
		}
		if !h.active(first.str("access_token")) {
			t.Error("rotation must not end earlier access tokens that are still valid")
		}
	})

	t.Run("copied token used first by the attacker", func(t *testing.T) {
		h := newHarness(t)
		legit := h.codeFlow(h.browser(), "web", webSecret, "read", "alice@example.com", alicePass)
		copied := legit.str("refresh_token")

		h.clock.Advance(time.Minute)
		attacker := h.refresh("web", webSecret, copied)
		if attacker.status != 200 {
			t.Fatalf("attacker refresh: %d %s", attacker.status, attacker.raw)
		}
		h.clock.Advance(grace + time.Second) // the legitimate client comes back later
		r := h.refresh("web", webSecret, copied)
		if r.status != 400 || r.str("error") != "invalid_grant" {
			t.Fatalf("legitimate client's refresh after the copy was used: %d %s", r.status, r.raw)
		}
		if h.active(attacker.str("access_token")) {
			t.Error("attacker's access token survived reuse detection")
		}
		if r := h.refresh("web", webSecret, attacker.str("refresh_token")); r.status != 400 {
			t.Errorf("attacker's refresh token survived: %s", r.raw)
		}
		if h.active(legit.str("access_token")) {
			t.Error("the legitimate client's access token must end too: the grant is compromised")
		}
		recs, err := h.store.ListAudit(context.Background(), projectKey, 50)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, rec := range recs {
			if rec.Action == "refresh.reuse" && rec.Details["client_id"] == "web" && rec.Details["revoked"] != "0" {
				found = true
			}
		}
		if !found {
			t.Errorf("no refresh.reuse audit record in %+v", recs)
		}
	})

	t.Run("double submit inside the grace window", func(t *testing.T) {
		h := newHarness(t)
		first := h.codeFlow(h.browser(), "web", webSecret, "read", "alice@example.com", alicePass)
		rt := first.str("refresh_token")
		h.clock.Advance(time.Minute)
		a := h.refresh("web", webSecret, rt)
		h.clock.Advance(grace / 2)
		b := h.refresh("web", webSecret, rt)
		if a.status != 200 || b.status != 200 {
			t.Fatalf("%d %s / %d %s", a.status, a.raw, b.status, b.raw)
		}
		if a.raw != b.raw {
			t.Errorf("the retry must get the very same response:\n%s\n%s", a.raw, b.raw)
		}
		if !h.active(a.str("access_token")) {
			t.Error("nobody should be logged out")
		}
		if r := h.refresh("web", webSecret, a.str("refresh_token")); r.status != 200 {
			t.Errorf("the pair both got must keep working: %s", r.raw)
		}
	})

	t.Run("concurrent submits inside the grace window", func(t *testing.T) {
		h := newHarness(t)
		first := h.codeFlow(h.browser(), "web", webSecret, "read", "alice@example.com", alicePass)
		rt := first.str("refresh_token")
		var wg sync.WaitGroup
		results := make([]tokenResult, 8)
		for i := range results {
			wg.Go(func() { results[i] = h.refresh("web", webSecret, rt) })
		}
		wg.Wait()
		for _, r := range results {
			if r.status != 200 || r.raw != results[0].raw {
				t.Fatalf("concurrent refreshes disagree: %d %s vs %s", r.status, r.raw, results[0].raw)
			}
		}
		live, err := h.store.CountLiveTokens(context.Background(), projectKey, h.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		// The first pair's access token, plus one new pair: one live family head.
		if live["web"] != 3 {
			t.Errorf("live tokens = %d, want 3 (one access token from the code, one new pair)", live["web"])
		}
	})

	t.Run("two generations old inside the grace window ends the family", func(t *testing.T) {
		h := newHarness(t)
		first := h.codeFlow(h.browser(), "web", webSecret, "read", "alice@example.com", alicePass)
		rt0 := first.str("refresh_token")
		r1 := h.refresh("web", webSecret, rt0)
		r2 := h.refresh("web", webSecret, r1.str("refresh_token"))
		if r2.status != 200 {
			t.Fatal(r2.raw)
		}
		h.clock.Advance(grace / 2)
		if r := h.refresh("web", webSecret, rt0); r.status != 400 || r.str("error") != "invalid_grant" {
			t.Fatalf("generation 0 after generation 2: %d %s", r.status, r.raw)
		}
		if h.active(r2.str("access_token")) {
			t.Error("family not ended")
		}
		if r := h.refresh("web", webSecret, r2.str("refresh_token")); r.status != 400 {
			t.Error("current refresh token survived")
		}
	})

	t.Run("another client of the same person is unaffected", func(t *testing.T) {
		h := newHarness(t)
		b := h.browser()
		web := h.codeFlow(b, "web", webSecret, "read", "alice@example.com", alicePass)
		other := h.codeFlow(b, "other", otherSecr, "", "alice@example.com", alicePass)
		h.refresh("web", webSecret, web.str("refresh_token"))
		h.clock.Advance(grace + time.Second)
		if r := h.refresh("web", webSecret, web.str("refresh_token")); r.status != 400 {
			t.Fatal("reuse not detected")
		}
		if !h.active(other.str("access_token")) {
			t.Error("another client's access token was ended")
		}
		if r := h.refresh("other", otherSecr, other.str("refresh_token")); r.status != 200 {
			t.Errorf("another client's refresh failed: %s", r.raw)
		}
	})

	t.Run("another client cannot use or end the token", func(t *testing.T) {
		h := newHarness(t)
		web := h.codeFlow(h.browser(), "web", webSecret, "read", "alice@example.com", alicePass)
		if r := h.refresh("other", otherSecr, web.str("refresh_token")); r.status != 400 || r.str("error") != "invalid_grant" {
			t.Fatalf("%d %s", r.status, r.raw)
		}
		if r := h.refresh("web", webSecret, web.str("refresh_token")); r.status != 200 {
			t.Errorf("the owner's token was disturbed: %s", r.raw)
		}
	})

	t.Run("scope narrowing", func(t *testing.T) {
		h := newHarness(t)
		web := h.codeFlow(h.browser(), "web", webSecret, "read write", "alice@example.com", alicePass)
		r := h.token(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {web.str("refresh_token")}, "scope": {"read"}}, "web", webSecret)
		if r.status != 200 || r.str("scope") != "read" {
			t.Fatalf("%d %s", r.status, r.raw)
		}
		// The refresh token keeps the original scope (RFC 6749 §6).
		r2 := h.token(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {r.str("refresh_token")}, "scope": {"read write"}}, "web", webSecret)
		if r2.status != 200 || r2.str("scope") != "read write" {
			t.Fatalf("%d %s", r2.status, r2.raw)
		}
		if r := h.token(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {r2.str("refresh_token")}, "scope": {"admin"}}, "web", webSecret); r.str("error") != "invalid_scope" {
			t.Errorf("widening: %s", r.raw)
		}
	})

	t.Run("expired refresh token", func(t *testing.T) {
		h := newHarness(t)
		web := h.codeFlow(h.browser(), "web", webSecret, "read", "alice@example.com", alicePass)
		h.clock.Advance(config.DefaultLifetimes().RefreshToken + time.Second)
		if r := h.refresh("web", webSecret, web.str("refresh_token")); r.status != 400 || r.str("error") != "invalid_grant" {
			t.Errorf("%d %s", r.status, r.raw)
		}
	})

	t.Run("policy refuses renewal", func(t *testing.T) {
		h := newHarness(t)
		web := h.codeFlow(h.browser(), "web", webSecret, "read", "alice@example.com", alicePass)
		h.srv.Env().RedirectPolicy = func(*config.Project, []string) error {
			return policyError("This organisation only allows recognised apps to connect")
		}
		r := h.refresh("web", webSecret, web.str("refresh_token"))
		if r.status != 400 || r.str("error_description") != "This organisation only allows recognised apps to connect" {
			t.Fatalf("%d %s", r.status, r.raw)
		}
		h.srv.Env().RedirectPolicy = func(*config.Project, []string) error { return nil }
		if r := h.refresh("web", webSecret, web.str("refresh_token")); r.status != 400 {
			t.Error("a refused token must be ended, not kept for later")
		}
	})
}

type policyError string

func (e policyError) Error() string { return string(e) }

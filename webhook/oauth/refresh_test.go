package oauth_test

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"sync"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/test/stack"
)

// Refresh-token rotation with reuse detection and a grace window, on SQLite and (when
// LATCHKEY_TEST_POSTGRES_DSN is set) PostgreSQL.
func TestRefreshRotation(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		refreshStories(t, func(t *testing.T) *stack.Stack { return stack.New(t, stack.Options{}) })
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		stack.PostgresDSN(t) // skips when PostgreSQL is not configured
		refreshStories(t, func(t *testing.T) *stack.Stack { return stack.New(t, stack.Options{DSN: stack.PostgresDSN(t)}) })
	})
}

// refreshStories runs every story on a stack of its own from start.
func refreshStories(t *testing.T, start func(t *testing.T) *stack.Stack) {
	grace := config.DefaultLifetimes().RefreshGrace

	t.Run("rotates and keeps working", func(t *testing.T) {
		t.Parallel()
		h := start(t)
		first := h.CodeFlowAs(h.Browser(), "web", stack.WebSecret, "read write", "alice@example.com", stack.AlicePassword)
		rt := first.Str("refresh_token")
		for i := range 3 {
			h.Clock.Advance(time.Minute)
			r := h.RefreshAs("web", stack.WebSecret, rt)
			if r.Status != 200 || r.Str("refresh_token") == rt || r.Str("access_token") == "" {
				t.Fatalf("refresh %d: %d %s", i, r.Status, r.Raw)
			}
			if !h.Active(r.Str("access_token")) {
				t.Fatal("new access token inactive")
			}
			rt = r.Str("refresh_token")
		}
		if !h.Active(first.Str("access_token")) {
			t.Error("rotation must not end earlier access tokens that are still valid")
		}
	})

	t.Run("copied token used first by the attacker", func(t *testing.T) {
		t.Parallel()
		h := start(t)
		legit := h.CodeFlowAs(h.Browser(), "web", stack.WebSecret, "read", "alice@example.com", stack.AlicePassword)
		copied := legit.Str("refresh_token")

		h.Clock.Advance(time.Minute)
		attacker := h.RefreshAs("web", stack.WebSecret, copied)
		if attacker.Status != 200 {
			t.Fatalf("attacker refresh: %d %s", attacker.Status, attacker.Raw)
		}
		h.Clock.Advance(grace + time.Second) // the legitimate client comes back later
		r := h.RefreshAs("web", stack.WebSecret, copied)
		if r.Status != 400 || r.Str("error") != "invalid_grant" {
			t.Fatalf("legitimate client's refresh after the copy was used: %d %s", r.Status, r.Raw)
		}
		if h.Active(attacker.Str("access_token")) {
			t.Error("attacker's access token survived reuse detection")
		}
		if r := h.RefreshAs("web", stack.WebSecret, attacker.Str("refresh_token")); r.Status != 400 {
			t.Errorf("attacker's refresh token survived: %s", r.Raw)
		}
		if h.Active(legit.Str("access_token")) {
			t.Error("the legitimate client's access token must end too: the grant is compromised")
		}
		recs, err := h.Store().ListAudit(context.Background(), stack.ProjectKey, 50)
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
		t.Parallel()
		h := start(t)
		first := h.CodeFlowAs(h.Browser(), "web", stack.WebSecret, "read", "alice@example.com", stack.AlicePassword)
		rt := first.Str("refresh_token")
		h.Clock.Advance(time.Minute)
		a := h.RefreshAs("web", stack.WebSecret, rt)
		h.Clock.Advance(grace / 2)
		b := h.RefreshAs("web", stack.WebSecret, rt)
		if a.Status != 200 || b.Status != 200 {
			t.Fatalf("%d %s / %d %s", a.Status, a.Raw, b.Status, b.Raw)
		}
		if !bytes.Equal(a.Raw, b.Raw) {
			t.Errorf("the retry must get the very same response:\n%s\n%s", a.Raw, b.Raw)
		}
		if !h.Active(a.Str("access_token")) {
			t.Error("nobody should be logged out")
		}
		if r := h.RefreshAs("web", stack.WebSecret, a.Str("refresh_token")); r.Status != 200 {
			t.Errorf("the pair both got must keep working: %s", r.Raw)
		}
	})

	t.Run("concurrent submits inside the grace window", func(t *testing.T) {
		t.Parallel()
		h := start(t)
		first := h.CodeFlowAs(h.Browser(), "web", stack.WebSecret, "read", "alice@example.com", stack.AlicePassword)
		rt := first.Str("refresh_token")
		var wg sync.WaitGroup
		results := make([]stack.Answer, 8)
		for i := range results {
			wg.Go(func() { results[i] = h.RefreshAs("web", stack.WebSecret, rt) })
		}
		wg.Wait()
		for _, r := range results {
			if r.Status != 200 || !bytes.Equal(r.Raw, results[0].Raw) {
				t.Fatalf("concurrent refreshes disagree: %d %s vs %s", r.Status, r.Raw, results[0].Raw)
			}
		}
		live, err := h.Store().CountLiveTokens(context.Background(), stack.ProjectKey, h.Clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		// The first pair's access token, plus one new pair: one live family head.
		if live["web"] != 3 {
			t.Errorf("live tokens = %d, want 3 (one access token from the code, one new pair)", live["web"])
		}
	})

	t.Run("two generations old inside the grace window ends the family", func(t *testing.T) {
		t.Parallel()
		h := start(t)
		first := h.CodeFlowAs(h.Browser(), "web", stack.WebSecret, "read", "alice@example.com", stack.AlicePassword)
		rt0 := first.Str("refresh_token")
		r1 := h.RefreshAs("web", stack.WebSecret, rt0)
		r2 := h.RefreshAs("web", stack.WebSecret, r1.Str("refresh_token"))
		if r2.Status != 200 {
			t.Fatal(r2.Raw)
		}
		h.Clock.Advance(grace / 2)
		if r := h.RefreshAs("web", stack.WebSecret, rt0); r.Status != 400 || r.Str("error") != "invalid_grant" {
			t.Fatalf("generation 0 after generation 2: %d %s", r.Status, r.Raw)
		}
		if h.Active(r2.Str("access_token")) {
			t.Error("family not ended")
		}
		if r := h.RefreshAs("web", stack.WebSecret, r2.Str("refresh_token")); r.Status != 400 {
			t.Error("current refresh token survived")
		}
	})

	t.Run("another client of the same person is unaffected", func(t *testing.T) {
		t.Parallel()
		h := start(t)
		b := h.Browser()
		web := h.CodeFlowAs(b, "web", stack.WebSecret, "read", "alice@example.com", stack.AlicePassword)
		other := h.CodeFlowAs(b, "other", stack.OtherSecret, "", "alice@example.com", stack.AlicePassword)
		h.RefreshAs("web", stack.WebSecret, web.Str("refresh_token"))
		h.Clock.Advance(grace + time.Second)
		if r := h.RefreshAs("web", stack.WebSecret, web.Str("refresh_token")); r.Status != 400 {
			t.Fatal("reuse not detected")
		}
		if !h.Active(other.Str("access_token")) {
			t.Error("another client's access token was ended")
		}
		if r := h.RefreshAs("other", stack.OtherSecret, other.Str("refresh_token")); r.Status != 200 {
			t.Errorf("another client's refresh failed: %s", r.Raw)
		}
	})

	t.Run("another client cannot use or end the token", func(t *testing.T) {
		t.Parallel()
		h := start(t)
		web := h.CodeFlowAs(h.Browser(), "web", stack.WebSecret, "read", "alice@example.com", stack.AlicePassword)
		if r := h.RefreshAs("other", stack.OtherSecret, web.Str("refresh_token")); r.Status != 400 || r.Str("error") != "invalid_grant" {
			t.Fatalf("%d %s", r.Status, r.Raw)
		}
		if r := h.RefreshAs("web", stack.WebSecret, web.Str("refresh_token")); r.Status != 200 {
			t.Errorf("the owner's token was disturbed: %s", r.Raw)
		}
	})

	t.Run("scope narrowing", func(t *testing.T) {
		t.Parallel()
		h := start(t)
		web := h.CodeFlowAs(h.Browser(), "web", stack.WebSecret, "read write", "alice@example.com", stack.AlicePassword)
		r := h.Token(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {web.Str("refresh_token")}, "scope": {"read"}}, "web", stack.WebSecret)
		if r.Status != 200 || r.Str("scope") != "read" {
			t.Fatalf("%d %s", r.Status, r.Raw)
		}
		// The refresh token keeps the original scope (RFC 6749 §6).
		r2 := h.Token(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {r.Str("refresh_token")}, "scope": {"read write"}}, "web", stack.WebSecret)
		if r2.Status != 200 || r2.Str("scope") != "read write" {
			t.Fatalf("%d %s", r2.Status, r2.Raw)
		}
		if r := h.Token(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {r2.Str("refresh_token")}, "scope": {"admin"}}, "web", stack.WebSecret); r.Str("error") != "invalid_scope" {
			t.Errorf("widening: %s", r.Raw)
		}
	})

	t.Run("expired refresh token", func(t *testing.T) {
		t.Parallel()
		h := start(t)
		web := h.CodeFlowAs(h.Browser(), "web", stack.WebSecret, "read", "alice@example.com", stack.AlicePassword)
		h.Clock.Advance(config.DefaultLifetimes().RefreshToken + time.Second)
		if r := h.RefreshAs("web", stack.WebSecret, web.Str("refresh_token")); r.Status != 400 || r.Str("error") != "invalid_grant" {
			t.Errorf("%d %s", r.Status, r.Raw)
		}
	})

	t.Run("policy refuses renewal", func(t *testing.T) {
		t.Parallel()
		h := start(t)
		web := h.CodeFlowAs(h.Browser(), "web", stack.WebSecret, "read", "alice@example.com", stack.AlicePassword)
		h.Server().Env().RedirectPolicy = func(*config.Project, []string) error {
			return errors.New("This organisation only allows recognised apps to connect")
		}
		r := h.RefreshAs("web", stack.WebSecret, web.Str("refresh_token"))
		if r.Status != 400 || r.Str("error_description") != "This organisation only allows recognised apps to connect" {
			t.Fatalf("%d %s", r.Status, r.Raw)
		}
		h.Server().Env().RedirectPolicy = func(*config.Project, []string) error { return nil }
		if r := h.RefreshAs("web", stack.WebSecret, web.Str("refresh_token")); r.Status != 400 {
			t.Error("a refused token must be ended, not kept for later")
		}
	})
}

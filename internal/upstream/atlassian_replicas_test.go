package upstream_test

import (
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
	"latchkey.dev/latchkey/internal/testclock"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/internal/upstream/fakeoauth"
)

// TestAtlassianRotatedRefreshTokenUsedOnceAcrossReplicas: Atlassian rotates refresh tokens,
// and a refresh token presented twice is refused (403 invalid_grant), which would break the
// person's connection. Two Latchkey replicas, each with its own pool to one PostgreSQL
// database, are asked for the expired connection's token at once, forty times each. Exactly
// one refresh reaches Atlassian, every caller gets the one token it issued, no refresh token is
// ever presented twice, and the rotated refresh token is the one stored: the next expiry
// refreshes with it.
func TestAtlassianRotatedRefreshTokenUsedOnceAcrossReplicas(t *testing.T) {
	dsn := postgresDSN(t)
	clk := testclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	fake := fakeoauth.New(fakeoauth.Options{Shape: fakeoauth.Atlassian, ClientID: "client-1", ClientSecret: "secret-1",
		RedirectURI: callbackURL, Accounts: []fakeoauth.Account{dialectAlice}, AccessTokenTTL: time.Hour, Now: clk.Now,
		TokenDelay: 20 * time.Millisecond})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	f := &fakeService{fake: fake, srv: srv, c: fake.Connector(srv.URL, "default/atlassian", callbackURL)}

	ring := keyring(t, "a", "a")
	var replicas []*upstream.Vault
	for range 2 {
		st, err := sqlstore.Open(t.Context(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		replicas = append(replicas, &upstream.Vault{Store: st, Keyring: ring, Now: clk.Now})
	}

	v := upstream.NewVerifier()
	acct, tok, err := upstream.Exchange(t.Context(), nil, f.c, f.connect(t, v), v)
	if err != nil {
		t.Fatal(err)
	}
	conn := store.Connection{ID: "conn-alice", Project: project, Subject: "person-alice", Connector: f.c.Key,
		AccountID: acct.ID, AccountName: acct.Name, CreatedAt: clk.Now(), UpdatedAt: clk.Now()}
	replicas[0].Seal(&conn, tok)
	if _, err := replicas[0].Store.(store.Store).SaveConnection(t.Context(), conn); err != nil {
		t.Fatal(err)
	}

	refreshes := func() []string {
		var out []string
		for _, r := range f.requestsTo(fakeoauth.PathsOf(fakeoauth.Atlassian).Token) {
			if r.Params.Get("grant_type") == "refresh_token" {
				out = append(out, r.Params.Get("refresh_token"))
			}
		}
		return out
	}

	for round := 1; round <= 2; round++ {
		clk.Advance(time.Hour + time.Minute)
		got := make([]string, 80)
		errs := make([]error, len(got))
		var wg sync.WaitGroup
		for i := range got {
			wg.Go(func() {
				tok, err := replicas[i%2].Token(t.Context(), f.c, project, conn.ID)
				if err == nil {
					got[i] = tok.AccessToken
				}
				errs[i] = err
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, request %d (replica %d): %v", round, i, i%2, err)
			}
			if got[i] != got[0] {
				t.Fatalf("round %d: callers got different tokens %q and %q", round, got[0], got[i])
			}
		}
		if !fake.Live(got[0]) {
			t.Fatalf("round %d: the token handed out is not live at Atlassian", round)
		}
		used := refreshes()
		if len(used) != round {
			t.Fatalf("round %d: %d refresh requests reached Atlassian, want one per expiry", round, len(used))
		}
		seen := map[string]bool{}
		for _, rt := range used {
			if seen[rt] {
				t.Fatalf("refresh token %q was presented twice", rt)
			}
			seen[rt] = true
			if fake.LiveRefresh(rt) {
				t.Fatalf("refresh token %q still works after it was rotated", rt)
			}
		}
	}
}

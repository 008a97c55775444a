package upstream_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/testclock"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/internal/upstream/fakeoauth"
)

// TestRevokeBearerRefreshesAnExpiredToken: Dropbox revokes a token with a call made with that
// token, which fails once it has expired, and revoking it is what ends its refresh token. So a
// person who disconnects a connection whose access token expired still has the refresh token
// ended: the vault refreshes first and revokes with the new access token.
func TestRevokeBearerRefreshesAnExpiredToken(t *testing.T) {
	clk := testclock.New(time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC))
	fake := fakeoauth.New(fakeoauth.Options{Shape: fakeoauth.Dropbox, ClientID: "app-key", ClientSecret: "app-secret",
		RedirectURI: callbackURL, Accounts: []fakeoauth.Account{dialectAlice}, AccessTokenTTL: 4 * time.Hour, Now: clk.Now})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	f := &fakeService{fake: fake, srv: srv, c: fake.Connector(srv.URL, "default/dropbox", callbackURL)}
	verifier := upstream.NewVerifier()
	_, tok, err := upstream.Exchange(t.Context(), nil, f.c, f.connect(t, verifier), verifier)
	if err != nil {
		t.Fatal(err)
	}
	if tok.RefreshToken == "" {
		t.Fatal("no refresh token: the preset's token_access_type=offline did not reach Dropbox")
	}
	v := &upstream.Vault{Keyring: keyring(t, "a", "a"), Now: clk.Now}
	conn := store.Connection{ID: "c1", Project: project, Connector: f.c.Key}
	v.Seal(&conn, tok)

	clk.Advance(5 * time.Hour)
	if err := v.Revoke(t.Context(), f.c, conn); err != nil {
		t.Fatal(err)
	}
	if fake.LiveRefresh(tok.RefreshToken) {
		t.Fatal("the refresh token still works after Disconnect: the expired access token could not revoke it")
	}
	revokes := f.requestsTo(fakeoauth.PathsOf(fakeoauth.Dropbox).Revoke)
	if len(revokes) != 1 || revokes[0].Header.Get("Authorization") == "Bearer "+tok.AccessToken {
		t.Fatalf("%d revocation requests; want one, made with a refreshed access token", len(revokes))
	}
}

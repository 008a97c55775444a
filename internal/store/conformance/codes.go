package conformance

import (
	"errors"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

func newCode(name string) store.AuthCode {
	return store.AuthCode{Hash: hash(name), Project: project, ClientID: "c1", Subject: "alice",
		RedirectURI: "https://claude.ai/api/mcp/auth_callback", Scopes: []string{"read", "write"},
		Resource: []string{"https://mcp.example/"}, CodeChallenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
		CodeChallengeMethod: "S256", Nonce: "n-0S6_WzA2Mj", AuthTime: base, CreatedAt: base, ExpiresAt: at(time.Minute)}
}

func testCodeRedeemOnce(t *testing.T, s store.Store) {
	ctx := t.Context()
	c := newCode("code1")
	must(t, s.CreateAuthCode(ctx, c))
	wantErr(t, s.CreateAuthCode(ctx, c), store.ErrConflict)

	got, err := s.RedeemAuthCode(ctx, c.Hash, at(time.Second))
	must(t, err)
	equal(t, "code", got, c)

	// A replay gets the code back with ErrConflict, so the caller can revoke what it issued;
	// also after the code expired.
	got, err = s.RedeemAuthCode(ctx, c.Hash, at(2*time.Second))
	wantErr(t, err, store.ErrConflict)
	equal(t, "replayed code", got, c)
	got, err = s.RedeemAuthCode(ctx, c.Hash, at(time.Hour))
	wantErr(t, err, store.ErrConflict)
	equal(t, "replayed code after expiry", got.Hash, c.Hash)

	_, err = s.RedeemAuthCode(ctx, hash("unknown"), at(time.Second))
	wantErr(t, err, store.ErrNotFound)
}

func testCodeRedeemConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	c := newCode("code1")
	must(t, s.CreateAuthCode(ctx, c))
	const n = 50
	errs := make([]error, n)
	codes := make([]store.AuthCode, n)
	parallel(n, func(i int) {
		codes[i], errs[i] = s.RedeemAuthCode(ctx, c.Hash, at(time.Second))
	})
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case errors.Is(err, store.ErrConflict):
		default:
			t.Fatalf("unexpected error: %v", err)
		}
		equal(t, "code returned", codes[i].Hash, c.Hash)
	}
	equal(t, "successful redemptions", won, 1)
}

func testCodeExpired(t *testing.T, s store.Store) {
	ctx := t.Context()
	c := newCode("code1")
	must(t, s.CreateAuthCode(ctx, c))
	_, err := s.RedeemAuthCode(ctx, c.Hash, c.ExpiresAt)
	wantErr(t, err, store.ErrNotFound)
	// Still unused: a redemption that failed for expiry does not count as one.
	_, err = s.RedeemAuthCode(ctx, c.Hash, c.ExpiresAt.Add(time.Second))
	wantErr(t, err, store.ErrNotFound)
}

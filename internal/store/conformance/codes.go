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

	got, err := s.RedeemAuthCode(ctx, c.Hash, at(time.Second), nil)
	must(t, err)
	equal(t, "code", got, c)

	// A replay gets the code back with ErrConflict, so the caller can revoke what it issued;
	// also after the code expired.
	got, err = s.RedeemAuthCode(ctx, c.Hash, at(2*time.Second), nil)
	wantErr(t, err, store.ErrConflict)
	equal(t, "replayed code", got, c)
	got, err = s.RedeemAuthCode(ctx, c.Hash, at(time.Hour), nil)
	wantErr(t, err, store.ErrConflict)
	equal(t, "replayed code after expiry", got.Hash, c.Hash)

	_, err = s.RedeemAuthCode(ctx, hash("unknown"), at(time.Second), nil)
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
		codes[i], errs[i] = s.RedeemAuthCode(ctx, c.Hash, at(time.Second), nil)
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
	_, err := s.RedeemAuthCode(ctx, c.Hash, c.ExpiresAt, nil)
	wantErr(t, err, store.ErrNotFound)
	// Still unused: a redemption that failed for expiry does not count as one.
	_, err = s.RedeemAuthCode(ctx, c.Hash, c.ExpiresAt.Add(time.Second), nil)
	wantErr(t, err, store.ErrNotFound)
}

// testCodeRedeemChecked: a check that refuses leaves the code unused (a request that cannot
// redeem a code cannot burn it), and a check that accepts spends it as RedeemAuthCode does.
func testCodeRedeemChecked(t *testing.T, s store.Store) {
	ctx := t.Context()
	c := newCode("code1")
	must(t, s.CreateAuthCode(ctx, c))
	refused := errors.New("wrong verifier")
	got, err := s.RedeemAuthCode(ctx, c.Hash, at(time.Second), func(seen store.AuthCode) error {
		equal(t, "code seen by check", seen, c)
		return refused
	})
	wantErr(t, err, refused)
	equal(t, "refused code", got, c)

	calls := 0
	got, err = s.RedeemAuthCode(ctx, c.Hash, at(2*time.Second), func(store.AuthCode) error { calls++; return nil })
	must(t, err)
	equal(t, "redeemed code", got, c)
	equal(t, "check calls", calls, 1)

	// Spent: a replay is ErrConflict with the code, and check is not asked.
	got, err = s.RedeemAuthCode(ctx, c.Hash, at(3*time.Second), func(store.AuthCode) error { calls++; return nil })
	wantErr(t, err, store.ErrConflict)
	equal(t, "replayed code", got.Hash, c.Hash)
	equal(t, "check calls after replay", calls, 1)

	// Unknown and expired codes never reach check.
	_, err = s.RedeemAuthCode(ctx, hash("unknown"), at(time.Second), func(store.AuthCode) error { calls++; return nil })
	wantErr(t, err, store.ErrNotFound)
	d := newCode("code2")
	must(t, s.CreateAuthCode(ctx, d))
	_, err = s.RedeemAuthCode(ctx, d.Hash, d.ExpiresAt, func(store.AuthCode) error { calls++; return nil })
	wantErr(t, err, store.ErrNotFound)
	equal(t, "check calls for unknown and expired codes", calls, 1)
}

// testCodeRedeemCheckedConcurrent: many redeemers with checks, some refusing, one winner.
func testCodeRedeemCheckedConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	c := newCode("code1")
	must(t, s.CreateAuthCode(ctx, c))
	refused := errors.New("refused")
	const n = 40
	errs := make([]error, n)
	parallel(n, func(i int) {
		_, errs[i] = s.RedeemAuthCode(ctx, c.Hash, at(time.Second), func(store.AuthCode) error {
			if i%2 == 0 {
				return refused
			}
			return nil
		})
	})
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
			if i%2 == 0 {
				t.Errorf("redeemer %d won although its check refused", i)
			}
		case errors.Is(err, refused), errors.Is(err, store.ErrConflict):
		default:
			t.Fatalf("unexpected error: %v", err)
		}
	}
	equal(t, "successful redemptions", won, 1)
}

// testCodeDPoPBinding: the key a code is bound to (RFC 9449 §10) comes back from every read
// of the code: to the check that decides whether it may be spent, from the redemption, and
// with a replay; an unbound code comes back unbound.
func testCodeDPoPBinding(t *testing.T, s store.Store) {
	ctx := t.Context()
	bound, plain := newCode("bound"), newCode("plain")
	bound.DPoPJKT = "0ZcOCORZNYy-DWpqq30jZyJGHTN0d2HglBV3uiguA4I"
	must(t, s.CreateAuthCode(ctx, bound))
	must(t, s.CreateAuthCode(ctx, plain))

	var seen string
	got, err := s.RedeemAuthCode(ctx, bound.Hash, at(time.Second), func(c store.AuthCode) error { seen = c.DPoPJKT; return nil })
	must(t, err)
	equal(t, "jkt seen by check", seen, bound.DPoPJKT)
	equal(t, "redeemed code", got, bound)
	got, err = s.RedeemAuthCode(ctx, bound.Hash, at(2*time.Second), nil)
	wantErr(t, err, store.ErrConflict)
	equal(t, "replayed code's jkt", got.DPoPJKT, bound.DPoPJKT)

	got, err = s.RedeemAuthCode(ctx, plain.Hash, at(time.Second), nil)
	must(t, err)
	equal(t, "unbound code's jkt", got.DPoPJKT, "")
}

// A replay marks the code before revoking, and the mark is what the winning redemption reads
// after storing its tokens: whichever runs first, tokens of a replayed code end.
func testCodeReplayMark(t *testing.T, s store.Store) {
	ctx := t.Context()
	c := newCode("code-f1")
	must(t, s.CreateAuthCode(ctx, c))
	_, err := s.RedeemAuthCode(ctx, c.Hash, at(time.Second), nil)
	must(t, err)
	replayed, err := s.AuthCodeReplayed(ctx, c.Hash)
	must(t, err)
	equal(t, "replayed after one redemption", replayed, false)

	// The replay comes before the winner has stored anything: nothing to revoke, but marked.
	n, err := s.RevokeByCode(ctx, c.Hash, at(2*time.Second))
	must(t, err)
	equal(t, "revoked before the tokens exist", n, int64(0))
	replayed, err = s.AuthCodeReplayed(ctx, c.Hash)
	must(t, err)
	equal(t, "replayed after the replay", replayed, true)

	// The winner stores its tokens, sees the mark and revokes them; a second replay marks
	// again without error.
	issue(t, s, "f1", "c1", "alice")
	n, err = s.RevokeByCode(ctx, c.Hash, at(3*time.Second))
	must(t, err)
	equal(t, "revoked by the winner", n, int64(2))
	if getToken(t, s, "f1/at").Active(at(3 * time.Second)) {
		t.Fatal("a token of the replayed code is active")
	}

	replayed, err = s.AuthCodeReplayed(ctx, hash("unknown"))
	must(t, err)
	equal(t, "unknown code", replayed, false)
}

package conformance

import (
	"errors"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

func testUseOnce(t *testing.T, s store.Store) {
	ctx := t.Context()
	k := hash("dpop|project|jkt|jti-1")
	must(t, s.UseOnce(ctx, k, at(time.Minute), base))
	// A replay inside the window is refused, also just before it ends.
	wantErr(t, s.UseOnce(ctx, k, at(2*time.Minute), at(time.Second)), store.ErrConflict)
	wantErr(t, s.UseOnce(ctx, k, at(2*time.Minute), at(time.Minute-time.Nanosecond)), store.ErrConflict)
	// Other keys are independent.
	must(t, s.UseOnce(ctx, hash("dpop|project|jkt|jti-2"), at(time.Minute), base))
	// Once the record has expired (and before garbage collection removes it) the key can be
	// recorded again, for a new window.
	must(t, s.UseOnce(ctx, k, at(3*time.Minute), at(time.Minute)))
	wantErr(t, s.UseOnce(ctx, k, at(4*time.Minute), at(2*time.Minute)), store.ErrConflict)
}

func testUseOnceConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	const n = 50
	errs := make([]error, n)
	parallel(n, func(i int) { errs[i] = s.UseOnce(ctx, hash("one"), at(time.Minute), base) })
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case errors.Is(err, store.ErrConflict):
		default:
			t.Fatalf("unexpected error: %v", err)
		}
	}
	equal(t, "uses accepted", won, 1)
}

func testUseOnceCollected(t *testing.T, s store.Store) {
	ctx := t.Context()
	must(t, s.UseOnce(ctx, hash("old"), at(time.Minute), base))
	must(t, s.UseOnce(ctx, hash("live"), at(time.Hour), base))
	res, err := s.GarbageCollect(ctx, at(2*time.Minute))
	must(t, err)
	equal(t, "used_once collected", res["used_once"], int64(1))
	wantErr(t, s.UseOnce(ctx, hash("live"), at(time.Hour), at(2*time.Minute)), store.ErrConflict)
}

func testTokenBinding(t *testing.T, s store.Store) {
	ctx := t.Context()
	bound := store.Token{Hash: hash("bound"), Kind: store.AccessToken, Project: project, ClientID: "c1", Subject: "alice",
		FamilyID: "fb", IssuedAt: base, ExpiresAt: at(time.Hour), JKT: "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"}
	rt := bound
	rt.Hash, rt.Kind = hash("bound-rt"), store.RefreshToken
	must(t, s.CreateTokens(ctx, bound, rt))
	equal(t, "bound access token", getToken(t, s, "bound"), bound)
	// Rotation keeps the binding the caller puts on each new token.
	next := rt
	next.Hash, next.Generation = hash("bound-rt2"), 1
	rot, err := s.RotateRefreshToken(ctx, store.RotateRequest{OldHash: rt.Hash, New: []store.Token{next}, Now: at(time.Minute)})
	must(t, err)
	equal(t, "outcome", rot.Outcome, store.OutcomeRotated)
	equal(t, "old jkt", rot.Old.JKT, rt.JKT)
	equal(t, "successor jkt", getToken(t, s, "bound-rt2").JKT, rt.JKT)
}

func newPushed(name string) store.PushedRequest {
	return store.PushedRequest{Hash: hash(name), Project: project, ClientID: "c1",
		Params:    "client_id=c1&code_challenge=E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM&response_type=code",
		CreatedAt: base, ExpiresAt: at(time.Minute)}
}

func testPushedOnce(t *testing.T, s store.Store) {
	ctx := t.Context()
	p := newPushed("par1")
	must(t, s.CreatePushedRequest(ctx, p))
	wantErr(t, s.CreatePushedRequest(ctx, p), store.ErrConflict)
	// Another client's refusal keeps the request for its own client.
	errOther := errors.New("another client")
	got, err := s.ConsumePushedRequest(ctx, p.Hash, at(time.Second), func(r store.PushedRequest) error {
		if r.ClientID != "c2" {
			return errOther
		}
		return nil
	})
	wantErr(t, err, errOther)
	equal(t, "refused request", got, p)
	got, err = s.ConsumePushedRequest(ctx, p.Hash, at(time.Second), nil)
	must(t, err)
	equal(t, "pushed request", got, p)
	_, err = s.ConsumePushedRequest(ctx, p.Hash, at(2*time.Second), nil)
	wantErr(t, err, store.ErrNotFound)
	// Expired is not found, and collected.
	old := newPushed("par2")
	must(t, s.CreatePushedRequest(ctx, old))
	_, err = s.ConsumePushedRequest(ctx, old.Hash, old.ExpiresAt, nil)
	wantErr(t, err, store.ErrNotFound)
	res, err := s.GarbageCollect(ctx, at(2*time.Minute))
	must(t, err)
	equal(t, "pushed_requests collected", res["pushed_requests"], int64(1))
}

func testPushedConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	p := newPushed("par1")
	must(t, s.CreatePushedRequest(ctx, p))
	const n = 50
	errs := make([]error, n)
	parallel(n, func(i int) { _, errs[i] = s.ConsumePushedRequest(ctx, p.Hash, at(time.Second), nil) })
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case errors.Is(err, store.ErrNotFound):
		default:
			t.Fatalf("unexpected error: %v", err)
		}
	}
	equal(t, "uses of one request_uri", won, 1)
}

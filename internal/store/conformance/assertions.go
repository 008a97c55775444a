package conformance

import (
	"errors"
	"sync"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

func testPersonFind(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, err := s.FindPerson(ctx, project, "id-jag", "https://idp.example|u1")
	wantErr(t, err, store.ErrNotFound)
	p := store.Person{Project: project, ID: "p1", Source: "id-jag", SourceSubject: "https://idp.example|u1",
		Email: "alice@example.com", Name: "Alice", CreatedAt: base}
	_, err = s.UpsertPerson(ctx, p)
	must(t, err)
	got, err := s.FindPerson(ctx, project, "id-jag", "https://idp.example|u1")
	must(t, err)
	equal(t, "found", got, p)
	// Another source, or another project, with the same subject is someone else.
	_, err = s.FindPerson(ctx, project, "oidc", "https://idp.example|u1")
	wantErr(t, err, store.ErrNotFound)
	_, err = s.FindPerson(ctx, "team-b/main", "id-jag", "https://idp.example|u1")
	wantErr(t, err, store.ErrNotFound)
}

func testAssertionUsedOnce(t *testing.T, s store.Store) {
	ctx := t.Context()
	must(t, s.UseAssertionID(ctx, project, "https://idp.example", "j1", at(5*time.Minute)))
	wantErr(t, s.UseAssertionID(ctx, project, "https://idp.example", "j1", at(5*time.Minute)), store.ErrConflict)
	// The jti is the issuer's: another issuer, or another project, may use the same value.
	must(t, s.UseAssertionID(ctx, project, "https://other-idp.example", "j1", at(5*time.Minute)))
	must(t, s.UseAssertionID(ctx, "team-b/main", "https://idp.example", "j1", at(5*time.Minute)))
}

func testAssertionUsedOnceConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = s.UseAssertionID(ctx, project, "https://idp.example", "race", at(5*time.Minute)) })
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, store.ErrConflict):
			t.Fatalf("UseAssertionID: %v", err)
		}
	}
	equal(t, "redemptions that won", ok, 1)
}

func testAssertionCollected(t *testing.T, s store.Store) {
	ctx := t.Context()
	must(t, s.UseAssertionID(ctx, project, "https://idp.example", "old", at(time.Minute)))
	must(t, s.UseAssertionID(ctx, project, "https://idp.example", "live", at(time.Hour)))
	res, err := s.GarbageCollect(ctx, at(10*time.Minute))
	must(t, err)
	equal(t, "collected", res["assertion_ids"], int64(1))
	// The live one is still remembered.
	wantErr(t, s.UseAssertionID(ctx, project, "https://idp.example", "live", at(time.Hour)), store.ErrConflict)
}

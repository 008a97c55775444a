package conformance

import (
	"fmt"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// testConnectionsSealedWithout pages through the connections a new key has not sealed yet, as
// the background re-seal does: in ID order, resuming after the last ID seen, and a connection
// re-sealed meanwhile drops out.
func testConnectionsSealedWithout(t *testing.T, s store.Store) {
	ctx := t.Context()
	var ids []string
	for i := range 7 {
		c := newConnection(fmt.Sprintf("p%d", i), "github", "1")
		c.ID = fmt.Sprintf("conn-%02d", i)
		if i%3 == 0 {
			c.KeyID = "new"
		}
		_, err := s.SaveConnection(ctx, c)
		must(t, err)
		if i%3 != 0 {
			ids = append(ids, c.ID)
		}
	}
	var got []string
	after := ""
	for {
		page, err := s.ConnectionsSealedWithout(ctx, "new", after, 2)
		must(t, err)
		if len(page) == 0 {
			break
		}
		if len(page) > 2 {
			t.Fatalf("page of %d, want at most 2", len(page))
		}
		for _, c := range page {
			if c.KeyID == "new" {
				t.Fatalf("%s is sealed with the key asked to skip", c.ID)
			}
			got = append(got, c.ID)
		}
		after = page[len(page)-1].ID
	}
	equal(t, "ids", got, ids)

	// One re-sealed through UpdateConnection no longer shows; the rest do, from the start.
	_, err := s.UpdateConnection(ctx, project, ids[0], func(c store.Connection) (store.Connection, error) {
		c.KeyID, c.AccessToken = "new", []byte("resealed")
		return c, nil
	})
	must(t, err)
	page, err := s.ConnectionsSealedWithout(ctx, "new", "", 100)
	must(t, err)
	equal(t, "after re-seal", len(page), len(ids)-1)
	// The rows come back whole, tokens included: the re-seal opens and rewrites them.
	equal(t, "tokens", string(page[0].RefreshToken), "sealed refresh")
}

// testSealedValueCounts counts what each key still seals across the tables that hold sealed
// values, so an admin knows when an old key may go.
func testSealedValueCounts(t *testing.T, s store.Store) {
	ctx := t.Context()
	counts, err := s.SealedValueCounts(ctx)
	must(t, err)
	equal(t, "empty store", len(counts), 0)

	for i, key := range []string{"old", "old", "new"} {
		c := newConnection(fmt.Sprintf("p%d", i), "github", "1")
		c.ID, c.KeyID = fmt.Sprintf("conn-%d", i), key
		_, err := s.SaveConnection(ctx, c)
		must(t, err)
	}
	l := newLink("code1", store.LinkConnect, base)
	l.KeyID = "old"
	_, _, err = s.OpenLink(ctx, l, base)
	must(t, err)
	cb := newCallback("a")
	cb.KeyID = "older"
	must(t, s.CreateCallbackState(ctx, cb))
	unsealed := newCallback("b") // a sign-in callback seals no verifier
	unsealed.Verifier, unsealed.KeyID = nil, "ignored"
	must(t, s.CreateCallbackState(ctx, unsealed))

	counts, err = s.SealedValueCounts(ctx)
	must(t, err)
	equal(t, "counts", counts, map[string]int64{"old": 3, "new": 1, "older": 1})

	// Expired rows count until the garbage collector deletes them: they are still stored.
	_, err = s.GarbageCollect(ctx, at(48*time.Hour))
	must(t, err)
	counts, err = s.SealedValueCounts(ctx)
	must(t, err)
	equal(t, "after gc", counts, map[string]int64{"old": 2, "new": 1})
}

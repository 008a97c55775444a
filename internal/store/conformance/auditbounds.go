package conformance

import (
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// Behaviours the admin API's watch reads (docs/decisions/0069-admin-api-list-and-watch-by-hand.md).
func init() {
	tests = append(tests, test{"Audit/Bounds", testAuditBounds})
}

func testAuditBounds(t *testing.T, s store.Store) {
	ctx := t.Context()
	first, last, err := s.AuditBounds(ctx)
	must(t, err)
	equal(t, "bounds of an empty log", [2]int64{first, last}, [2]int64{0, 0})

	for i, p := range []string{project, "team-b/main", project} {
		must(t, s.AppendAudit(ctx, store.AuditRecord{Project: p, Time: at(time.Duration(i) * time.Minute), Actor: "alice", Action: "a"}))
		recs, err := s.ListAuditAfter(ctx, 0, time.Time{}, 10)
		must(t, err)
		first, last, err := s.AuditBounds(ctx)
		must(t, err)
		// Every project's records count, and the ends are the ids the log lists.
		equal(t, "bounds after each append", [2]int64{first, last}, [2]int64{recs[0].ID, recs[len(recs)-1].ID})
		if len(recs) != i+1 || last <= first && i > 0 {
			t.Fatalf("after %d appends: %d records, bounds %d..%d", i+1, len(recs), first, last)
		}
	}
}

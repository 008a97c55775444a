package conformance

import (
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// Behaviours added with connect links and security events.
func init() {
	tests = append(tests,
		test{"Link/GetByID", testLinkGetByID},
		test{"Audit/ListAfter", testAuditListAfter},
	)
}

func testLinkGetByID(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, err := s.GetLink(ctx, "id-none")
	wantErr(t, err, store.ErrNotFound)

	l := newLink("code1", store.LinkConnect, base)
	_, _, err = s.OpenLink(ctx, l, base)
	must(t, err)
	want := l
	want.State = store.LinkOpen
	got, err := s.GetLink(ctx, l.ID)
	must(t, err)
	equal(t, "open link", got, want)

	must(t, s.CloseLink(ctx, l.ID, store.LinkDeclined, at(time.Minute)))
	got, err = s.GetLink(ctx, l.ID)
	must(t, err)
	equal(t, "declined link state", got.State, store.LinkDeclined)

	// A replaced link reports replaced.
	_, _, err = s.OpenLink(ctx, newLink("code2", store.LinkConnect, at(2*time.Minute)), at(2*time.Minute))
	must(t, err)
	_, _, err = s.OpenLink(ctx, newLink("code3", store.LinkAllow, at(3*time.Minute)), at(3*time.Minute))
	must(t, err)
	got, err = s.GetLink(ctx, "id-code2")
	must(t, err)
	equal(t, "replaced link state", got.State, store.LinkReplaced)
	got, err = s.GetLink(ctx, "id-code3")
	must(t, err)
	equal(t, "new link", got.Kind, store.LinkAllow)
}

func testAuditListAfter(t *testing.T, s store.Store) {
	ctx := t.Context()
	recs := []store.AuditRecord{
		{Project: project, Time: base, Actor: "alice", Action: "old", Target: "x"},
		{Project: "team-b/main", Time: at(time.Minute), Actor: "bob", Action: "link.wrong_person", Target: "carol",
			Details: map[string]string{"link_id": "l1"}},
		{Project: project, Time: at(2 * time.Minute), Actor: "client:c1", Action: "refresh.reuse", Target: "alice"},
		{Project: project, Time: at(3 * time.Minute), Actor: "alice", Action: "connection.saved", Target: "c"},
	}
	for _, r := range recs {
		must(t, s.AppendAudit(ctx, r))
	}
	all, err := s.ListAuditAfter(ctx, 0, time.Time{}, 0)
	must(t, err)
	equal(t, "every project, every time", len(all), 4)
	for i := 1; i < len(all); i++ {
		if all[i].ID <= all[i-1].ID {
			t.Fatalf("not in id order: %d then %d", all[i-1].ID, all[i].ID)
		}
	}
	second := all[1]
	second.ID = 0
	equal(t, "round trip", second, recs[1])

	got, err := s.ListAuditAfter(ctx, 0, at(time.Minute), 0)
	must(t, err)
	equal(t, "since a time", len(got), 3)
	equal(t, "first since", got[0].Action, "link.wrong_person")

	got, err = s.ListAuditAfter(ctx, all[1].ID, time.Time{}, 1)
	must(t, err)
	equal(t, "after an id, limited", len(got), 1)
	equal(t, "next", got[0].ID, all[2].ID)

	got, err = s.ListAuditAfter(ctx, all[3].ID, time.Time{}, 10)
	must(t, err)
	equal(t, "nothing newer", len(got), 0)
}

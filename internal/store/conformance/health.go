package conformance

import (
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// dueIDs lists the IDs DueConnections returns for q, page by page (two at a time), so the
// listing's continuation is checked too.
func dueIDs(t *testing.T, s store.Store, q store.DueQuery) []string {
	t.Helper()
	q.Limit = 2
	var ids []string
	for range 20 {
		page, err := s.DueConnections(t.Context(), q)
		must(t, err)
		for _, c := range page {
			ids = append(ids, c.ID)
		}
		if len(page) < q.Limit {
			return ids
		}
		last := page[len(page)-1]
		q.AfterExpiry, q.AfterID = *last.Expiry, last.ID
	}
	t.Fatal("DueConnections does not end")
	return nil
}

func testConnectionsDue(t *testing.T, s store.Store) {
	ctx := t.Context()
	save := func(id string, expiry *time.Time, refresh bool, status store.ConnectionStatus) {
		t.Helper()
		c := newConnection("p-"+id, "github", id)
		c.ID, c.Expiry, c.Status = id, expiry, status
		if !refresh {
			c.RefreshToken = nil
		}
		_, err := s.SaveConnection(ctx, c)
		must(t, err)
	}
	save("soon-used", tp(at(5*time.Minute)), true, store.ConnectionActive)
	save("soon-unused", tp(at(5*time.Minute)), true, store.ConnectionActive)
	save("soon-used-long-ago", tp(at(6*time.Minute)), true, store.ConnectionActive)
	save("soon-no-refresh", tp(at(7*time.Minute)), false, store.ConnectionActive)
	save("expired-expiring", tp(at(-time.Minute)), true, store.ConnectionExpiring)
	save("later", tp(at(time.Hour)), true, store.ConnectionActive)
	save("never-expires", nil, false, store.ConnectionActive)
	save("revoked", tp(at(time.Minute)), true, store.ConnectionRevokedUpstream)
	save("needs-reconnect", tp(at(time.Minute)), false, store.ConnectionNeedsReconnect)
	// Same expiry as soon-used: the order falls back to the ID.
	save("soon-used-2", tp(at(5*time.Minute)), true, store.ConnectionActive)
	elsewhere := newConnection("p-x", "github", "x")
	elsewhere.Project, elsewhere.ID, elsewhere.Expiry = "team-b/main", "elsewhere", tp(at(2*time.Minute))
	_, err := s.SaveConnection(ctx, elsewhere)
	must(t, err)

	must(t, s.TouchConnections(ctx, []store.ConnectionUse{
		{Project: project, ID: "soon-used", At: at(-time.Hour)},
		{Project: project, ID: "soon-used-2", At: at(-time.Hour)},
		{Project: project, ID: "soon-used-long-ago", At: at(-48 * time.Hour)},
		{Project: project, ID: "expired-expiring", At: at(-time.Minute)},
		{Project: project, ID: "later", At: at(0)},
		{Project: project, ID: "revoked", At: at(0)},
		{Project: "team-b/main", ID: "elsewhere", At: at(0)},
		{Project: project, ID: "gone", At: at(0)}, // passed over
		// Same id, wrong project: records nothing.
		{Project: "team-b/main", ID: "soon-unused", At: at(0)},
	}))
	q := store.DueQuery{Before: at(10 * time.Minute), UsedSince: at(-24 * time.Hour)}
	equal(t, "due", dueIDs(t, s, q),
		[]string{"expired-expiring", "elsewhere", "soon-used", "soon-used-2", "soon-no-refresh"})

	// A use older than the recorded one does not move it back.
	must(t, s.TouchConnections(ctx, []store.ConnectionUse{{Project: project, ID: "soon-used", At: at(-30 * time.Hour)}}))
	equal(t, "after an older use", dueIDs(t, s, q),
		[]string{"expired-expiring", "elsewhere", "soon-used", "soon-used-2", "soon-no-refresh"})
	// A newer one does.
	must(t, s.TouchConnections(ctx, []store.ConnectionUse{{Project: project, ID: "soon-used-long-ago", At: at(-time.Hour)}}))
	equal(t, "after a newer use", dueIDs(t, s, q),
		[]string{"expired-expiring", "elsewhere", "soon-used", "soon-used-2", "soon-used-long-ago", "soon-no-refresh"})
	must(t, s.TouchConnections(ctx, nil))

	// Reconnecting keeps the recorded use; the row is due again by its new expiry.
	re := newConnection("p-soon-used", "github", "soon-used")
	re.ID, re.Expiry, re.UpdatedAt = "soon-used", tp(at(2*time.Hour)), at(time.Minute)
	_, err = s.SaveConnection(ctx, re)
	must(t, err)
	equal(t, "reconnected", dueIDs(t, s, store.DueQuery{Before: at(3 * time.Hour), UsedSince: at(-24 * time.Hour)}),
		[]string{"expired-expiring", "elsewhere", "soon-used-2", "soon-used-long-ago", "soon-no-refresh", "later", "soon-used"})
}

// A recorded use is not a change UpdateConnection guards against: a refresh that read the row
// before the use still writes, and the use stays recorded.
func testTouchKeepsRefresh(t *testing.T, s store.Store) {
	ctx := t.Context()
	c := saveConnection(t, s, "alice", "github", "1001")
	must(t, s.TouchConnections(ctx, []store.ConnectionUse{{Project: project, ID: c.ID, At: at(time.Minute)}}))
	got, err := s.UpdateConnection(ctx, project, c.ID, func(cur store.Connection) (store.Connection, error) {
		cur.AccessToken, cur.UpdatedAt = []byte("refreshed"), at(time.Minute)
		return cur, nil
	})
	must(t, err)
	equal(t, "refreshed", string(got.AccessToken), "refreshed")
	must(t, s.TouchConnections(ctx, []store.ConnectionUse{{Project: project, ID: c.ID, At: at(2 * time.Minute)}}))
	stored, err := s.GetConnection(ctx, project, c.ID)
	must(t, err)
	equal(t, "stored", string(stored.AccessToken), "refreshed")
	equal(t, "use recorded", dueIDs(t, s, store.DueQuery{Before: at(24 * time.Hour), UsedSince: at(2 * time.Minute)}), []string{c.ID})
}

func testConnectionCount(t *testing.T, s store.Store) {
	ctx := t.Context()
	counts := func() map[string]int64 {
		t.Helper()
		got, err := s.CountConnections(ctx)
		must(t, err)
		m := map[string]int64{}
		for _, c := range got {
			m[c.Connector+" "+string(c.Status)] = c.Count
		}
		return m
	}
	equal(t, "empty", counts(), map[string]int64{})
	saveConnection(t, s, "alice", "github", "1")
	saveConnection(t, s, "bob", "github", "2")
	saveConnection(t, s, "bob", "gitlab", "3")
	broken := saveConnection(t, s, "carol", "github", "4")
	_, err := s.UpdateConnection(ctx, project, broken.ID, func(c store.Connection) (store.Connection, error) {
		c.Status = store.ConnectionRevokedUpstream
		return c, nil
	})
	must(t, err)
	other := newConnection("dave", "github", "5")
	other.Project = "team-b/main"
	_, err = s.SaveConnection(ctx, other)
	must(t, err)
	equal(t, "counts", counts(), map[string]int64{"github active": 3, "github revoked_upstream": 1, "gitlab active": 1})
}

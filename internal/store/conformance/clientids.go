package conformance

import (
	"fmt"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// Behaviours of the record of which namespace holds each OAuthClient id (docs/decisions/0067).
func init() {
	tests = append(tests,
		test{"ClientID/Hold", testClientIDHold},
		test{"ClientID/HoldConcurrent", testClientIDHoldConcurrent},
	)
}

func testClientIDHold(t *testing.T, s store.Store) {
	ctx := t.Context()
	hold := func(project, id, namespace string, now time.Time) string {
		t.Helper()
		holder, err := s.HoldClientID(ctx, project, id, namespace, now)
		must(t, err)
		return holder
	}
	equal(t, "first holder", hold("team-a/demo", "lkc_repo-helper", "team-a", base), "team-a")
	// The same namespace asks again (every reconcile does): still its own.
	equal(t, "holder asking again", hold("team-a/demo", "lkc_repo-helper", "team-a", at(time.Hour)), "team-a")
	// Another namespace asks later, also long after: the first keeps it.
	equal(t, "another namespace", hold("team-a/demo", "lkc_repo-helper", "team-b", at(time.Minute)), "team-a")
	equal(t, "another namespace, a year on", hold("team-a/demo", "lkc_repo-helper", "team-b", at(365*24*time.Hour)), "team-a")
	// Ids are per project, and compared exactly.
	equal(t, "another project", hold("team-b/demo", "lkc_repo-helper", "team-b", base), "team-b")
	equal(t, "another id", hold("team-a/demo", "lkc_Repo-helper", "team-b", base), "team-b")
	// Garbage collection keeps holders.
	_, err := s.GarbageCollect(ctx, at(1000*24*time.Hour))
	must(t, err)
	equal(t, "after garbage collection", hold("team-a/demo", "lkc_repo-helper", "team-c", at(1000*24*time.Hour)), "team-a")
}

func testClientIDHoldConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	const n = 20
	holders := make([]string, n)
	errs := make([]error, n)
	parallel(n, func(i int) {
		holders[i], errs[i] = s.HoldClientID(ctx, "team-a/demo", "lkc_contested", fmt.Sprintf("ns-%d", i), base)
	})
	for i := range n {
		must(t, errs[i])
		equal(t, fmt.Sprintf("holder seen by ns-%d", i), holders[i], holders[0])
	}
}

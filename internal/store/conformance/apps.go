package conformance

import (
	"errors"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

func init() {
	tests = append(tests,
		test{"App/Revoke", testAppRevoke},
		test{"App/RevokeOnlyPermissions", testAppRevokeOnlyPermissions},
		test{"App/RevokeConcurrent", testAppRevokeConcurrent},
	)
}

// appFixture gives alice a grant, tokens and permissions for c1, and keeps beside them what
// revoking alice's c1 must leave alone: alice's c2, bob's c1.
func appFixture(t *testing.T, s store.Store) {
	t.Helper()
	ctx := t.Context()
	must(t, s.UpsertGrant(ctx, store.Grant{Project: project, Subject: "alice", ClientID: "c1", Scopes: []string{"read"}, CreatedAt: base, UpdatedAt: base}))
	must(t, s.UpsertGrant(ctx, store.Grant{Project: project, Subject: "alice", ClientID: "c2", Scopes: []string{"read"}, CreatedAt: base, UpdatedAt: base}))
	must(t, s.UpsertGrant(ctx, store.Grant{Project: project, Subject: "bob", ClientID: "c1", Scopes: []string{"read"}, CreatedAt: base, UpdatedAt: base}))
	issue(t, s, "a1", "c1", "alice")
	issue(t, s, "a2", "c1", "alice")
	issue(t, s, "a3", "c2", "alice")
	issue(t, s, "b1", "c1", "bob")
	github1 := saveConnection(t, s, "alice", "github", "1001")
	github2 := saveConnection(t, s, "alice", "github", "2002")
	gitlab := saveConnection(t, s, "alice", "gitlab", "7")
	bobs := saveConnection(t, s, "bob", "github", "3003")
	for _, p := range []store.AgentPermission{
		{Project: project, Subject: "alice", Connector: "github", ClientID: "c1", ConnectionID: github1.ID, CreatedAt: base},
		{Project: project, Subject: "alice", Connector: "github", ClientID: "c1", ConnectionID: github2.ID, CreatedAt: base},
		{Project: project, Subject: "alice", Connector: "gitlab", ClientID: "c1", ConnectionID: gitlab.ID, CreatedAt: base},
		{Project: project, Subject: "alice", Connector: "github", ClientID: "c2", ConnectionID: github1.ID, CreatedAt: base},
		{Project: project, Subject: "bob", Connector: "github", ClientID: "c1", ConnectionID: bobs.ID, CreatedAt: base},
	} {
		must(t, s.AllowAgent(ctx, p))
	}
}

// permissionsOf lists a person's permissions as connector/client.
func permissionsOf(t *testing.T, s store.Store, subject string) []string {
	t.Helper()
	list, err := s.ListPermissions(t.Context(), project, subject)
	must(t, err)
	out := []string{}
	for _, p := range list {
		out = append(out, p.Connector+"/"+p.ClientID)
	}
	return out
}

// checkAppRevoked checks that alice's c1 is gone in every form and nothing else was touched.
func checkAppRevoked(t *testing.T, s store.Store, now time.Time) {
	t.Helper()
	ctx := t.Context()
	_, err := s.GetGrant(ctx, project, "alice", "c1")
	wantErr(t, err, store.ErrNotFound)
	for _, g := range [][2]string{{"alice", "c2"}, {"bob", "c1"}} {
		_, err := s.GetGrant(ctx, project, g[0], g[1])
		must(t, err)
	}
	for _, h := range []string{"a1/at", "a1/rt", "a2/at", "a2/rt"} {
		if getToken(t, s, h).Active(now) {
			t.Errorf("%s still active after the app was revoked", h)
		}
	}
	for _, h := range []string{"a3/at", "a3/rt", "b1/at", "b1/rt"} {
		if !getToken(t, s, h).Active(now) {
			t.Errorf("%s (another client or person) was revoked", h)
		}
	}
	equal(t, "alice's permissions", permissionsOf(t, s, "alice"), []string{"github/c2"})
	equal(t, "bob's permissions", permissionsOf(t, s, "bob"), []string{"github/c1"})
}

func testAppRevoke(t *testing.T, s store.Store) {
	ctx := t.Context()
	appFixture(t, s)
	now := at(time.Minute)
	must(t, s.RevokeApp(ctx, project, "alice", "c1", now))
	checkAppRevoked(t, s, now)
	// Nothing left to revoke: ErrNotFound, and still nothing else touched.
	wantErr(t, s.RevokeApp(ctx, project, "alice", "c1", now), store.ErrNotFound)
	checkAppRevoked(t, s, now)
	// The same person and client in another project are someone else's.
	wantErr(t, s.RevokeApp(ctx, "team-b/main", "bob", "c1", now), store.ErrNotFound)
	_, err := s.GetGrant(ctx, project, "bob", "c1")
	must(t, err)
}

// An app the person never consented to (its permissions came through a connect link) is
// revoked all the same.
func testAppRevokeOnlyPermissions(t *testing.T, s store.Store) {
	ctx := t.Context()
	c := saveConnection(t, s, "alice", "github", "1001")
	must(t, s.AllowAgent(ctx, store.AgentPermission{Project: project, Subject: "alice", Connector: "github", ClientID: "c9", ConnectionID: c.ID, CreatedAt: base}))
	must(t, s.RevokeApp(ctx, project, "alice", "c9", at(time.Minute)))
	equal(t, "permissions", permissionsOf(t, s, "alice"), []string{})
	wantErr(t, s.RevokeApp(ctx, project, "alice", "c9", at(time.Minute)), store.ErrNotFound)
}

// Many revokes of one app at once: one of them does it, the others find nothing left, and
// none fails otherwise.
func testAppRevokeConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	appFixture(t, s)
	now := at(time.Minute)
	const n = 10
	errs := make([]error, n)
	parallel(n, func(i int) { errs[i] = s.RevokeApp(ctx, project, "alice", "c1", now) })
	done := 0
	for _, err := range errs {
		switch {
		case err == nil:
			done++
		case !errors.Is(err, store.ErrNotFound):
			t.Fatal(err)
		}
	}
	if done < 1 {
		t.Fatal("no revoke succeeded")
	}
	checkAppRevoked(t, s, now)
}

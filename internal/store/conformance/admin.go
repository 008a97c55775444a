package conformance

import (
	"fmt"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// Behaviours of the admin listings and of ending a person's access (docs/admin.md).
func init() {
	tests = append(tests,
		test{"Admin/PeoplePage", testAdminPeoplePage},
		test{"Admin/GrantsPage", testAdminGrantsPage},
		test{"Admin/ConnectionsPage", testAdminConnectionsPage},
		test{"Admin/OpenLinksPage", testAdminOpenLinksPage},
		test{"Admin/ClientTokensPage", testAdminClientTokensPage},
		test{"Admin/AuditPage", testAdminAuditPage},
		test{"Admin/EndPersonAccess", testAdminEndPersonAccess},
	)
}

const otherProject = "team-a/other"

// pages walks every page of list with page size n and returns all rows and the page count.
func pages[T any](t *testing.T, n int, list func(after []string, limit int) ([]T, []string, error)) ([]T, int) {
	t.Helper()
	var all []T
	var after []string
	for count := 1; ; count++ {
		rows, next, err := list(after, n)
		must(t, err)
		if len(rows) > n {
			t.Fatalf("page %d has %d rows, asked for %d", count, len(rows), n)
		}
		all = append(all, rows...)
		if next == nil {
			return all, count
		}
		if count > 1000 {
			t.Fatal("pages never end")
		}
		after = next
	}
}

func person(t *testing.T, s store.Store, proj, id, email string, signedIn time.Time) {
	t.Helper()
	_, err := s.UpsertPerson(t.Context(), store.Person{Project: proj, ID: id, Source: "password", SourceSubject: email,
		Email: email, Name: id, CreatedAt: signedIn})
	must(t, err)
}

func testAdminPeoplePage(t *testing.T, s store.Store) {
	ctx := t.Context()
	for i := range 5 {
		person(t, s, project, id("p", i), fmt.Sprintf("p%d@example.com", i), base)
	}
	person(t, s, otherProject, "q-0", "q@example.com", base)
	person(t, s, "team-b/main", "r-0", "r@example.com", base)
	// Signing in again is recorded as the last sign-in; the person keeps their first CreatedAt.
	person(t, s, project, "p-1", "p1@example.com", at(time.Hour))
	must(t, s.CreateSession(ctx, store.Session{IDHash: hash("s1"), Project: project, Subject: "p-1", AuthTime: at(time.Hour),
		CreatedAt: at(time.Hour), ExpiresAt: at(2 * time.Hour)}))
	must(t, s.CreateSession(ctx, store.Session{IDHash: hash("s2"), Project: project, Subject: "p-1", AuthTime: at(time.Hour),
		CreatedAt: at(time.Hour), ExpiresAt: at(90 * time.Minute)}))

	now := at(100 * time.Minute)
	got, n := pages(t, 2, func(after []string, limit int) ([]store.PersonSummary, []string, error) {
		return s.ListPeoplePage(ctx, store.AdminQuery{Projects: []string{project, otherProject}, After: after, Limit: limit}, now)
	})
	equal(t, "people of two projects", len(got), 6)
	equal(t, "pages", n, 3)
	for i := 1; i < len(got); i++ {
		if got[i-1].Project > got[i].Project || (got[i-1].Project == got[i].Project && got[i-1].ID >= got[i].ID) {
			t.Fatalf("not in key order: %v then %v", got[i-1].ID, got[i].ID)
		}
	}
	equal(t, "p-1", got[1], store.PersonSummary{
		Person:     store.Person{Project: project, ID: "p-1", Source: "password", SourceSubject: "p1@example.com", Email: "p1@example.com", Name: "p-1", CreatedAt: base},
		LastSignIn: at(time.Hour), ActiveSessions: 1,
	})

	one, next, err := s.ListPeoplePage(ctx, store.AdminQuery{Projects: []string{project}, Email: "p3@example.com"}, now)
	must(t, err)
	equal(t, "by email", len(one), 1)
	equal(t, "by email id", one[0].ID, "p-3")
	equal(t, "no next", next, []string(nil))
	one, _, err = s.ListPeoplePage(ctx, store.AdminQuery{Projects: []string{project}, Subject: "p-4"}, now)
	must(t, err)
	equal(t, "by subject", one[0].Email, "p4@example.com")
	none, _, err := s.ListPeoplePage(ctx, store.AdminQuery{}, now)
	must(t, err)
	equal(t, "no projects, no people", len(none), 0)
	_, _, err = s.ListPeoplePage(ctx, store.AdminQuery{Projects: []string{project}, After: []string{"x"}}, now)
	if err == nil {
		t.Fatal("a page key of the wrong shape was accepted")
	}
}

func testAdminGrantsPage(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, g := range []store.Grant{
		{Project: project, Subject: "alice", ClientID: "c1", Scopes: []string{"read"}},
		{Project: project, Subject: "alice", ClientID: "c2"},
		{Project: project, Subject: "bob", ClientID: "c1"},
		{Project: "team-b/main", Subject: "carol", ClientID: "c1"},
	} {
		g.CreatedAt, g.UpdatedAt = base, base
		must(t, s.UpsertGrant(ctx, g))
	}
	issue(t, s, "a1", "c1", "alice")
	issue(t, s, "a2", "c1", "alice")
	must(t, s.RevokeToken(ctx, hash("a2/rt"), at(time.Minute)))

	got, n := pages(t, 1, func(after []string, limit int) ([]store.GrantSummary, []string, error) {
		return s.ListGrantsPage(ctx, store.AdminQuery{Projects: []string{project}, After: after, Limit: limit}, at(2*time.Minute))
	})
	equal(t, "grants", len(got), 3)
	equal(t, "pages", n, 3)
	equal(t, "first", got[0], store.GrantSummary{Grant: store.Grant{Project: project, Subject: "alice", ClientID: "c1",
		Scopes: []string{"read"}, CreatedAt: base, UpdatedAt: base}, LiveTokens: 2})
	equal(t, "order", []string{got[1].ClientID, got[2].Subject}, []string{"c2", "bob"})

	mine, _, err := s.ListGrantsPage(ctx, store.AdminQuery{Projects: []string{project}, Subject: "bob"}, base)
	must(t, err)
	equal(t, "bob's", len(mine), 1)
}

func testAdminConnectionsPage(t *testing.T, s store.Store) {
	ctx := t.Context()
	for i := range 7 {
		saveConnection(t, s, id("person", i%3), "github", fmt.Sprint(1000+i))
	}
	other := newConnection("alice", "github", "9")
	other.Project, other.ID = "team-b/main", "conn-b"
	_, err := s.SaveConnection(ctx, other)
	must(t, err)

	got, n := pages(t, 3, func(after []string, limit int) ([]store.Connection, []string, error) {
		return s.ListConnectionsPage(ctx, store.AdminQuery{Projects: []string{project}, After: after, Limit: limit})
	})
	equal(t, "connections", len(got), 7)
	equal(t, "pages", n, 3)
	seen := map[string]bool{}
	for _, c := range got {
		if c.Project != project || seen[c.ID] {
			t.Fatalf("connection %s/%s listed wrongly", c.Project, c.ID)
		}
		seen[c.ID] = true
	}
	want, err := s.GetConnection(ctx, project, got[0].ID)
	must(t, err)
	equal(t, "row", got[0], want)

	p1, _, err := s.ListConnectionsPage(ctx, store.AdminQuery{Projects: []string{project}, Subject: "person-1"})
	must(t, err)
	equal(t, "one person's", len(p1), 2)
}

func testAdminOpenLinksPage(t *testing.T, s store.Store) {
	ctx := t.Context()
	open := newLink("open", store.LinkConnect, base)
	_, _, err := s.OpenLink(ctx, open, base)
	must(t, err)
	done := newLink("done", store.LinkConnect, base)
	done.ClientID = "other-agent"
	_, _, err = s.OpenLink(ctx, done, base)
	must(t, err)
	must(t, s.CloseLink(ctx, done.ID, store.LinkDone, at(time.Minute)))
	expiring := newLink("expiring", store.LinkAllow, base.Add(-linkLife+time.Minute))
	expiring.Connector = "gitlab"
	_, _, err = s.OpenLink(ctx, expiring, base)
	must(t, err)

	got, _, err := s.ListOpenLinksPage(ctx, store.AdminQuery{Projects: []string{project}}, base)
	must(t, err)
	equal(t, "open links", len(got), 2)
	got, _, err = s.ListOpenLinksPage(ctx, store.AdminQuery{Projects: []string{project}}, at(2*time.Minute))
	must(t, err)
	want := open
	want.State = store.LinkOpen
	equal(t, "expired and done links are not open", got, []store.Link{want})
}

func testAdminClientTokensPage(t *testing.T, s store.Store) {
	ctx := t.Context()
	issue(t, s, "a1", "c1", "alice")
	issue(t, s, "a2", "c1", "bob")
	issue(t, s, "a3", "c2", "alice")
	issue(t, s, "a4", "c3", "alice")
	_, err := s.RevokeFamily(ctx, "a4", at(time.Minute))
	must(t, err)

	got, n := pages(t, 1, func(after []string, limit int) ([]store.ClientTokenCount, []string, error) {
		return s.ListClientTokensPage(ctx, store.AdminQuery{Projects: []string{project}, After: after, Limit: limit}, at(time.Minute))
	})
	equal(t, "counts", got, []store.ClientTokenCount{{Project: project, ClientID: "c1", Live: 4}, {Project: project, ClientID: "c2", Live: 2}})
	equal(t, "pages", n, 2)
	bob, _, err := s.ListClientTokensPage(ctx, store.AdminQuery{Projects: []string{project}, Subject: "bob"}, at(time.Minute))
	must(t, err)
	equal(t, "bob's", bob, []store.ClientTokenCount{{Project: project, ClientID: "c1", Live: 2}})
	later, _, err := s.ListClientTokensPage(ctx, store.AdminQuery{Projects: []string{project}}, at(2*accessLife))
	must(t, err)
	equal(t, "access tokens expired", later, []store.ClientTokenCount{{Project: project, ClientID: "c1", Live: 2}, {Project: project, ClientID: "c2", Live: 1}})
}

func testAdminAuditPage(t *testing.T, s store.Store) {
	ctx := t.Context()
	for i, r := range []store.AuditRecord{
		{Project: project, Actor: "alice", Action: "connection.saved", Target: "c"},
		{Project: "team-b/main", Actor: "bob", Action: "connection.saved", Target: "c"},
		{Project: otherProject, Actor: "admin:k8s-admin", Action: "admin.person.access_ended", Target: "person:alice"},
		{Project: project, Actor: "admin:k8s-admin", Action: "admin.grant.revoked", Target: "grant:alice.c1"},
		{Project: project, Actor: "alice", Action: "connection.saved", Target: "d"},
	} {
		r.Time = at(time.Duration(i) * time.Minute)
		must(t, s.AppendAudit(ctx, r))
	}
	projects := []string{project, otherProject}
	got, err := s.ListAuditPage(ctx, store.AuditQuery{Projects: projects})
	must(t, err)
	equal(t, "two projects", len(got), 4)
	page, err := s.ListAuditPage(ctx, store.AuditQuery{Projects: projects, AfterID: got[1].ID, Limit: 1})
	must(t, err)
	equal(t, "after, limited", len(page), 1)
	equal(t, "after", page[0].ID, got[2].ID)
	byActor, err := s.ListAuditPage(ctx, store.AuditQuery{Projects: projects, Actor: "admin:k8s-admin"})
	must(t, err)
	equal(t, "by actor", len(byActor), 2)
	byAction, err := s.ListAuditPage(ctx, store.AuditQuery{Projects: projects, Action: "connection.saved", Target: "d"})
	must(t, err)
	equal(t, "by action and target", len(byAction), 1)
	since, err := s.ListAuditPage(ctx, store.AuditQuery{Projects: projects, Since: at(3 * time.Minute)})
	must(t, err)
	equal(t, "since", len(since), 2)
}

func testAdminEndPersonAccess(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, err := s.EndPersonAccess(ctx, project, "alice", base)
	wantErr(t, err, store.ErrNotFound)

	person(t, s, project, "alice", "alice@example.com", base)
	person(t, s, project, "bob", "bob@example.com", base)
	for _, p := range []string{"alice", "bob"} {
		must(t, s.CreateSession(ctx, store.Session{IDHash: hash("s-" + p), Project: project, Subject: p, AuthTime: base,
			CreatedAt: base, ExpiresAt: at(time.Hour)}))
		must(t, s.UpsertGrant(ctx, store.Grant{Project: project, Subject: p, ClientID: "c1", CreatedAt: base, UpdatedAt: base}))
		issue(t, s, "f-"+p, "c1", p)
		c := saveConnection(t, s, p, "github", "acct-"+p)
		must(t, s.AllowAgent(ctx, store.AgentPermission{Project: project, Subject: p, Connector: "github", ClientID: "c1",
			ConnectionID: c.ID, CreatedAt: base}))
		must(t, s.CreateCallbackState(ctx, store.CallbackState{StateHash: hash("cb-" + p), Project: project, Subject: p,
			Connector: "github", Purpose: "connect", KeyID: "k1", ExpiresAt: at(time.Hour), CreatedAt: base}))
		l := newLink("link-"+p, store.LinkConnect, base)
		l.Subject = p
		_, _, err := s.OpenLink(ctx, l, base)
		must(t, err)
		must(t, s.AddPasskey(ctx, newPasskey(p, p, base)))
		code := newCode("code-" + p)
		code.Subject, code.ExpiresAt = p, at(time.Hour)
		must(t, s.CreateAuthCode(ctx, code))
	}
	// A token the person holds at a second client, issued as part of the same person's access.
	issue(t, s, "f-alice-2", "c2", "alice")

	now := at(time.Minute)
	ended, err := s.EndPersonAccess(ctx, project, "alice", now)
	must(t, err)
	equal(t, "connections returned", len(ended.Connections), 1)
	equal(t, "connection returned whole", ended.Connections[0].AccessToken, []byte("sealed access"))
	ended.Connections = nil
	equal(t, "ended", ended, store.AccessEnded{Sessions: 1, Tokens: 4, Grants: 1, Permissions: 1, Links: 1, Callbacks: 1,
		Passkeys: 1, Codes: 1})
	wantWaysInEnded(t, s, "alice", now, true)
	wantWaysInEnded(t, s, "bob", now, false)

	_, err = s.GetSession(ctx, hash("s-alice"), now)
	wantErr(t, err, store.ErrNotFound)
	_, err = s.GetGrant(ctx, project, "alice", "c1")
	wantErr(t, err, store.ErrNotFound)
	for _, h := range []string{"f-alice/at", "f-alice/rt", "f-alice-2/rt"} {
		if getToken(t, s, h).Active(now) {
			t.Fatalf("%s still active", h)
		}
	}
	conns, err := s.ListConnections(ctx, project, "alice")
	must(t, err)
	equal(t, "connections", len(conns), 0)
	_, err = s.FindPermission(ctx, project, "alice", "github", "c1")
	wantErr(t, err, store.ErrNotFound)
	_, err = s.GetLinkByCode(ctx, hash("link-alice"), now)
	wantErr(t, err, store.ErrNotFound)
	_, err = s.GetCallbackState(ctx, hash("cb-alice"), now)
	wantErr(t, err, store.ErrNotFound)
	people, _, err := s.ListPeoplePage(ctx, store.AdminQuery{Projects: []string{project}, Subject: "alice"}, now)
	must(t, err)
	equal(t, "ended at", people[0].AccessEndedAt, now)

	// Bob keeps everything.
	_, err = s.GetSession(ctx, hash("s-bob"), now)
	must(t, err)
	if !getToken(t, s, "f-bob/rt").Active(now) {
		t.Fatal("bob's token was revoked")
	}
	_, err = s.FindPermission(ctx, project, "bob", "github", "c1")
	must(t, err)
	_, err = s.GetLinkByCode(ctx, hash("link-bob"), now)
	must(t, err)

	// Ending again succeeds with nothing left to end.
	again, err := s.EndPersonAccess(ctx, project, "alice", at(2*time.Minute))
	must(t, err)
	equal(t, "again", again, store.AccessEnded{})
	_, err = s.EndPersonAccess(ctx, otherProject, "alice", now)
	wantErr(t, err, store.ErrNotFound)
}

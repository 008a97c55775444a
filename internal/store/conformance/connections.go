package conformance

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

func newConnection(subject, connector, account string) store.Connection {
	return store.Connection{
		ID: "conn-" + subject + "-" + connector + "-" + account, Project: project, Subject: subject,
		Connector: connector, AccountID: account, AccountName: "login-" + account, KeyID: "k1",
		AccessToken: []byte("sealed access"), RefreshToken: []byte("sealed refresh"), TokenType: "bearer",
		Expiry: tp(at(8 * time.Hour)), Scopes: []string{"repo", "read:user"}, Status: store.ConnectionActive,
		CreatedAt: base, UpdatedAt: base,
	}
}

func saveConnection(t testing.TB, s store.Store, subject, connector, account string) store.Connection {
	t.Helper()
	c, err := s.SaveConnection(t.Context(), newConnection(subject, connector, account))
	must(t, err)
	return c
}

func testConnectionSaveGet(t *testing.T, s store.Store) {
	ctx := t.Context()
	c := newConnection("alice", "github", "1001")
	// The person's first account at the connector is their default.
	c.Default = true
	got, err := s.SaveConnection(ctx, c)
	must(t, err)
	equal(t, "saved", got, c)
	got, err = s.GetConnection(ctx, project, c.ID)
	must(t, err)
	equal(t, "get", got, c)

	// Reconnecting the same account updates in place: same ID, same CreatedAt, new tokens.
	must(t, s.AllowAgent(ctx, store.AgentPermission{Project: project, Subject: "alice", Connector: "github",
		ClientID: "c1", ConnectionID: c.ID, CreatedAt: base}))
	re := c
	re.ID, re.AccountName, re.AccessToken, re.RefreshToken, re.Expiry = "conn-new", "renamed", []byte("new access"), nil, nil
	re.Status, re.CreatedAt, re.UpdatedAt = store.ConnectionActive, at(time.Hour), at(time.Hour)
	got, err = s.SaveConnection(ctx, re)
	must(t, err)
	want := re
	want.ID, want.CreatedAt = c.ID, c.CreatedAt
	equal(t, "reconnected", got, want)
	got, err = s.GetConnection(ctx, project, c.ID)
	must(t, err)
	equal(t, "reconnected, stored", got, want)
	_, err = s.FindPermission(ctx, project, "alice", "github", "c1")
	must(t, err)

	// Another account is another connection; an ID already in use is a conflict.
	second := saveConnection(t, s, "alice", "github", "2002")
	clash := newConnection("alice", "github", "3003")
	clash.ID = second.ID
	_, err = s.SaveConnection(ctx, clash)
	wantErr(t, err, store.ErrConflict)

	other := newConnection("bob", "github", "1001")
	other.CreatedAt = at(-time.Hour)
	_, err = s.SaveConnection(ctx, other)
	must(t, err)

	list, err := s.ListConnections(ctx, project, "alice")
	must(t, err)
	equal(t, "alice's connections", len(list), 2)
	equal(t, "first", list[0].ID, c.ID)
	equal(t, "second", list[1].ID, second.ID)

	_, err = s.GetConnection(ctx, "team-b/main", c.ID)
	wantErr(t, err, store.ErrNotFound)
}

func testConnectionUpdate(t *testing.T, s store.Store) {
	ctx := t.Context()
	c := saveConnection(t, s, "alice", "github", "1001")
	got, err := s.UpdateConnection(ctx, project, c.ID, func(cur store.Connection) (store.Connection, error) {
		equal(t, "fn sees the stored connection", cur, c)
		cur.AccessToken, cur.Expiry, cur.UpdatedAt = []byte("refreshed"), tp(at(16*time.Hour)), at(time.Minute)
		cur.AccountID, cur.Subject = "someone-else", "mallory" // cannot change
		return cur, nil
	})
	must(t, err)
	want := c
	want.AccessToken, want.Expiry, want.UpdatedAt = []byte("refreshed"), tp(at(16*time.Hour)), at(time.Minute)
	equal(t, "returned", got, want)
	got, err = s.GetConnection(ctx, project, c.ID)
	must(t, err)
	equal(t, "stored", got, want)

	// A failed refresh leaves the row as it was.
	boom := errors.New("upstream said no")
	_, err = s.UpdateConnection(ctx, project, c.ID, func(cur store.Connection) (store.Connection, error) {
		cur.Status = store.ConnectionRevokedUpstream
		return cur, boom
	})
	wantErr(t, err, boom)
	got, err = s.GetConnection(ctx, project, c.ID)
	must(t, err)
	equal(t, "after failed fn", got, want)

	// Marking it broken.
	got, err = s.UpdateConnection(ctx, project, c.ID, func(cur store.Connection) (store.Connection, error) {
		cur.Status = store.ConnectionRevokedUpstream
		return cur, nil
	})
	must(t, err)
	equal(t, "status", got.Status, store.ConnectionRevokedUpstream)

	_, err = s.UpdateConnection(ctx, project, "missing", func(cur store.Connection) (store.Connection, error) { return cur, nil })
	wantErr(t, err, store.ErrNotFound)
	_, err = s.UpdateConnection(ctx, "team-b/main", c.ID, func(cur store.Connection) (store.Connection, error) { return cur, nil })
	wantErr(t, err, store.ErrNotFound)
}

// Twenty callers each read a counter, "refresh" it and write it back: with the row held for
// the whole of fn, each sees the previous one's write and none is lost.
func testConnectionUpdateConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	c := newConnection("alice", "github", "1001")
	c.AccessToken = []byte("0")
	c, err := s.SaveConnection(ctx, c)
	must(t, err)
	const n = 20
	seen := make([]int, n)
	errs := make([]error, n)
	parallel(n, func(i int) {
		_, errs[i] = s.UpdateConnection(ctx, project, c.ID, func(cur store.Connection) (store.Connection, error) {
			v, err := strconv.Atoi(string(cur.AccessToken))
			if err != nil {
				return cur, err
			}
			seen[i] = v
			cur.AccessToken = []byte(strconv.Itoa(v + 1))
			return cur, nil
		})
	})
	for _, err := range errs {
		must(t, err)
	}
	got, err := s.GetConnection(ctx, project, c.ID)
	must(t, err)
	equal(t, "counter", string(got.AccessToken), strconv.Itoa(n))
	slices.Sort(seen)
	for i, v := range seen {
		if v != i {
			t.Fatalf("values seen by fn = %v, want each of 0..%d once", seen, n-1)
		}
	}
}

func testConnectionDelete(t *testing.T, s store.Store) {
	ctx := t.Context()
	c := saveConnection(t, s, "alice", "github", "1001")
	keep := saveConnection(t, s, "alice", "github", "2002")
	for _, p := range []store.AgentPermission{
		{Project: project, Subject: "alice", Connector: "github", ClientID: "c1", ConnectionID: c.ID, CreatedAt: base},
		{Project: project, Subject: "alice", Connector: "github", ClientID: "c2", ConnectionID: keep.ID, CreatedAt: base},
	} {
		must(t, s.AllowAgent(ctx, p))
	}
	must(t, s.DeleteConnection(ctx, project, c.ID))
	_, err := s.GetConnection(ctx, project, c.ID)
	wantErr(t, err, store.ErrNotFound)
	_, err = s.FindPermission(ctx, project, "alice", "github", "c1")
	wantErr(t, err, store.ErrNotFound)
	_, err = s.FindPermission(ctx, project, "alice", "github", "c2")
	must(t, err)
	wantErr(t, s.DeleteConnection(ctx, project, c.ID), store.ErrNotFound)
}

func testPermissionLifecycle(t *testing.T, s store.Store) {
	ctx := t.Context()
	c1 := saveConnection(t, s, "alice", "github", "1001")
	c2 := saveConnection(t, s, "alice", "github", "2002")
	gl := saveConnection(t, s, "alice", "gitlab", "7")
	p := store.AgentPermission{Project: project, Subject: "alice", Connector: "github", ClientID: "repo-helper",
		ConnectionID: c1.ID, CreatedAt: base}
	must(t, s.AllowAgent(ctx, p))
	got, err := s.FindPermission(ctx, project, "alice", "github", "repo-helper")
	must(t, err)
	equal(t, "permission", got, p)

	// Allowing another account of the same connector adds a permission beside the first;
	// allowing one again changes nothing.
	p2 := p
	p2.ConnectionID, p2.CreatedAt = c2.ID, at(time.Minute)
	must(t, s.AllowAgent(ctx, p2))
	must(t, s.AllowAgent(ctx, p2))
	must(t, s.AllowAgent(ctx, p))
	got, err = s.FindPermission(ctx, project, "alice", "github", "repo-helper")
	must(t, err)
	equal(t, "the oldest of two", got, p)

	must(t, s.AllowAgent(ctx, store.AgentPermission{Project: project, Subject: "alice", Connector: "gitlab",
		ClientID: "repo-helper", ConnectionID: gl.ID, CreatedAt: base}))
	must(t, s.AllowAgent(ctx, store.AgentPermission{Project: project, Subject: "alice", Connector: "github",
		ClientID: "a-bot", ConnectionID: c1.ID, CreatedAt: base}))
	list, err := s.ListPermissions(ctx, project, "alice")
	must(t, err)
	var keys []string
	for _, p := range list {
		keys = append(keys, p.Connector+"/"+p.ClientID+"/"+p.ConnectionID)
	}
	equal(t, "permissions", keys, []string{"github/a-bot/" + c1.ID, "github/repo-helper/" + c1.ID,
		"github/repo-helper/" + c2.ID, "gitlab/repo-helper/" + gl.ID})

	// Withdrawing one account leaves the agent's other account and the other agent's.
	must(t, s.DisallowAgent(ctx, project, "alice", c1.ID, "repo-helper"))
	wantErr(t, s.DisallowAgent(ctx, project, "alice", c1.ID, "repo-helper"), store.ErrNotFound)
	wantErr(t, s.DisallowAgent(ctx, project, "mallory", c2.ID, "repo-helper"), store.ErrNotFound)
	got, err = s.FindPermission(ctx, project, "alice", "github", "repo-helper")
	must(t, err)
	equal(t, "the account left", got, p2)
	got, err = s.FindPermission(ctx, project, "alice", "github", "a-bot")
	must(t, err)
	equal(t, "the other agent's", got.ConnectionID, c1.ID)
	must(t, s.AllowAgent(ctx, p))

	must(t, s.DeletePermission(ctx, project, "alice", "github", "repo-helper"))
	_, err = s.FindPermission(ctx, project, "alice", "github", "repo-helper")
	wantErr(t, err, store.ErrNotFound)
	wantErr(t, s.DeletePermission(ctx, project, "alice", "github", "repo-helper"), store.ErrNotFound)
	_, err = s.FindPermission(ctx, project, "bob", "github", "a-bot")
	wantErr(t, err, store.ErrNotFound)
}

// A permission can only point at a connection of the same person and connector: an agent of
// Mallory's must never be allowed to use Alice's account.
func testPermissionOtherPerson(t *testing.T, s store.Store) {
	ctx := t.Context()
	alices := saveConnection(t, s, "alice", "github", "1001")
	err := s.AllowAgent(ctx, store.AgentPermission{Project: project, Subject: "mallory", Connector: "github",
		ClientID: "repo-helper", ConnectionID: alices.ID, CreatedAt: base})
	wantErr(t, err, store.ErrNotFound)
	err = s.AllowAgent(ctx, store.AgentPermission{Project: project, Subject: "alice", Connector: "gitlab",
		ClientID: "repo-helper", ConnectionID: alices.ID, CreatedAt: base})
	wantErr(t, err, store.ErrNotFound)
	err = s.AllowAgent(ctx, store.AgentPermission{Project: project, Subject: "alice", Connector: "github",
		ClientID: "repo-helper", ConnectionID: "missing", CreatedAt: base})
	wantErr(t, err, store.ErrNotFound)
	_, err = s.FindPermission(ctx, project, "mallory", "github", "repo-helper")
	wantErr(t, err, store.ErrNotFound)
}

// Token exchange decides from AgentAccess alone, so it must show the person's connections to
// the connector and the agent's permission as they are when it is read: re-pointed, withdrawn,
// or gone with a deleted connection, and a connection marked broken.
func testAgentAccess(t *testing.T, s store.Store) {
	ctx := t.Context()
	// Every answer is also read the way token exchange reads it, with a token issued for
	// subject to clientID (SubjectAccess), and must be the same.
	tokens := 0
	accessIn := func(proj, subject, connector, clientID string) store.AgentAccess {
		t.Helper()
		a, err := s.AgentAccess(ctx, proj, subject, connector, clientID)
		must(t, err)
		tokens++
		tok := store.Token{Hash: hash(id("subject-token", tokens)), Kind: store.AccessToken, Project: proj,
			ClientID: clientID, Subject: subject, IssuedAt: base, ExpiresAt: at(time.Hour), FamilyID: id("fam", tokens)}
		must(t, s.CreateTokens(ctx, tok))
		gotTok, b, err := s.SubjectAccess(ctx, tok.Hash, connector)
		must(t, err)
		equal(t, "the token read with its access", gotTok.ClientID+" "+gotTok.Subject+" "+gotTok.Project, clientID+" "+subject+" "+proj)
		equal(t, "SubjectAccess names nobody stored", b.Person, store.Person{})
		equal(t, "SubjectAccess as AgentAccess", b, a)
		return a
	}
	access := func(subject, connector, clientID string) store.AgentAccess {
		t.Helper()
		return accessIn(project, subject, connector, clientID)
	}
	if _, _, err := s.SubjectAccess(ctx, []byte("no such token"), "github"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("SubjectAccess of an unknown token: %v, want ErrNotFound", err)
	}
	ids := func(a store.AgentAccess) []string {
		var out []string
		for _, c := range a.Connections {
			out = append(out, c.ID)
		}
		return out
	}
	allow := func(clientID string, c store.Connection) {
		t.Helper()
		must(t, s.AllowAgent(ctx, store.AgentPermission{Project: project, Subject: c.Subject, Connector: c.Connector,
			ClientID: clientID, ConnectionID: c.ID, CreatedAt: base}))
	}

	equal(t, "nothing connected", access("alice", "github", "repo-helper"), store.AgentAccess{})

	// Saved newest first: the order is by creation, not by insertion.
	newer := newConnection("alice", "github", "2002")
	newer.CreatedAt = at(time.Hour)
	newer, err := s.SaveConnection(ctx, newer)
	must(t, err)
	older := saveConnection(t, s, "alice", "github", "1001")
	gitlab := saveConnection(t, s, "alice", "gitlab", "7")
	bobs := saveConnection(t, s, "bob", "github", "3003")
	elsewhere := newConnection("alice", "github", "4004")
	elsewhere.Project, elsewhere.ID = "team-b/main", "conn-elsewhere"
	_, err = s.SaveConnection(ctx, elsewhere)
	must(t, err)

	a := access("alice", "github", "repo-helper")
	equal(t, "alice's GitHub connections, oldest first", a.Connections, []store.Connection{older, newer})
	equal(t, "allowed before any permission", a.Allowed, "")
	if _, ok := a.Permitted(); ok {
		t.Fatal("Permitted with no permission")
	}

	allow("repo-helper", newer)
	allow("a-bot", older)
	allow("repo-helper", gitlab)
	allow("repo-helper", bobs)
	a = access("alice", "github", "repo-helper")
	equal(t, "allowed", a.Allowed, newer.ID)
	equal(t, "permits", a.Permits, []string{newer.ID})
	got, ok := a.Permitted()
	equal(t, "permitted", got, newer)
	equal(t, "permitted found", ok, true)
	equal(t, "another agent's permission", access("alice", "github", "a-bot").Allowed, older.ID)
	equal(t, "an agent without one", access("alice", "github", "someone-else"), store.AgentAccess{Connections: []store.Connection{older, newer}})
	equal(t, "the other connector", access("alice", "gitlab", "repo-helper"),
		store.AgentAccess{Connections: []store.Connection{gitlab}, Allowed: gitlab.ID, Permits: []string{gitlab.ID}})
	equal(t, "bob", ids(access("bob", "github", "repo-helper")), []string{bobs.ID})
	equal(t, "mallory", access("mallory", "github", "repo-helper"), store.AgentAccess{})
	equal(t, "alice in the other project", ids(accessIn("team-b/main", "alice", "github", "repo-helper")), []string{elsewhere.ID})

	// A second account allowed: without naming one the agent gets the default (the first
	// account saved), until the person makes the other one the default.
	allow("repo-helper", older)
	a = access("alice", "github", "repo-helper")
	equal(t, "both permitted", a.Permits, []string{older.ID, newer.ID})
	equal(t, "the default of the two", a.Allowed, newer.ID)
	must(t, s.SetDefaultConnection(ctx, project, "alice", older.ID))
	equal(t, "the new default", access("alice", "github", "repo-helper").Allowed, older.ID)
	older.Default, newer.Default = true, false
	// Then broken: it shows on the next read.
	_, err = s.UpdateConnection(ctx, project, older.ID, func(c store.Connection) (store.Connection, error) {
		c.Status, c.UpdatedAt = store.ConnectionRevokedUpstream, at(2*time.Hour)
		return c, nil
	})
	must(t, err)
	got, _ = access("alice", "github", "repo-helper").Permitted()
	equal(t, "revoked upstream", got.Status, store.ConnectionRevokedUpstream)

	// Withdrawn, every account of the connector at once.
	must(t, s.DeletePermission(ctx, project, "alice", "github", "repo-helper"))
	a = access("alice", "github", "repo-helper")
	equal(t, "withdrawn", a.Allowed+strings.Join(a.Permits, ","), "")

	// A deleted connection takes every permission that named it along, and deleting the
	// default makes no other connection the default.
	allow("repo-helper", older)
	must(t, s.DeleteConnection(ctx, project, older.ID))
	equal(t, "after delete", access("alice", "github", "repo-helper"), store.AgentAccess{Connections: []store.Connection{newer}})
	equal(t, "after delete, the other agent", access("alice", "github", "a-bot").Allowed, "")
}

// ---------------------------------------------------------------------------------------------
// Upstream callback state

func newCallback(name string) store.CallbackState {
	return store.CallbackState{StateHash: hash("state-" + name), Project: project, Subject: "alice", Connector: "github",
		Purpose: "connect", LinkID: "link-1", Verifier: []byte("sealed verifier"), KeyID: "k1",
		BindingHash: hash("binding-" + name), ExpiresAt: at(10 * time.Minute), CreatedAt: base}
}

func testCallbackLifecycle(t *testing.T, s store.Store) {
	ctx := t.Context()
	cb := newCallback("a")
	must(t, s.CreateCallbackState(ctx, cb))
	wantErr(t, s.CreateCallbackState(ctx, cb), store.ErrConflict)
	got, err := s.GetCallbackState(ctx, cb.StateHash, at(time.Minute))
	must(t, err)
	equal(t, "state", got, cb)
	_, err = s.GetCallbackState(ctx, cb.StateHash, cb.ExpiresAt)
	wantErr(t, err, store.ErrNotFound)

	// Rendering the confirmation page twice leaves only the second token.
	must(t, s.SetConfirmHash(ctx, cb.StateHash, hash("confirm-1"), at(time.Minute)))
	must(t, s.SetConfirmHash(ctx, cb.StateHash, hash("confirm-2"), at(2*time.Minute)))
	got, err = s.GetCallbackState(ctx, cb.StateHash, at(2*time.Minute))
	must(t, err)
	equal(t, "confirm hash", got.ConfirmHash, hash("confirm-2"))
	wantErr(t, s.SetConfirmHash(ctx, cb.StateHash, hash("late"), cb.ExpiresAt), store.ErrNotFound)
	wantErr(t, s.SetConfirmHash(ctx, hash("unknown"), hash("x"), base), store.ErrNotFound)

	// Consumed once.
	got, err = s.ConsumeCallbackState(ctx, cb.StateHash, at(3*time.Minute), nil)
	must(t, err)
	equal(t, "consumed", got.Subject, "alice")
	_, err = s.ConsumeCallbackState(ctx, cb.StateHash, at(3*time.Minute), nil)
	wantErr(t, err, store.ErrNotFound)
	_, err = s.GetCallbackState(ctx, cb.StateHash, at(3*time.Minute))
	wantErr(t, err, store.ErrNotFound)

	// An expired state cannot be consumed.
	late := newCallback("late")
	must(t, s.CreateCallbackState(ctx, late))
	_, err = s.ConsumeCallbackState(ctx, late.StateHash, late.ExpiresAt, nil)
	wantErr(t, err, store.ErrNotFound)
}

func testCallbackCheckKeepsRow(t *testing.T, s store.Store) {
	ctx := t.Context()
	cb := newCallback("a")
	must(t, s.CreateCallbackState(ctx, cb))
	wrongBrowser := errors.New("binding cookie does not match")
	got, err := s.ConsumeCallbackState(ctx, cb.StateHash, at(time.Minute), func(c store.CallbackState) error {
		equal(t, "check sees the row", c, cb)
		return wrongBrowser
	})
	wantErr(t, err, wrongBrowser)
	equal(t, "row returned with the check's error", got.StateHash, cb.StateHash)
	_, err = s.GetCallbackState(ctx, cb.StateHash, at(time.Minute))
	must(t, err)

	got, err = s.ConsumeCallbackState(ctx, cb.StateHash, at(time.Minute), func(store.CallbackState) error { return nil })
	must(t, err)
	equal(t, "consumed", got, cb)
}

// Signing out ends the person's attempts in that project only: other people's, and the same
// person's in another project, stay; expired rows go too.
func testCallbackEndForPerson(t *testing.T, s store.Store) {
	ctx := t.Context()
	mine1, mine2, expired := newCallback("a1"), newCallback("a2"), newCallback("a-old")
	expired.ExpiresAt = at(-time.Minute)
	other := newCallback("m")
	other.Subject = "mallory"
	elsewhere := newCallback("a-elsewhere")
	elsewhere.Project = "team-b/main"
	for _, c := range []store.CallbackState{mine1, mine2, expired, other, elsewhere} {
		must(t, s.CreateCallbackState(ctx, c))
	}
	n, err := s.EndCallbackStates(ctx, project, "alice")
	must(t, err)
	equal(t, "ended", n, int64(3))
	for _, c := range []store.CallbackState{mine1, mine2} {
		_, err := s.GetCallbackState(ctx, c.StateHash, at(time.Minute))
		wantErr(t, err, store.ErrNotFound)
		_, err = s.ConsumeCallbackState(ctx, c.StateHash, at(time.Minute), nil)
		wantErr(t, err, store.ErrNotFound)
	}
	for _, c := range []store.CallbackState{other, elsewhere} {
		got, err := s.GetCallbackState(ctx, c.StateHash, at(time.Minute))
		must(t, err)
		equal(t, "kept", got, c)
	}
	n, err = s.EndCallbackStates(ctx, project, "alice")
	must(t, err)
	equal(t, "ended again", n, int64(0))
	n, err = s.EndCallbackStates(ctx, project, "nobody")
	must(t, err)
	equal(t, "nobody's", n, int64(0))
}

func testCallbackConsumeConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	cb := newCallback("a")
	must(t, s.CreateCallbackState(ctx, cb))
	const n = 20
	errs := make([]error, n)
	parallel(n, func(i int) {
		_, errs[i] = s.ConsumeCallbackState(ctx, cb.StateHash, at(time.Minute), func(store.CallbackState) error { return nil })
	})
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
	equal(t, "successful consumptions", won, 1)
}

// testSubjectAccessPerson: token exchange reads the token's person with the token, as stored
// (source, source subject, end of access), so it can check the person against the project's
// sign-in without another round trip.
func testSubjectAccessPerson(t *testing.T, s store.Store) {
	ctx := t.Context()
	person(t, s, project, "alice", "alice@example.com", base)
	saveConnection(t, s, "alice", "github", "1001")
	saveConnection(t, s, "alice", "github", "1002")
	aliceTok, _ := issue(t, s, "alice-2", "c1", "alice")
	ghost, _ := issue(t, s, "ghost-1", "c1", "ghost")
	want, err := s.GetPerson(ctx, project, "alice")
	must(t, err)

	_, a, err := s.SubjectAccess(ctx, aliceTok.Hash, "github")
	must(t, err)
	equal(t, "the person with two connections", a.Person, want)
	equal(t, "connections", len(a.Connections), 2)
	_, a, err = s.SubjectAccess(ctx, aliceTok.Hash, "slack")
	must(t, err)
	equal(t, "the person without connections", a.Person, want)
	_, a, err = s.SubjectAccess(ctx, ghost.Hash, "github")
	must(t, err)
	equal(t, "a person who does not exist", a.Person, store.Person{})

	_, err = s.EndPersonAccess(ctx, project, "alice", at(time.Minute))
	must(t, err)
	_, a, err = s.SubjectAccess(ctx, aliceTok.Hash, "github")
	must(t, err)
	equal(t, "the end of access is read", a.Person.AccessEndedAt, at(time.Minute))
}

// testConnectionFinish: an upstream callback saves its connection only for a person who still
// exists, whose access was not ended after the callback began, and whom check accepts.
func testConnectionFinish(t *testing.T, s store.Store) {
	ctx := t.Context()
	since := at(time.Minute)
	accept := func(store.Person) error { return nil }
	conns := func(subject string) int {
		t.Helper()
		cs, err := s.ListConnections(ctx, project, subject)
		must(t, err)
		return len(cs)
	}

	_, err := s.FinishConnection(ctx, newConnection("ghost", "github", "1"), since, accept)
	wantErr(t, err, store.ErrNotFound)
	equal(t, "nothing saved for nobody", conns("ghost"), 0)

	person(t, s, project, "alice", "alice@example.com", base)
	errRemoved := errors.New("removed from the password file")
	_, err = s.FinishConnection(ctx, newConnection("alice", "github", "1"), since, func(p store.Person) error {
		if p.ID != "alice" || p.SourceSubject != "alice@example.com" {
			t.Errorf("check got %+v", p)
		}
		return errRemoved
	})
	wantErr(t, err, errRemoved)
	equal(t, "nothing saved when check refuses", conns("alice"), 0)

	c := newConnection("alice", "github", "1")
	c.Default = true
	got, err := s.FinishConnection(ctx, c, since, accept)
	must(t, err)
	equal(t, "saved", got, c)

	// Ended after the callback began: refused. Ended before it: the person signed in again
	// since, and the callback is theirs.
	_, err = s.EndSignIns(ctx, project, "alice", at(2*time.Minute))
	must(t, err)
	_, err = s.FinishConnection(ctx, newConnection("alice", "github", "2"), since, accept)
	wantErr(t, err, store.ErrAccessEnded)
	equal(t, "only the first connection", conns("alice"), 1)
	_, err = s.FinishConnection(ctx, newConnection("alice", "github", "2"), at(3*time.Minute), accept)
	must(t, err)
	equal(t, "saved after a new start", conns("alice"), 2)
}

// testConnectionFinishRacesEnd: an administrator ending a person's access while their callback
// finishes leaves no connection, whichever commits first.
func testConnectionFinishRacesEnd(t *testing.T, s store.Store) {
	ctx := t.Context()
	person(t, s, project, "alice", "alice@example.com", base)
	for i := range 10 {
		since := at(time.Duration(2*i) * time.Minute)
		end := at(time.Duration(2*i+1) * time.Minute)
		var wg sync.WaitGroup
		var finishErr, endErr error
		wg.Go(func() {
			_, finishErr = s.FinishConnection(ctx, newConnection("alice", "github", id("acct", i)), since, nil)
		})
		wg.Go(func() { _, endErr = s.EndPersonAccess(ctx, project, "alice", end) })
		wg.Wait()
		must(t, endErr)
		if finishErr != nil && !errors.Is(finishErr, store.ErrAccessEnded) {
			t.Fatalf("round %d: %v", i, finishErr)
		}
		cs, err := s.ListConnections(ctx, project, "alice")
		must(t, err)
		if len(cs) != 0 {
			t.Fatalf("round %d: a connection outlived the end of access: %+v", i, cs)
		}
	}
}

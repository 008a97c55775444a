package conformance

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

func init() {
	tests = append(tests,
		test{"Shared/StartTakenOnce", testSharedStartOnce},
		test{"Shared/StartTakenConcurrently", testSharedStartConcurrent},
		test{"Shared/StartExpires", testSharedStartExpires},
		test{"Shared/ConnectionReplaces", testSharedConnectionReplaces},
		test{"Shared/NoPersonIsShared", testSharedNoPerson},
	)
}

func newSharedStart(code string, expires time.Time) store.SharedStart {
	return store.SharedStart{CodeHash: hash(code), ID: "start-" + code, Project: project, Connector: "team/github",
		Actor: "kubernetes:ada", CreatedAt: base, ExpiresAt: expires}
}

// A start URL works once: the second take, by anyone, finds nothing.
func testSharedStartOnce(t *testing.T, s store.Store) {
	ctx := t.Context()
	x := newSharedStart("code-1", at(10*time.Minute))
	must(t, s.CreateSharedStart(ctx, x))
	wantErr(t, s.CreateSharedStart(ctx, x), store.ErrConflict)
	got, err := s.TakeSharedStart(ctx, hash("code-1"), at(time.Minute))
	must(t, err)
	equal(t, "taken", got, x)
	_, err = s.TakeSharedStart(ctx, hash("code-1"), at(time.Minute))
	wantErr(t, err, store.ErrNotFound)
	_, err = s.TakeSharedStart(ctx, hash("never"), at(time.Minute))
	wantErr(t, err, store.ErrNotFound)
}

// Two browsers opening the same URL at once: exactly one of them starts.
func testSharedStartConcurrent(t *testing.T, s store.Store) {
	must(t, s.CreateSharedStart(t.Context(), newSharedStart("race", at(10*time.Minute))))
	var won, lost atomic.Int64
	parallel(16, func(int) {
		_, err := s.TakeSharedStart(t.Context(), hash("race"), at(time.Minute))
		switch {
		case err == nil:
			won.Add(1)
		case errors.Is(err, store.ErrNotFound):
			lost.Add(1)
		default:
			t.Error(err)
		}
	})
	if won.Load() != 1 || lost.Load() != 15 {
		t.Fatalf("%d took the start, %d found nothing; want 1 and 15", won.Load(), lost.Load())
	}
}

// A start is good only before its expiry (at the instant itself it is over), is spent by the
// late attempt too, and the collector removes one nobody opened.
func testSharedStartExpires(t *testing.T, s store.Store) {
	ctx := t.Context()
	must(t, s.CreateSharedStart(ctx, newSharedStart("late", at(10*time.Minute))))
	_, err := s.TakeSharedStart(ctx, hash("late"), at(10*time.Minute))
	wantErr(t, err, store.ErrNotFound)
	_, err = s.TakeSharedStart(ctx, hash("late"), at(time.Minute))
	wantErr(t, err, store.ErrNotFound)

	must(t, s.CreateSharedStart(ctx, newSharedStart("forgotten", at(10*time.Minute))))
	must(t, s.CreateSharedStart(ctx, newSharedStart("fresh", at(time.Hour))))
	res, err := s.GarbageCollect(ctx, at(20*time.Minute))
	must(t, err)
	equal(t, "collected starts", res["shared_starts"], int64(1))
	_, err = s.TakeSharedStart(ctx, hash("fresh"), at(20*time.Minute))
	must(t, err)
}

// One shared connection per connector: the same account is updated in place, another account
// replaces it (and is handed back for revocation); a person's connections are never touched
// and never listed.
func testSharedConnectionReplaces(t *testing.T, s store.Store) {
	ctx := t.Context()
	subject := store.SharedSubject("team/github")
	alices := saveConnection(t, s, "alice", "team/github", "1001")
	first := newConnection(subject, "team/github", "svc-1")
	// The one shared account is its connector's default, as a person's only account is.
	first.Default = true
	got, replaced, err := s.SaveSharedConnection(ctx, first)
	must(t, err)
	equal(t, "saved", got, first)
	equal(t, "nothing replaced", len(replaced), 0)

	again := first
	again.ID, again.AccessToken, again.UpdatedAt = "conn-again", []byte("new access"), at(time.Hour)
	got, replaced, err = s.SaveSharedConnection(ctx, again)
	must(t, err)
	want := again
	want.ID = first.ID
	equal(t, "same account, in place", got, want)
	equal(t, "nothing replaced", len(replaced), 0)

	other := newConnection(subject, "team/github", "svc-2")
	other.Default = true
	got, replaced, err = s.SaveSharedConnection(ctx, other)
	must(t, err)
	equal(t, "other account", got, other)
	if len(replaced) != 1 || replaced[0].ID != first.ID || string(replaced[0].AccessToken) != "new access" {
		t.Fatalf("replaced %+v, want the first account with its tokens", replaced)
	}
	_, err = s.GetConnection(ctx, project, first.ID)
	wantErr(t, err, store.ErrNotFound)

	// Another connector's shared account, and another project's, are their own.
	gitlab := newConnection(store.SharedSubject("team/gitlab"), "team/gitlab", "svc-9")
	_, _, err = s.SaveSharedConnection(ctx, gitlab)
	must(t, err)
	elsewhere := newConnection(subject, "team/github", "svc-3")
	elsewhere.ID, elsewhere.Project = "conn-elsewhere", "team-b/main"
	_, _, err = s.SaveSharedConnection(ctx, elsewhere)
	must(t, err)

	list, err := s.ListSharedConnections(ctx, project)
	must(t, err)
	if len(list) != 2 || list[0].ID != other.ID || list[1].ID != gitlab.ID {
		t.Fatalf("shared connections %+v, want github's svc-2 then gitlab's", list)
	}
	mine, err := s.ListConnections(ctx, project, "alice")
	must(t, err)
	if len(mine) != 1 || mine[0].ID != alices.ID {
		t.Fatalf("alice's connections %+v", mine)
	}

	// A subject that is not the connector's shared subject is refused, saving nothing.
	bad := newConnection("alice", "team/github", "svc-4")
	if _, _, err := s.SaveSharedConnection(ctx, bad); err == nil {
		t.Fatal("a person's connection was saved as a shared one")
	}
	wrong := newConnection(store.SharedSubject("team/gitlab"), "team/github", "svc-5")
	if _, _, err := s.SaveSharedConnection(ctx, wrong); err == nil {
		t.Fatal("another connector's shared subject was accepted")
	}
	list, err = s.ListSharedConnections(ctx, project)
	must(t, err)
	equal(t, "still two", len(list), 2)
}

// No person can ever have a shared subject, so nothing done to people reaches a shared
// connection: ending alice's access leaves it, and a person with a shared id is refused.
func testSharedNoPerson(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, id := range []string{store.SharedSubject("team/github"), "shared:", "shared:x"} {
		_, err := s.UpsertPerson(ctx, store.Person{Project: project, ID: id, Source: "password", SourceSubject: id + "@x", CreatedAt: base})
		if err == nil {
			t.Errorf("a person with id %q was stored", id)
		}
		if _, err := s.GetPerson(ctx, project, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("person %q: %v, want not found", id, err)
		}
	}
	_, err := s.UpsertPerson(ctx, store.Person{Project: project, ID: "alice", Source: "password", SourceSubject: "alice@x", CreatedAt: base})
	must(t, err)
	shared, _, err := s.SaveSharedConnection(ctx, newConnection(store.SharedSubject("team/github"), "team/github", "svc-1"))
	must(t, err)
	saveConnection(t, s, "alice", "team/github", "1001")
	ended, err := s.EndPersonAccess(ctx, project, "alice", at(time.Hour))
	must(t, err)
	equal(t, "alice's connections ended", len(ended.Connections), 1)
	_, err = s.GetConnection(ctx, project, shared.ID)
	must(t, err)
}

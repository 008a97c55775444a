package conformance

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// Several accounts per person and connector (docs/several-accounts.md).

// defaults lists which of the person's connections to connector carry the default mark.
func defaults(t *testing.T, s store.Store, subject, connector string) []string {
	t.Helper()
	list, err := s.ListConnections(t.Context(), project, subject)
	must(t, err)
	var out []string
	for _, c := range list {
		if c.Connector == connector && c.Default {
			out = append(out, c.AccountID)
		}
	}
	return out
}

// The first account saved is the default; later ones, and saving the first again, leave the
// mark where it is; setting it moves it in one step; deleting the default picks no other.
func testConnectionDefault(t *testing.T, s store.Store) {
	ctx := t.Context()
	work := saveConnection(t, s, "alice", "github", "work")
	equal(t, "first is the default", work.Default, true)
	personal := saveConnection(t, s, "alice", "github", "personal")
	equal(t, "second is not", personal.Default, false)
	gl := saveConnection(t, s, "alice", "gitlab", "7")
	equal(t, "another connector has its own", gl.Default, true)
	bobs := saveConnection(t, s, "bob", "github", "bob")
	equal(t, "another person has their own", bobs.Default, true)

	// A reconnect of the second account does not take the mark, whatever it asks for.
	re := newConnection("alice", "github", "personal")
	re.Default = true
	re, err := s.SaveConnection(ctx, re)
	must(t, err)
	equal(t, "reconnected, not default", re.Default, false)
	equal(t, "defaults", defaults(t, s, "alice", "github"), []string{"work"})

	must(t, s.SetDefaultConnection(ctx, project, "alice", personal.ID))
	equal(t, "moved", defaults(t, s, "alice", "github"), []string{"personal"})
	equal(t, "gitlab untouched", defaults(t, s, "alice", "gitlab"), []string{"7"})
	equal(t, "bob untouched", defaults(t, s, "bob", "github"), []string{"bob"})
	// Again: nothing changes.
	must(t, s.SetDefaultConnection(ctx, project, "alice", personal.ID))
	equal(t, "set twice", defaults(t, s, "alice", "github"), []string{"personal"})

	// Someone else's connection, or one in another project, is not found and changes nothing.
	wantErr(t, s.SetDefaultConnection(ctx, project, "mallory", work.ID), store.ErrNotFound)
	wantErr(t, s.SetDefaultConnection(ctx, project, "alice", bobs.ID), store.ErrNotFound)
	wantErr(t, s.SetDefaultConnection(ctx, "team-b/main", "alice", work.ID), store.ErrNotFound)
	wantErr(t, s.SetDefaultConnection(ctx, project, "alice", "missing"), store.ErrNotFound)
	equal(t, "after refusals", defaults(t, s, "alice", "github"), []string{"personal"})
	equal(t, "bob after refusals", defaults(t, s, "bob", "github"), []string{"bob"})

	// A token refresh keeps the mark.
	got, err := s.UpdateConnection(ctx, project, personal.ID, func(c store.Connection) (store.Connection, error) {
		c.AccessToken, c.Default, c.UpdatedAt = []byte("refreshed"), false, at(time.Hour)
		return c, nil
	})
	must(t, err)
	equal(t, "update returns the mark", got.Default, true)
	equal(t, "update keeps the mark", defaults(t, s, "alice", "github"), []string{"personal"})

	// Deleting the default leaves the person without one until they choose.
	must(t, s.DeleteConnection(ctx, project, personal.ID))
	equal(t, "no silent replacement", defaults(t, s, "alice", "github"), []string(nil))
	// A further account connected then is not made the default behind the person's back
	// either: they have an account, and chose none.
	third := saveConnection(t, s, "alice", "github", "third")
	equal(t, "third is not the default", third.Default, false)
	must(t, s.SetDefaultConnection(ctx, project, "alice", work.ID))
	equal(t, "chosen again", defaults(t, s, "alice", "github"), []string{"work"})
}

// Many callers moving the mark at once end with exactly one default.
func testConnectionDefaultConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	const n = 8
	ids := make([]string, n)
	for i := range n {
		ids[i] = saveConnection(t, s, "alice", "github", strconv.Itoa(i)).ID
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = s.SetDefaultConnection(ctx, project, "alice", ids[i]) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("caller %d: %v", i, err)
		}
	}
	if got := defaults(t, s, "alice", "github"); len(got) != 1 {
		t.Fatalf("defaults after concurrent moves = %v, want exactly one", got)
	}
}

// A link records the account it was made for, and asking for another account replaces it.
func testLinkAccount(t *testing.T, s store.Store) {
	ctx := t.Context()
	l := newLink("code1", store.LinkAllow, base)
	l.Account = "alice-work"
	got, created, err := s.OpenLink(ctx, l, base)
	must(t, err)
	equal(t, "created", created, true)
	equal(t, "account stored", got.Account, "alice-work")
	got, err = s.GetLinkByCode(ctx, hash("code1"), base)
	must(t, err)
	equal(t, "account read", got.Account, "alice-work")

	// The same account again: the same link.
	again := newLink("code2", store.LinkAllow, at(time.Minute))
	again.Account = "alice-work"
	got, created, err = s.OpenLink(ctx, again, at(time.Minute))
	must(t, err)
	equal(t, "same account, same link", got.ID+" "+strconv.FormatBool(created), "id-code1 false")

	// Another account: a new link, and the old code stops working.
	other := newLink("code3", store.LinkAllow, at(time.Minute))
	other.Account = "alice-personal"
	got, created, err = s.OpenLink(ctx, other, at(time.Minute))
	must(t, err)
	equal(t, "another account, another link", got.ID+" "+strconv.FormatBool(created), "id-code3 true")
	_, err = s.GetLinkByCode(ctx, hash("code1"), at(time.Minute))
	wantErr(t, err, store.ErrNotFound)

	// No account named is an account of its own.
	none := newLink("code4", store.LinkAllow, at(2*time.Minute))
	got, created, err = s.OpenLink(ctx, none, at(2*time.Minute))
	must(t, err)
	equal(t, "no account, another link", got.ID+" "+strconv.FormatBool(created)+" "+got.Account, "id-code4 true ")
	byID, err := s.GetLink(ctx, "id-code3")
	must(t, err)
	equal(t, "replaced keeps its account", byID.Account+" "+string(byID.State), "alice-personal replaced")
}

// Several first accounts of one person at one connector saved at once: every one is saved,
// and exactly one is the default.
func testConnectionFirstConcurrent(t *testing.T, s store.Store) {
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = s.SaveConnection(t.Context(), newConnection("alice", "github", "first-"+strconv.Itoa(i)))
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("caller %d: %v", i, err)
		}
	}
	list, err := s.ListConnections(t.Context(), project, "alice")
	must(t, err)
	equal(t, "saved", len(list), n)
	if got := defaults(t, s, "alice", "github"); len(got) != 1 {
		t.Fatalf("defaults after concurrent first connections = %v, want exactly one", got)
	}
}

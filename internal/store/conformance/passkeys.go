package conformance

import (
	"bytes"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

func init() {
	tests = append(tests, test{"Admin/PasskeysPage", testAdminPasskeysPage})
}

func newPasskey(id, subject string, created time.Time) store.Passkey {
	return store.Passkey{
		Project: project, CredentialID: []byte("cred-" + id), Subject: subject, Name: "Passkey " + id,
		PublicKey: []byte("cose-" + id), SignCount: 5, Transports: []string{"internal", "hybrid"},
		AAGUID: make([]byte, 16), AttestationFormat: "none", UserVerified: true, BackupEligible: true,
		CreatedAt: created,
	}
}

func newCeremony(id string, expires time.Time) store.PasskeyCeremony {
	return store.PasskeyCeremony{IDHash: hash("ceremony-" + id), Project: project, Kind: "sign-in",
		Data: []byte(`{"challenge":"` + id + `"}`), Expires: expires}
}

func testPasskeyAdd(t *testing.T, s store.Store) {
	ctx := t.Context()
	k := newPasskey("1", "alice", base)
	must(t, s.AddPasskey(ctx, k))
	// The same credential again, even for someone else, is refused; in another project it is
	// another row.
	other := newPasskey("1", "bob", base)
	wantErr(t, s.AddPasskey(ctx, other), store.ErrConflict)
	other.Project = "team-b/main"
	must(t, s.AddPasskey(ctx, other))
	got, err := s.GetPasskey(ctx, project, k.CredentialID)
	must(t, err)
	equal(t, "passkey", got, k)
}

func testPasskeyGet(t *testing.T, s store.Store) {
	ctx := t.Context()
	k := newPasskey("1", "alice", base)
	k.Transports, k.AAGUID, k.BackupEligible, k.UserVerified = nil, nil, false, false
	must(t, s.AddPasskey(ctx, k))
	got, err := s.GetPasskey(ctx, project, k.CredentialID)
	must(t, err)
	equal(t, "passkey", got, k)
	_, err = s.GetPasskey(ctx, "team-b/main", k.CredentialID)
	wantErr(t, err, store.ErrNotFound)
	_, err = s.GetPasskey(ctx, project, []byte("cred-2"))
	wantErr(t, err, store.ErrNotFound)
}

func testPasskeyList(t *testing.T, s store.Store) {
	ctx := t.Context()
	must(t, s.AddPasskey(ctx, newPasskey("b", "alice", at(time.Minute))))
	must(t, s.AddPasskey(ctx, newPasskey("a", "alice", base)))
	must(t, s.AddPasskey(ctx, newPasskey("c", "bob", base)))
	got, err := s.ListPasskeys(ctx, project, "alice")
	must(t, err)
	equal(t, "alice's passkeys", got, []store.Passkey{newPasskey("a", "alice", base), newPasskey("b", "alice", at(time.Minute))})
	got, err = s.ListPasskeys(ctx, project, "carol")
	must(t, err)
	equal(t, "carol's passkeys", len(got), 0)
}

func testPasskeyDelete(t *testing.T, s store.Store) {
	ctx := t.Context()
	k := newPasskey("1", "alice", base)
	must(t, s.AddPasskey(ctx, k))
	// Only its own person removes a passkey.
	wantErr(t, s.DeletePasskey(ctx, project, "bob", k.CredentialID), store.ErrNotFound)
	must(t, s.DeletePasskey(ctx, project, "alice", k.CredentialID))
	wantErr(t, s.DeletePasskey(ctx, project, "alice", k.CredentialID), store.ErrNotFound)
	_, err := s.GetPasskey(ctx, project, k.CredentialID)
	wantErr(t, err, store.ErrNotFound)
}

func testPasskeyUse(t *testing.T, s store.Store) {
	ctx := t.Context()
	k := newPasskey("1", "alice", base)
	must(t, s.AddPasskey(ctx, k))
	must(t, s.UsePasskey(ctx, project, k.CredentialID, 6, true, at(time.Minute)))
	got, err := s.GetPasskey(ctx, project, k.CredentialID)
	must(t, err)
	equal(t, "sign count", got.SignCount, uint32(6))
	equal(t, "backed up", got.BackupState, true)
	equal(t, "last used", got.LastUsedAt, at(time.Minute))
	// The same count again, or a lower one: a clone. Nothing changes.
	for _, n := range []uint32{6, 3, 0} {
		wantErr(t, s.UsePasskey(ctx, project, k.CredentialID, n, false, at(time.Hour)), store.ErrConflict)
	}
	got, err = s.GetPasskey(ctx, project, k.CredentialID)
	must(t, err)
	equal(t, "after clones", [2]any{got.SignCount, got.LastUsedAt}, [2]any{uint32(6), at(time.Minute)})
	wantErr(t, s.UsePasskey(ctx, "team-b/main", k.CredentialID, 9, false, base), store.ErrNotFound)

	// An authenticator that keeps no counter reports zero each time.
	z := newPasskey("2", "alice", base)
	z.SignCount = 0
	must(t, s.AddPasskey(ctx, z))
	must(t, s.UsePasskey(ctx, project, z.CredentialID, 0, false, at(time.Minute)))
	must(t, s.UsePasskey(ctx, project, z.CredentialID, 0, false, at(2*time.Minute)))
}

// Two sign-ins with the same counter value on two replicas: exactly one passes.
func testPasskeyUseConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	k := newPasskey("1", "alice", base)
	must(t, s.AddPasskey(ctx, k))
	var ok, refused atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			err := s.UsePasskey(ctx, project, k.CredentialID, 7, false, at(time.Minute))
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, store.ErrConflict):
				refused.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	equal(t, "passed, refused", [2]int32{ok.Load(), refused.Load()}, [2]int32{1, 7})
}

func testPasskeyCreateCeremony(t *testing.T, s store.Store) {
	ctx := t.Context()
	c := newCeremony("1", at(time.Minute))
	c.Kind, c.Subject = "enrol", "alice"
	must(t, s.CreatePasskeyCeremony(ctx, c))
	wantErr(t, s.CreatePasskeyCeremony(ctx, c), store.ErrConflict)
	got, err := s.TakePasskeyCeremony(ctx, c.IDHash, base)
	must(t, err)
	equal(t, "ceremony", got, c)
}

func testPasskeyTakeCeremony(t *testing.T, s store.Store) {
	ctx := t.Context()
	c := newCeremony("1", at(time.Minute))
	must(t, s.CreatePasskeyCeremony(ctx, c))
	_, err := s.TakePasskeyCeremony(ctx, c.IDHash, base)
	must(t, err)
	// Used once.
	_, err = s.TakePasskeyCeremony(ctx, c.IDHash, base)
	wantErr(t, err, store.ErrNotFound)
	// Expired: gone, and not returned.
	old := newCeremony("2", at(time.Minute))
	must(t, s.CreatePasskeyCeremony(ctx, old))
	_, err = s.TakePasskeyCeremony(ctx, old.IDHash, at(time.Minute))
	wantErr(t, err, store.ErrNotFound)
	_, err = s.TakePasskeyCeremony(ctx, old.IDHash, base)
	wantErr(t, err, store.ErrNotFound)
}

func testPasskeyTakeCeremonyConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	c := newCeremony("1", at(time.Minute))
	must(t, s.CreatePasskeyCeremony(ctx, c))
	var got atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			_, err := s.TakePasskeyCeremony(ctx, c.IDHash, base)
			switch {
			case err == nil:
				got.Add(1)
			case !errors.Is(err, store.ErrNotFound):
				t.Error(err)
			}
		})
	}
	wg.Wait()
	equal(t, "takes", got.Load(), int32(1))
}

// The admin listing walks every passkey of the projects asked for, in credential ID order as
// bytes (IDs whose base64url text sorts otherwise included), each once, and narrows to one
// person.
func testAdminPasskeysPage(t *testing.T, s store.Store) {
	ctx := t.Context()
	ids := [][]byte{{0xff, 0x01}, {0x00}, {0xfb}, []byte("cred-a"), {0x3e}, {0x3f, 0xff}, []byte("cred-b")}
	for i, id := range ids {
		k := newPasskey(string(rune('a'+i)), []string{"alice", "bob"}[i%2], base)
		k.CredentialID = id
		must(t, s.AddPasskey(ctx, k))
	}
	other := newPasskey("x", "alice", base)
	other.Project = "team-b/main"
	must(t, s.AddPasskey(ctx, other))

	got, n := pages(t, 2, func(after []string, limit int) ([]store.Passkey, []string, error) {
		return s.ListPasskeysPage(ctx, store.AdminQuery{Projects: []string{project}, After: after, Limit: limit})
	})
	var gotIDs [][]byte
	for _, k := range got {
		if k.Project != project {
			t.Fatalf("listed a passkey of %s", k.Project)
		}
		gotIDs = append(gotIDs, k.CredentialID)
	}
	want := slices.Clone(ids)
	slices.SortFunc(want, bytes.Compare)
	equal(t, "credential IDs, in order", gotIDs, want)
	equal(t, "pages", n, 4)
	equal(t, "a row as stored", got[0].Name, newPasskey("b", "bob", base).Name)

	bobs, _ := pages(t, 10, func(after []string, limit int) ([]store.Passkey, []string, error) {
		return s.ListPasskeysPage(ctx, store.AdminQuery{Projects: []string{project}, Subject: "bob", After: after, Limit: limit})
	})
	equal(t, "bob's passkeys", len(bobs), 3)
	for _, k := range bobs {
		equal(t, "subject", k.Subject, "bob")
	}
	both, _ := pages(t, 100, func(after []string, limit int) ([]store.Passkey, []string, error) {
		return s.ListPasskeysPage(ctx, store.AdminQuery{Projects: []string{project, "team-b/main"}, After: after, Limit: limit})
	})
	equal(t, "two projects", len(both), len(ids)+1)
	none, next, err := s.ListPasskeysPage(ctx, store.AdminQuery{})
	must(t, err)
	equal(t, "no project", [2]int{len(none), len(next)}, [2]int{0, 0})
	_, _, err = s.ListPasskeysPage(ctx, store.AdminQuery{Projects: []string{project}, After: []string{project, "not base64!"}})
	if err == nil {
		t.Fatal("a page key that is not base64url was accepted")
	}
}

package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
)

// A backup taken while a server writes is a database of its own: every token committed before
// it is there, it opens without the original, it never overwrites a file, and a wrong path is
// refused instead of backed up as an empty database.
func TestBackupSQLite(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := filepath.Join(dir, "latchkey.db")
	s, err := Open(ctx, "sqlite:"+src)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Unix(1_800_000_000, 0)
	token := func(i int) store.Token {
		return store.Token{Hash: secret.Hash(fmt.Sprint("tok-", i)), Kind: store.AccessToken, Project: "ns/p",
			ClientID: "c", Subject: "alice", FamilyID: fmt.Sprint("f", i), IssuedAt: now, ExpiresAt: now.Add(time.Hour), AuthTime: now}
	}
	const before = 200
	for i := range before {
		if err := s.CreateTokens(ctx, token(i)); err != nil {
			t.Fatal(err)
		}
	}

	// The server keeps writing during the backup.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := before; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := s.CreateTokens(ctx, token(i)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	dst := filepath.Join(dir, "backup.db")
	migration, err := BackupSQLite(ctx, src, dst)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	ms, _ := migrations("sqlite")
	if want := ms[len(ms)-1].version; migration != want {
		t.Errorf("the backup reports migration %d, want %d", migration, want)
	}
	if left, _ := filepath.Glob(dst + "*-*"); len(left) != 0 {
		t.Errorf("files left beside the backup: %v", left)
	}

	// The copy alone: the original is gone.
	s.Close()
	restored := filepath.Join(t.TempDir(), "restored.db")
	b, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(restored, b, 0o600); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(dir)
	r, err := Open(ctx, "sqlite:"+restored)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := range before {
		if _, err := r.GetToken(ctx, token(i).Hash); err != nil {
			t.Fatalf("token %d, stored before the backup, is not in it: %v", i, err)
		}
	}

	// Refusals.
	other := t.TempDir()
	notLatchkey := filepath.Join(other, "other.db")
	if err := os.WriteFile(notLatchkey, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	exists := filepath.Join(other, "exists.db")
	if err := os.WriteFile(exists, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, src, dst, want string }{
		{"missing source", filepath.Join(other, "missing.db"), filepath.Join(other, "a.db"), "no such file"},
		{"not a Latchkey database", notLatchkey, filepath.Join(other, "b.db"), "not a Latchkey database"},
		{"destination exists", restored, exists, "never overwrites"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := BackupSQLite(ctx, c.src, c.dst)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error saying %q", err, c.want)
			}
			if _, statErr := os.Stat(filepath.Join(other, "missing.db")); !errors.Is(statErr, os.ErrNotExist) {
				t.Error("the backup created the missing source")
			}
		})
	}
	if b, _ := os.ReadFile(exists); string(b) != "keep me" {
		t.Error("the backup overwrote a file")
	}
}

package sqlstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// Under sustained writes with readers beside them, the WAL file stays bounded: the checkpointer
// restarts it once it reaches its restart length. Without the restart, the background
// checkpoint never catches the writer and the file grows for as long as the writes go on.
func TestWALStaysBoundedUnderSustainedWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("writes for a few seconds")
	}
	const restartFrames = 256 // 2 MiB of 8 KiB pages
	s, path := openWAL(t, sqliteOptions{checkpointEvery: 20 * time.Millisecond, walRestartFrames: restartFrames})
	ctx := t.Context()

	// Writers and readers for a fixed amount of work, sampling the WAL file's size.
	const writers, readers, tokensEach = 8, 4, 500
	var (
		next    atomic.Int64
		largest atomic.Int64
		wg      sync.WaitGroup
	)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > largest.Load() {
				largest.Store(fi.Size())
			}
		}
	}()
	for range readers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				a, _ := benchPair("wal", max(0, next.Load()-1))
				if _, err := s.GetToken(ctx, a.Hash); err != nil && !errors.Is(err, store.ErrNotFound) {
					t.Error(err)
					return
				}
			}
		})
	}
	var writing sync.WaitGroup
	for range writers {
		writing.Go(func() {
			for range tokensEach {
				a, _ := benchPair("wal", next.Add(1)-1)
				if err := s.CreateTokens(context.Background(), a); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	writing.Wait()
	close(stop)
	wg.Wait()

	written := int64(writers * tokensEach)
	// A restart waits for a tick and for the copy before it, and the writers go on meanwhile:
	// the file may reach the restart length plus what was written during a few checkpoints
	// (on a loaded machine a checkpoint's fsync takes up to a few hundred milliseconds), never
	// the size of everything written: about 5 frames a token, 160 MB here, of which the file
	// reached 80 MB without the restart.
	limit := int64(16 * restartFrames * 8192)
	t.Logf("%d tokens written; largest WAL file %d KiB (limit %d KiB)", written, largest.Load()>>10, limit>>10)
	if largest.Load() > limit {
		t.Fatalf("the WAL file grew to %d KiB while %d tokens were written: it was not restarted (limit %d KiB)",
			largest.Load()>>10, written, limit>>10)
	}
}

// A reader that stays on old frames (a backup, a long listing) holds a restart back, and every
// writer waits while the restart waits for it: the checkpointer tries once, then leaves the
// WAL alone for a while instead of stalling writers at every tick, longer each time the same
// reader holds it back. Once the reader is gone, the restart goes through, the WAL starts over
// and the next pause is short again.
func TestWALRestartBacksOffWhileAReaderHoldsOldFrames(t *testing.T) {
	const restartFrames = 64
	s, _ := openWAL(t, sqliteOptions{checkpointEvery: 100 * time.Millisecond, walRestartFrames: restartFrames})
	ctx := t.Context()
	// The test is the checkpointer: it calls checkpoint itself and moves the clock of pauses.
	close(s.ckStop)
	<-s.ckDone
	s.ckStop = nil
	write := func(from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			if err := s.CreateTokens(ctx, tokenN(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(0, 40)

	// The reader's snapshot includes frames nobody has copied yet, so it reads from the WAL.
	reader, err := s.r.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if _, err := reader.ExecContext(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := reader.QueryRowContext(ctx, `SELECT count(*) FROM tokens`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	write(40, 40)

	for range 5 {
		s.checkpoint()
	}
	if got := s.restartsTried.Load(); got != 1 {
		t.Fatalf("%d restarts tried while the reader held old frames, want 1 and then a pause", got)
	}
	first := s.restartPause
	if first <= 0 || !s.restartAfter.After(time.Now()) {
		t.Fatalf("no pause after a restart the reader held back (pause %v, until %v)", first, s.restartAfter)
	}
	s.restartAfter = time.Time{} // the pause is over; the reader is still there
	s.checkpoint()
	if got := s.restartsTried.Load(); got != 2 {
		t.Fatalf("%d restarts tried after the pause, want 2", got)
	}
	if s.restartPause <= first {
		t.Fatalf("pause %v after a second restart held back by the same reader, want longer than %v", s.restartPause, first)
	}

	if _, err := reader.ExecContext(ctx, `COMMIT`); err != nil {
		t.Fatal(err)
	}
	s.restartAfter = time.Time{} // the pause is over
	s.checkpoint()
	if s.restartPause != 0 {
		t.Fatalf("pause %v after a restart that went through, want none", s.restartPause)
	}
	write(80, 1)
	var busy, frames, copied int64
	if err := s.ck.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &copied); err != nil {
		t.Fatal(err)
	}
	if frames >= restartFrames {
		t.Fatalf("the WAL holds %d frames after the reader left and a restart: it did not start over", frames)
	}
}

// openWAL opens and starts a SQLite store in a fresh directory with checkpoint settings of the
// test's own; it returns the database file's path.
func openWAL(t *testing.T, o sqliteOptions) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "wal.db")
	s, err := openSQLite(path, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s, path
}

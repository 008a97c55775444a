package sqlstore

import (
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// openGrouped opens a SQLite store with group commit (the default).
func openGrouped(t *testing.T) *Store {
	t.Helper()
	s, err := openSQLite(filepath.Join(t.TempDir(), "g.db"), sqliteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s.group == nil {
		t.Fatal("SQLite store without group commit")
	}
	return s
}

// holdGate takes the write gate, so callers queue behind it; release lets one of them lead a
// group of everything queued.
func holdGate(s *Store) (release func()) {
	s.gate <- struct{}{}
	return func() { <-s.gate }
}

// waitQueued waits until n callers are queued (they queue within microseconds of starting).
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	for start := time.Now(); ; runtime.Gosched() {
		s.group.mu.Lock()
		got := len(s.group.queue)
		s.group.mu.Unlock()
		if got >= n {
			return
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%d callers queued, want %d", got, n)
		}
	}
}

func tokenN(i int) store.Token {
	a, _ := benchPair("g", int64(i))
	return a
}

// One group, several callers: the one whose insert collides gets ErrConflict and stores
// nothing; the others' tokens are all stored, and committed before anyone is answered.
func TestGroupCommitIsolatesFailures(t *testing.T) {
	s := openGrouped(t)
	ctx := t.Context()
	if err := s.CreateTokens(ctx, tokenN(0)); err != nil {
		t.Fatal(err)
	}
	release := holdGate(s)
	const callers = 8
	errs := make(chan error, callers)
	results := make([]error, callers)
	for i := range callers {
		go func() {
			// Caller 3 stores a new token and one that exists: all of it must be undone.
			toks := []store.Token{tokenN(100 + i)}
			if i == 3 {
				toks = append(toks, tokenN(0))
			}
			err := s.CreateTokens(ctx, toks...)
			results[i] = err
			errs <- err
		}()
	}
	waitQueued(t, s, callers)
	groups := s.group.groups.Load()
	release()
	for range callers {
		<-errs
	}
	if got := s.group.groups.Load() - groups; got != 1 {
		t.Errorf("%d groups ran, want 1", got)
	}
	for i, err := range results {
		_, gerr := s.GetToken(ctx, tokenN(100+i).Hash)
		switch {
		case i == 3:
			if !errors.Is(err, store.ErrConflict) {
				t.Errorf("caller 3: %v, want ErrConflict", err)
			}
			if !errors.Is(gerr, store.ErrNotFound) {
				t.Errorf("caller 3's new token was stored although its call failed: %v", gerr)
			}
		case err != nil || gerr != nil:
			t.Errorf("caller %d: %v, read back: %v", i, err, gerr)
		}
	}
}

// A transaction callback that fails after writing leaves nothing behind, in a group as alone,
// and its neighbours in the group are not disturbed.
func TestGroupCommitRollsBackFailedTransaction(t *testing.T) {
	s := openGrouped(t)
	ctx := t.Context()
	boom := errors.New("boom")
	release := holdGate(s)
	done := make(chan error, 3)
	go func() {
		done <- s.tx(ctx, func(x q) error {
			if err := insertTokens(ctx, x, []store.Token{tokenN(1)}); err != nil {
				return err
			}
			return boom
		})
	}()
	for _, i := range []int{2, 3} {
		go func() { done <- s.CreateTokens(ctx, tokenN(i)) }()
	}
	waitQueued(t, s, 3)
	release()
	var failed int
	for range 3 {
		if err := <-done; errors.Is(err, boom) {
			failed++
		} else if err != nil {
			t.Error(err)
		}
	}
	if failed != 1 {
		t.Errorf("%d callers saw the callback's error, want 1", failed)
	}
	if _, err := s.GetToken(ctx, tokenN(1).Hash); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the failed transaction's token: %v", err)
	}
	for _, i := range []int{2, 3} {
		if _, err := s.GetToken(ctx, tokenN(i).Hash); err != nil {
			t.Errorf("token %d: %v", i, err)
		}
	}
}

// A caller that gives up while queued is answered at once and its work never runs.
func TestGroupCommitAbandoned(t *testing.T) {
	s := openGrouped(t)
	release := holdGate(s)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.CreateTokens(ctx, tokenN(1)) }()
	waitQueued(t, s, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("abandoned caller: %v", err)
	}
	release()
	// The next writer leads and skips the abandoned work.
	if err := s.CreateTokens(t.Context(), tokenN(2)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetToken(t.Context(), tokenN(1).Hash); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("abandoned work ran: %v", err)
	}
}

// A callback that panics does so in its own caller's goroutine; the leader and the rest of
// the group are unaffected.
func TestGroupCommitPanicStaysWithItsCaller(t *testing.T) {
	s := openGrouped(t)
	ctx := t.Context()
	release := holdGate(s)
	const callers = 4
	type outcome struct {
		i        int
		err      error
		panicked bool
	}
	out := make(chan outcome, callers+1)
	go func() {
		defer func() { out <- outcome{i: -1, panicked: recover() != nil} }()
		s.tx(ctx, func(x q) error {
			if err := insertTokens(ctx, x, []store.Token{tokenN(50)}); err != nil {
				return err
			}
			panic("callback bug")
		})
	}()
	for i := range callers {
		go func() { out <- outcome{i: i, err: s.CreateTokens(ctx, tokenN(i))} }()
	}
	waitQueued(t, s, callers+1)
	release()
	for range callers + 1 {
		o := <-out
		switch {
		case o.i < 0 && !o.panicked:
			t.Error("the panicking callback's own caller did not panic")
		case o.i >= 0 && o.err != nil:
			t.Errorf("caller %d: %v", o.i, o.err)
		}
	}
	for i := range callers {
		if _, err := s.GetToken(ctx, tokenN(i).Hash); err != nil {
			t.Errorf("token %d: %v", i, err)
		}
	}
	if _, err := s.GetToken(ctx, tokenN(50).Hash); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the panicking transaction's token: %v", err)
	}
	// The write connection is usable afterwards.
	if err := s.CreateTokens(ctx, tokenN(99)); err != nil {
		t.Fatal(err)
	}
}

// Many concurrent writers: every result is the caller's own.
func TestGroupCommitConcurrent(t *testing.T) {
	s := openGrouped(t)
	ctx := t.Context()
	const callers, each = 16, 50
	errs := make(chan error, callers)
	for w := range callers {
		go func() {
			for i := range each {
				n := w*each + i
				toks := []store.Token{tokenN(1000 + n)}
				err := s.CreateTokens(ctx, toks...)
				if err != nil {
					errs <- errors.New("caller " + strconv.Itoa(w) + ": " + err.Error())
					return
				}
				// Every fifth caller presents a duplicate: ErrConflict, nothing more.
				if n%5 == 0 {
					if err := s.CreateTokens(ctx, tokenN(1000+n)); !errors.Is(err, store.ErrConflict) {
						errs <- errors.New("duplicate: " + errString(err))
						return
					}
				}
			}
			errs <- nil
		}()
	}
	for range callers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	for n := range callers * each {
		if _, err := s.GetToken(ctx, tokenN(1000+n).Hash); err != nil {
			t.Fatalf("token %d: %v", n, err)
		}
	}
	t.Logf("%d calls in %d groups", s.group.calls.Load(), s.group.groups.Load())
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// Writers that are ready when a leader takes the gate join its group, even on one processor
// where they have not yet run: the leader yields before it takes the queue.
//
// The yielded leader waits on the scheduler's global run queue, which the scheduler reads
// ahead of its local one every 61st time it schedules, so now and then the leader resumes
// before every writer has queued and a round takes two groups. The test therefore counts over
// many rounds: with the yield a round of eight takes one group and seldom two; without it every
// writer commits by itself.
func TestGroupGathersReadyWriters(t *testing.T) {
	s := openGrouped(t)
	ctx := t.Context()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const writers, rounds = 8, 25
	groups := s.group.groups.Load()
	errs := make(chan error, writers)
	for r := range rounds {
		for i := range writers {
			go func() { errs <- s.CreateTokens(ctx, tokenN(5000+r*writers+i)) }()
		}
		for range writers {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	got := s.group.groups.Load() - groups
	t.Logf("%d rounds of %d writers committed in %d groups", rounds, writers, got)
	if got > 2*rounds {
		t.Errorf("%d rounds of %d writers ready at once committed in %d groups, want at most %d", rounds, writers, got, 2*rounds)
	}
}

package faults_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
	"latchkey.dev/latchkey/test/stack"
)

// sigkillChildEnv carries the SQLite DSN to the server process TestExchangeRecordsSurviveSIGKILL
// starts (this test binary again, running TestSIGKILLServer).
const sigkillChildEnv = "LATCHKEY_TEST_SIGKILL_DSN"

// An agent that was handed a person's upstream token leaves a token.exchanged record, even when
// the server is killed the moment after it answered (docs/decisions/0054): the server is a
// separate process on SQLite, exchanges run from many clients at once, the process gets
// SIGKILL in the middle of them, and the database it leaves behind is opened again. Every
// exchange a client received a token from must have its record; a record whose answer the
// kill cut off is allowed (the record is written before the answer, not with it).
func TestExchangeRecordsSurviveSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes and kills them under load")
	}
	const rounds, workers = 4, 24
	for round := range rounds {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			dsn := "sqlite:" + filepath.Join(t.TempDir(), "latchkey.db")
			cmd := exec.Command(os.Args[0], "-test.run=^TestSIGKILLServer$", "-test.count=1")
			cmd.Env = append(os.Environ(), sigkillChildEnv+"="+dsn)
			cmd.Stderr = os.Stderr
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			defer stdin.Close()
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			killed := false
			defer func() {
				if !killed {
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
				}
			}()
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil {
				t.Fatalf("the server process did not start: %v", err)
			}
			issuer, list, ok := strings.Cut(strings.TrimSpace(line), " ")
			if !ok {
				t.Fatalf("the server process said %q", line)
			}
			subjects := strings.Split(list, ",")
			s := &stack.Stack{T: t, Issuer: issuer}

			var answered, refused, failed atomic.Int64
			// Kill once the load is well under way, at a moment that differs between rounds.
			killAt := int64(200 + 150*round)
			underWay := make(chan struct{})
			ctx, stop := context.WithCancel(t.Context())
			defer stop()
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for i := 0; ctx.Err() == nil; i++ {
						a, err := s.Exchange(ctx, subjects[(w+i)%len(subjects)])
						switch {
						case err != nil:
							failed.Add(1)
						case a.Status == 200 && a.Str("access_token") != "":
							if answered.Add(1) == killAt {
								close(underWay)
							}
						default:
							refused.Add(1)
						}
					}
				})
			}
			select {
			case <-underWay:
			case <-time.After(2 * time.Minute):
				t.Fatalf("only %d exchanges answered, %d refused, %d failed", answered.Load(), refused.Load(), failed.Load())
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			killed = true
			// Every answer the clients read has arrived by the time the process is gone;
			// stopping the clients now only ends their loops.
			stop()
			wg.Wait()

			st, err := sqlstore.Open(context.Background(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			recs, err := st.ListAudit(context.Background(), stack.ProjectKey, 1_000_000)
			if err != nil {
				t.Fatal(err)
			}
			var stored int64
			for _, r := range recs {
				if r.Action == events.TokenExchanged && r.Outcome == store.OutcomeSuccess {
					stored++
				}
			}
			t.Logf("tokens received %d, token.exchanged records %d, refused %d, cut off by the kill %d",
				answered.Load(), stored, refused.Load(), failed.Load())
			if refused.Load() > 0 {
				t.Errorf("%d exchanges were refused before the kill", refused.Load())
			}
			if stored < answered.Load() {
				t.Errorf("%d agents received a person's upstream token that no token.exchanged record describes",
					answered.Load()-stored)
			}
		})
	}
}

// TestSIGKILLServer is the server process of TestExchangeRecordsSurviveSIGKILL; run on its own,
// it does nothing. It sets up Alice's GitHub connection and Repo Helper's tokens for her, prints
// the issuer and the tokens, and serves until it is killed.
func TestSIGKILLServer(t *testing.T) {
	dsn := os.Getenv(sigkillChildEnv)
	if dsn == "" {
		return
	}
	s := stack.New(t, stack.Options{DSN: dsn})
	s.ConnectGitHub(stack.AliceEmail, stack.AliceLogin)
	toks := make([]string, 8)
	for i := range toks {
		toks[i] = s.AccessToken(stack.AliceEmail, stack.Agent)
	}
	fmt.Println(s.Issuer + " " + strings.Join(toks, ","))
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent kills the process
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// op makes one request and reports whether the answer was the expected one. errExhausted ends
// the worker (a pool of one-time codes ran out) without counting as an error.
type op func(ctx context.Context) error

var errExhausted = errors.New("pool exhausted")

// result is one measured run of one scenario.
type result struct {
	scenario string
	run      int
	ok       int64
	errs     int64
	firstErr string
	elapsed  time.Duration
	p50, p99 time.Duration
	// cpu is the CPU time this process (server and load generator) used during the run. On a
	// shared machine it varies far less than the rate does, so it is the figure to compare
	// changes by.
	cpu time.Duration
	// dbCPU, with -binary on PostgreSQL, is the CPU time of the database server's backends
	// serving the measured process (by application_name) during the run.
	dbCPU  time.Duration
	load   string // load average when the run started
	tokens int64  // live tokens stored when the run started
	short  bool   // a pool ran out before the duration
}

// cpuPerOp is CPU time per successful request, in microseconds.
func (r result) cpuPerOp() float64 {
	if r.ok == 0 {
		return 0
	}
	return float64(r.cpu) / float64(time.Microsecond) / float64(r.ok)
}

// dbCPUPerOp is dbCPU per successful request, in microseconds.
func (r result) dbCPUPerOp() float64 {
	if r.ok == 0 {
		return 0
	}
	return float64(r.dbCPU) / float64(time.Microsecond) / float64(r.ok)
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (r result) rps() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ok) / r.elapsed.Seconds()
}

// newClient is one HTTP client for all workers: keep-alive connections, one per worker, no
// redirects followed (a redirect to sign-in is an answer to check, not to chase).
func newClient(conc int) *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			MaxIdleConns:        2 * conc,
			MaxIdleConnsPerHost: 2 * conc,
			IdleConnTimeout:     time.Minute,
			DisableCompression:  true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// drive runs newOp's operations from conc workers for d and measures them. Latency covers the
// whole request from the client's side: writing it, the server, and reading the answer.
func drive(ctx context.Context, conc int, d time.Duration, newOp func(worker int) op, profile string) result {
	var (
		mu       sync.Mutex
		lat      []time.Duration
		errs     atomic.Int64
		firstErr atomic.Value
		short    atomic.Bool
		wg       sync.WaitGroup
	)
	if profile != "" {
		stopProfile := startProfiles(profile)
		defer stopProfile()
	}
	cpu0 := cpuTime()
	start := time.Now()
	deadline := start.Add(d)
	ctx, cancel := context.WithDeadline(ctx, deadline.Add(15*time.Second))
	defer cancel()
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			do := newOp(w)
			mine := make([]time.Duration, 0, 8192)
			for time.Now().Before(deadline) && ctx.Err() == nil {
				t0 := time.Now()
				err := do(ctx)
				took := time.Since(t0)
				switch {
				case err == nil:
					mine = append(mine, took)
				case errors.Is(err, errExhausted):
					short.Store(true)
					goto done
				default:
					if errs.Add(1) == 1 {
						firstErr.Store(err.Error())
					}
				}
			}
		done:
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	r := result{ok: int64(len(lat)), errs: errs.Load(), elapsed: time.Since(start), cpu: cpuTime() - cpu0, short: short.Load()}
	if v, ok := firstErr.Load().(string); ok {
		r.firstErr = v
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		r.p50 = lat[len(lat)/2]
		r.p99 = lat[len(lat)*99/100]
	}
	return r
}

// startProfiles starts a CPU profile and snapshots cumulative allocations; the returned
// function stops and writes both (name.cpu.pprof, name.allocs.pprof and the
// name.allocs-base.pprof to diff it against with pprof -base).
func startProfiles(name string) func() {
	cpu, err := os.Create(name + ".cpu.pprof")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: profile:", err)
		return func() {}
	}
	writeAllocs(name + ".allocs-base.pprof")
	if err := pprof.StartCPUProfile(cpu); err != nil {
		fmt.Fprintln(os.Stderr, "bench: profile:", err)
		cpu.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		cpu.Close()
		writeAllocs(name + ".allocs.pprof")
	}
}

func writeAllocs(path string) {
	runtime.GC() // the allocation profile is as of the last collection
	f, err := os.Create(path)
	if err != nil {
		return
	}
	err = pprof.Lookup("allocs").WriteTo(f, 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "allocation profile:", err)
	}
}

func profilePath(dir, scenario string) string {
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, scenario)
}

// send does one request and checks its status, draining the body so the connection is reused.
func send(c *http.Client, req *http.Request, want int) ([]byte, error) {
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != want {
		if len(body) > 200 {
			body = body[:200]
		}
		return body, fmt.Errorf("status %d, want %d: %s %s", resp.StatusCode, want, resp.Header.Get("Location"), body)
	}
	return body, nil
}

package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// run seeds an installation and drives every chosen scenario o.runs times.
func run(ctx context.Context, o options) error {
	chosen, err := choose(o.scenarios)
	if err != nil {
		return err
	}
	if o.profileDir != "" {
		if err := os.MkdirAll(o.profileDir, 0o755); err != nil {
			return err
		}
	}
	dsn, label, dropDB, err := database(ctx, o)
	if err != nil {
		return err
	}
	defer dropDB()
	f, err := start(ctx, o, dsn)
	if err != nil {
		return err
	}
	defer f.close()

	t0 := time.Now()
	logf(o, "seeding %d people and %d tokens into %s", o.people, o.tokens, label)
	if err := f.seed(ctx); err != nil {
		return fmt.Errorf("seeding: %w", err)
	}
	seeded := time.Since(t0)
	logf(o, "seeded in %s", seeded.Round(time.Millisecond))

	c := newClient(o.concurrency)
	// Expected operations per run for one-time material: the last measured rate with room to
	// spare, or a generous guess before the first run.
	hint := map[string]float64{}
	var results []result
	for round := 1; round <= o.runs; round++ {
		for _, s := range chosen {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			rate := hint[s.name]
			if rate == 0 {
				rate = 8000
			}
			need := int(rate * 1.5 * (o.duration + o.warmup).Seconds())
			newOp, err := s.prepare(ctx, f, c, o.concurrency, need)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			if o.warmup > 0 {
				drive(ctx, o.concurrency, o.warmup, newOp, "")
			}
			tokens := f.storedTokens(ctx)
			prof := ""
			if round == 1 {
				prof = profilePath(o.profileDir, s.name)
			}
			r := drive(ctx, o.concurrency, o.duration, newOp, prof)
			r.scenario, r.run, r.load, r.tokens = s.name, round, loadAvg(), tokens
			hint[s.name] = max(hint[s.name], r.rps())
			results = append(results, r)
			logf(o, "%-18s run %d: %8.0f req/s  p50 %6.2f ms  p99 %6.2f ms  %5.0f µs CPU/req  errors %d %s", s.name, round, r.rps(),
				ms(r.p50), ms(r.p99), r.cpuPerOp(), r.errs, r.firstErr)
		}
	}
	report(o, label, seeded, results)
	return nil
}

func choose(list string) ([]scenario, error) {
	if list == "" {
		return scenarios, nil
	}
	var out []scenario
	for name := range strings.SplitSeq(list, ",") {
		i := slices.IndexFunc(scenarios, func(s scenario) bool { return s.name == strings.TrimSpace(name) })
		if i < 0 {
			return nil, fmt.Errorf("unknown scenario %q (have %s)", name, strings.Join(scenarioNames(), ", "))
		}
		out = append(out, scenarios[i])
	}
	return out, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Peers' figures on this kind of machine (issue 9): Ory Hydra v2.3.0 client_credentials, and
// zitadel/oidc's example server (in memory, plaintext secrets).
const (
	hydraRPS   = 150.0
	zitadelRPS = 6000.0
)

// report prints the markdown table and the targets as ratios measured in this run.
func report(o options, label string, seeded time.Duration, results []result) {
	host, _ := os.Hostname()
	fmt.Printf("## Latchkey load harness\n\n")
	fmt.Printf("- store: %s; %d people, %d tokens seeded in %s\n", label, o.people, o.tokens, seeded.Round(time.Millisecond))
	fmt.Printf("- machine: %s, %d CPUs, GOMAXPROCS %d, %s; load generator in the same process\n",
		host, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
	fmt.Printf("- %d concurrent clients, %s per run after %s warm-up, %d runs\n\n", o.concurrency, o.duration, o.warmup, o.runs)

	floor := map[int]float64{}
	floorCPU := map[int]float64{}
	for _, r := range results {
		if r.scenario == "floor" {
			floor[r.run] = r.rps()
			floorCPU[r.run] = r.cpuPerOp()
		}
	}
	fmt.Println("| scenario | run | req/s | p50 ms | p99 ms | errors | % of floor | CPU µs/req | % of floor by CPU | CPU used | tokens stored | load avg |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, r := range results {
		pct, pctCPU := "–", "–"
		if fl := floor[r.run]; fl > 0 {
			pct = fmt.Sprintf("%.0f%%", 100*r.rps()/fl)
		}
		if fl := floorCPU[r.run]; fl > 0 && r.cpuPerOp() > 0 {
			pctCPU = fmt.Sprintf("%.0f%%", 100*fl/r.cpuPerOp())
		}
		note := ""
		if r.short {
			note = " (codes ran out)"
		}
		fmt.Printf("| %s%s | %d | %.0f | %.2f | %.2f | %d | %s | %.0f | %s | %.0f%% | %d | %s |\n",
			r.scenario, note, r.run, r.rps(), ms(r.p50), ms(r.p99), r.errs, pct, r.cpuPerOp(), pctCPU,
			100*r.cpu.Seconds()/r.elapsed.Seconds()/float64(runtime.NumCPU()), r.tokens, r.load)
	}
	for _, r := range results {
		if r.errs > 0 {
			fmt.Printf("\n%s run %d: first error: %s\n", r.scenario, r.run, r.firstErr)
		}
	}

	best := func(name string) (result, bool) {
		var b result
		found := false
		for _, r := range results {
			if r.scenario == name && (!found || r.rps() > b.rps()) {
				b, found = r, true
			}
		}
		return b, found
	}
	fmt.Printf("\n### Targets (best run of each)\n\n")
	if cc, ok := best("client_credentials"); ok {
		fmt.Printf("- client_credentials: %.0f req/s = %.1f× Hydra's %.0f (target 30×) and %.2f× zitadel's example %.0f (target 1×); p99 %.2f ms (target ≤ 20 ms)\n",
			cc.rps(), cc.rps()/hydraRPS, hydraRPS, cc.rps()/zitadelRPS, zitadelRPS, ms(cc.p99))
	}
	if ex, ok := best("exchange_ok"); ok {
		if fl, ok := best("floor"); ok && fl.rps() > 0 {
			fmt.Printf("- successful token exchange: %.0f req/s = %.0f%% of the floor's %.0f (target ≥ 50%%)\n", ex.rps(), 100*ex.rps()/fl.rps(), fl.rps())
		}
	}
	if rf, ok := best("refresh"); ok {
		fmt.Printf("- refresh rotation on %s: %.0f req/s = %.1f× Hydra's client_credentials (target ≥ 3× on PostgreSQL)\n",
			strings.SplitN(label, " ", 2)[0], rf.rps(), rf.rps()/hydraRPS)
	}
}

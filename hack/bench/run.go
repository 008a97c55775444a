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

// run drives every chosen scenario o.runs times on a freshly seeded installation, once per
// count in -tokens, and compares the counts' latencies when there are several.
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
	all := map[int][]result{}
	for _, n := range o.tokenCounts {
		o.tokens = n
		results, err := runOnce(ctx, o, chosen)
		if err != nil {
			return err
		}
		all[n] = results
	}
	if len(o.tokenCounts) > 1 {
		scaling(o, all)
	}
	return nil
}

func runOnce(ctx context.Context, o options, chosen []scenario) ([]result, error) {
	dsn, label, dropDB, err := database(ctx, o)
	if err != nil {
		return nil, err
	}
	defer dropDB()
	f, err := start(ctx, o, dsn)
	if err != nil {
		return nil, err
	}
	defer f.close()

	t0 := time.Now()
	logf(o, "seeding %d people and %d tokens into %s", o.people, o.tokens, label)
	if err := f.seed(ctx); err != nil {
		return nil, fmt.Errorf("seeding: %w", err)
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
				return nil, ctx.Err()
			}
			rate := hint[s.name]
			if rate == 0 {
				rate = 8000
			}
			need := int(rate * 1.5 * (o.duration + o.warmup).Seconds())
			newOp, err := s.prepare(ctx, f, c, o.concurrency, need)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.name, err)
			}
			if o.warmup > 0 {
				drive(ctx, o.concurrency, o.warmup, newOp, "")
			}
			tokens := f.storedTokens(ctx)
			prof := ""
			if round == 1 {
				prof = profilePath(o.profileDir, fmt.Sprintf("%s-%d", s.name, o.tokens))
			}
			r := drive(ctx, o.concurrency, o.duration, newOp, prof)
			r.scenario, r.run, r.load, r.tokens = s.name, round, loadAvg(), tokens
			hint[s.name] = max(hint[s.name], r.rps())
			results = append(results, r)
			logf(o, "%-23s run %d: %8.0f req/s  p50 %6.2f ms  p99 %6.2f ms  %5.0f µs CPU/req  errors %d %s", s.name, round, r.rps(),
				ms(r.p50), ms(r.p99), r.cpuPerOp(), r.errs, r.firstErr)
		}
	}
	report(o, label, seeded, results)
	return results, nil
}

// scaling compares each scenario's best run at the smallest and the largest token count: the
// median latency, the tail, and the CPU a request costs (the figure least moved by other load).
func scaling(o options, all map[int][]result) {
	lo, hi := slices.Min(o.tokenCounts), slices.Max(o.tokenCounts)
	best := func(rs []result, name string) (result, bool) {
		var b result
		found := false
		for _, r := range rs {
			if r.scenario == name && r.ok > 0 && (!found || r.cpuPerOp() < b.cpuPerOp()) {
				b, found = r, true
			}
		}
		return b, found
	}
	fmt.Printf("\n## Scaling: %d against %d stored tokens (run with the lowest CPU per request of each)\n\n", hi, lo)
	fmt.Printf("| scenario | p50 ms (%d) | p50 ms (%d) | p50 ratio | p99 ratio | CPU µs/req (%d) | CPU µs/req (%d) | CPU ratio |\n", lo, hi, lo, hi)
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range scenarios {
		a, ok1 := best(all[lo], s.name)
		b, ok2 := best(all[hi], s.name)
		if !ok1 || !ok2 {
			continue
		}
		fmt.Printf("| %s | %.2f | %.2f | %.2f | %.2f | %.0f | %.0f | %.2f |\n", s.name, ms(a.p50), ms(b.p50),
			ms(b.p50)/ms(a.p50), ms(b.p99)/ms(a.p99), a.cpuPerOp(), b.cpuPerOp(), b.cpuPerOp()/a.cpuPerOp())
	}
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

// Peers' figures on this kind of machine (docs/performance.md, "The peers"): Ory Hydra v2.3.0 client_credentials, and
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
	// insertFloor is the one-insert floor (floor_insert) of each run, against which the
	// scenarios that store a token are read.
	insertFloor := map[int]float64{}
	// aloneFloor is floor_insert_alone: one insert committed alone per request.
	aloneFloor := map[int]float64{}
	for _, r := range results {
		switch r.scenario {
		case "floor":
			floor[r.run] = r.rps()
			floorCPU[r.run] = r.cpuPerOp()
		case "floor_insert":
			insertFloor[r.run] = r.rps()
		case "floor_insert_alone":
			aloneFloor[r.run] = r.rps()
		}
	}
	fmt.Println("| scenario | run | req/s | p50 ms | p99 ms | errors | % of floor | × one-insert floor | CPU µs/req | % of floor by CPU | CPU used | tokens stored | load avg |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, r := range results {
		pct, pctCPU, ins := "–", "–", "–"
		if fl := floor[r.run]; fl > 0 {
			pct = fmt.Sprintf("%.0f%%", 100*r.rps()/fl)
		}
		if fl := insertFloor[r.run]; fl > 0 {
			ins = fmt.Sprintf("%.2f×", r.rps()/fl)
		}
		if fl := floorCPU[r.run]; fl > 0 && r.cpuPerOp() > 0 {
			pctCPU = fmt.Sprintf("%.0f%%", 100*fl/r.cpuPerOp())
		}
		note := ""
		if r.short {
			note = " (codes ran out)"
		}
		fmt.Printf("| %s%s | %d | %.0f | %.2f | %.2f | %d | %s | %s | %.0f | %s | %.0f%% | %d | %s |\n",
			r.scenario, note, r.run, r.rps(), ms(r.p50), ms(r.p99), r.errs, pct, ins, r.cpuPerOp(), pctCPU,
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
			fmt.Printf("- successful token exchange: %.0f req/s = %.0f%% of the floor's %.0f (target ≥ 50%%); by CPU per request %.0f%% (%.0f µs against %.0f µs)\n",
				ex.rps(), 100*ex.rps()/fl.rps(), fl.rps(), 100*fl.cpuPerOp()/ex.cpuPerOp(), ex.cpuPerOp(), fl.cpuPerOp())
		}
	}
	// The ratios to a floor are taken run by run (each scenario against the floor of its own
	// round), which is what "side by side in one run" means; the best run is reported.
	ratio := func(name string, fl map[int]float64) (float64, float64, bool) {
		var bestRatio, p99 float64
		found := false
		for _, r := range results {
			if r.scenario == name && fl[r.run] > 0 && r.rps()/fl[r.run] > bestRatio {
				bestRatio, p99, found = r.rps()/fl[r.run], ms(r.p99), true
			}
		}
		return bestRatio, p99, found
	}
	if x, p99, ok := ratio("client_credentials", insertFloor); ok {
		fmt.Printf("- client_credentials: %.2f× the one-insert floor of its round (target ≥ 0.95× on SQLite); p99 %.2f ms in that run (target ≤ 10 ms at 16 clients on SQLite)\n", x, p99)
	}
	if x, _, ok := ratio("client_credentials", aloneFloor); ok {
		fmt.Printf("- client_credentials: %.2f× the one-insert floor that commits each insert alone (floor_insert_alone, target ≥ 0.95× on SQLite)\n", x)
	}
	if x, _, ok := ratio("exchange_ok", floor); ok {
		fmt.Printf("- exchange from the vault: %.2f× the one-read floor of its round (target ≥ 0.8× on SQLite, ≥ 0.6× on PostgreSQL)\n", x)
	}
	if rf, ok := best("refresh"); ok {
		fmt.Printf("- refresh rotation on %s: %.0f req/s = %.1f× Hydra's client_credentials (target ≥ 3× on PostgreSQL)\n",
			strings.SplitN(label, " ", 2)[0], rf.rps(), rf.rps()/hydraRPS)
	}
}

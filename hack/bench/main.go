// Command bench is Latchkey's load harness (docs/performance.md). It starts the HTTP server in this process
// on 127.0.0.1 (webhook.New with a config.Snapshot built here: no Kubernetes), on SQLite or
// PostgreSQL, seeds it through the store, drives each scenario for a fixed time at a fixed
// number of concurrent clients, and prints requests per second and latency percentiles as a
// markdown table, next to a floor: a bare net/http handler doing the same form parsing and one
// indexed read on the same store.
//
//	go run ./hack/bench                                  # SQLite in a temporary directory
//	go run ./hack/bench -tokens 1000,1000000             # the scaling check
//	go run ./hack/bench -database 'postgres://postgres@127.0.0.1:55470/postgres?sslmode=disable'
//	go run ./hack/bench -profile /tmp/prof -scenarios client_credentials,exchange_ok
//	go run ./hack/bench -controllers 1000,10000          # reconcile benchmark on envtest
//	go run ./hack/bench -binary bin/latchkey -runs 3     # the real binary against a floor process
//	go run ./hack/bench -binary bin/latchkey -database 'postgres://…'   # the same on PostgreSQL
//	go run ./hack/bench -binary bin/latchkey -hydra bin/hydra   # and Ory Hydra beside it (hydra.go)
//
// The load generator shares the machine (and this process) with the server, as the peers'
// figures in docs/performance.md were also taken on one machine over loopback; the floor runs
// under the same conditions, so "% of floor" reads as a fraction of what the machine can do.
// Every loop is bounded by -duration; the harness stops by itself and removes what it created.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type options struct {
	database    string
	tokens      int // the count being run
	tokenCounts []int
	people      int
	duration    time.Duration
	warmup      time.Duration
	concurrency int
	runs        int
	scenarios   string
	profileDir  string
	keep        bool
	controllers string
	// operatorMemLimit is GOMEMLIMIT for the operator process of -controllers.
	operatorMemLimit string
	verbose          bool
	// replicas, with pooler, runs the multi-replica benchmark instead (replicas.go);
	// replicaServe is set in the replica processes it starts.
	replicas     int
	pooler       string
	replicaServe string
	// binary, with binaryArgs, runs the real latchkey binary against a floor in a process of
	// its own instead (real.go); floorServe is set in the floor process it starts.
	binary     string
	binaryArgs string
	// hydra, with binary, is an Ory Hydra binary to run beside it (hydra.go).
	hydra      string
	floorServe string
}

func main() {
	var o options
	flag.StringVar(&o.database, "database", "",
		"store: empty for SQLite in a temporary directory, sqlite:/path/file.db, or postgres://… (a fresh schema is made and dropped); with -binary, empty or postgres://…")
	tokens := flag.String("tokens", "1000", "tokens stored before the scenarios run; several counts (1000,1000000) run the suite once each and compare them")
	flag.IntVar(&o.people, "people", 1000, "people in the project; half have a connected GitHub account the agent may use")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "how long each scenario run is measured")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured load before each run")
	flag.IntVar(&o.concurrency, "concurrency", 16, "concurrent clients, each with one request in flight")
	flag.IntVar(&o.runs, "runs", 2, "runs of every scenario (each scenario once per round, rounds repeated)")
	flag.StringVar(&o.scenarios, "scenarios", "", "comma-separated scenarios to run (default all): "+strings.Join(scenarioNames(), ","))
	flag.StringVar(&o.profileDir, "profile", "", "write CPU and allocation profiles of each scenario's first run into this directory")
	flag.BoolVar(&o.keep, "keep", false, "keep the SQLite file or PostgreSQL schema")
	flag.StringVar(&o.controllers, "controllers", "",
		"instead of the HTTP scenarios: reconcile this many OAuthClients on envtest (comma-separated counts, e.g. 1000,10000); needs KUBEBUILDER_ASSETS")
	flag.StringVar(&o.operatorMemLimit, "operator-memlimit", "", "with -controllers: GOMEMLIMIT for the operator process (e.g. 140MiB)")
	flag.BoolVar(&o.verbose, "v", false, "log progress")
	flag.IntVar(&o.replicas, "replicas", 0, "instead of the scenarios: start this many server processes on one PostgreSQL through -pooler and compare them with one (client_credentials, refresh), then check the store")
	flag.StringVar(&o.pooler, "pooler", "", "with -replicas: host:port of a PgBouncer (transaction mode) in front of -database's server")
	flag.StringVar(&o.replicaServe, "replica-serve", "", "internal: serve as one replica on this DSN (started by -replicas)")
	flag.StringVar(&o.binary, "binary", "",
		"instead of the in-process server: run this latchkey binary as make run-local starts it, next to a floor in a process of its own, scenarios alternating by round ("+strings.Join(realScenarios, ",")+")")
	flag.StringVar(&o.binaryArgs, "binary-args", "", "with -binary: more flags for latchkey, separated by spaces")
	flag.StringVar(&o.hydra, "hydra", "", "with -binary: an Ory Hydra binary (built with -tags sqlite) to run beside latchkey; adds hydra_client_credentials to every round")
	flag.StringVar(&o.floorServe, "floor-serve", "", "internal: serve the floor on latchkey's database at this path (started by -binary)")
	flag.Parse()
	for f := range strings.SplitSeq(*tokens, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench: -tokens %q: want positive counts separated by commas\n", *tokens)
			os.Exit(2)
		}
		o.tokenCounts = append(o.tokenCounts, n)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch {
	case o.floorServe != "":
		err = serveFloor(ctx, o.floorServe)
	case o.binary != "":
		err = runReal(ctx, o)
	case o.replicaServe != "":
		err = serveReplica(ctx, o, o.replicaServe)
	case o.replicas > 0:
		err = runReplicas(ctx, o)
	case o.controllers != "":
		err = runControllers(ctx, o)
	default:
		err = run(ctx, o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1) //nolint:gocritic // the deferred stop only unregisters the signal handler; exiting does that too
	}
}

func logf(o options, format string, args ...any) {
	if o.verbose {
		fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
}

// loadAvg is /proc/loadavg's first three fields, to print beside the figures: the machine is
// shared, and a run taken under load says so.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

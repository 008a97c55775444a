package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/internal/upstream/fakegithub"
	"latchkey.dev/latchkey/webhook"
)

// Several replicas on one PostgreSQL (-replicas N -pooler host:port).
//
// The harness makes a fresh database (through -database, directly), seeds it, and starts N
// server processes — this binary again, with -replica-serve — that reach the database through
// the pooler, as replicas in production reach it through PgBouncer in transaction mode. The
// replicas share one sealing key, as replicas share the keys Secret. The load generator (this
// process) runs client_credentials and refresh rotation first against one replica, then
// round-robin across all of them, and reads the CPU the server processes used from
// /proc/<pid>/stat. Afterwards it checks what the store holds against what the clients were
// answered: every client_credentials answer stored exactly one live token, every refresh
// chain ends in exactly one live refresh token (the one its client holds), and every
// rotation left exactly one new live access token — nothing lost, nothing doubled. Then come
// bursts of concurrent requests across all replicas (replicachecks.go): one connect link per
// person × agent × service, one upstream refresh per expired connection, and one rotation per
// refresh token, with reuse of an older one ending the grant everywhere.

// replicaKeyEnv carries the shared sealing key (hex) to the replica processes.
const replicaKeyEnv = "LATCHKEY_BENCH_REPLICA_KEY"

// serveReplica is the child: one server on a free loopback port, printed on stdout, until its
// stdin closes.
func serveReplica(ctx context.Context, o options, dsn string) error {
	key, err := hex.DecodeString(os.Getenv(replicaKeyEnv))
	if err != nil {
		return fmt.Errorf("%s: %w", replicaKeyEnv, err)
	}
	kr, err := secret.NewKeyring(map[string][]byte{"bench": key}, "bench")
	if err != nil {
		return err
	}
	st, err := sqlstore.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer st.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	base := "http://" + ln.Addr().String()
	issuer := base + "/" + projectKey
	// The connector talks to the fake GitHub the parent runs (replicachecks.go); this one only
	// builds the connector, with the same client id and secret.
	gh := fakegithub.New(fakegithub.Options{ClientID: githubClientID, ClientSecret: replicaGitHubSecret})
	project := benchProject(issuer, gh.Connector(os.Getenv(replicaGitHubEnv), issuer+config.CallbackPath("default", "github")))
	project.SignIn.Passwords = make(map[string]config.PasswordUser, o.people)
	for i := range o.people {
		email := fmt.Sprintf("p-%07d@bench.example", i)
		project.SignIn.Passwords[email] = config.PasswordUser{Email: email, Name: "Person", Hash: "$2a$10$benchbenchbenchbenchbenchbenchbenchbenchbenchbenchben"}
	}
	holder := &config.Holder{}
	holder.Store(&config.Snapshot{Projects: map[string]*config.Project{projectKey: project}, Version: 1})
	log := logr.FromSlogHandler(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo})) //nolint:sloglint // as in the fixture: the formatting is paid for
	emitter, err := events.NewEmitter(events.EmitterOptions{Store: st, Config: holder, Logger: log, Registerer: prometheus.NewRegistry()})
	if err != nil {
		return err
	}
	srv, err := webhook.New(webhook.Options{Config: holder, Store: st, Keyring: kr, Logger: log, Now: time.Now, PublicURL: base, Events: emitter.Recorded})
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() { _ = hs.Serve(ln) }() // returns http.ErrServerClosed after Close
	fmt.Println(issuer)
	_, _ = io.Copy(io.Discard, os.Stdin) // the parent closes stdin to stop the replica
	return hs.Close()
}

type replica struct {
	cmd    *exec.Cmd
	stdin  io.Closer
	issuer string
}

// cpu is the CPU time (user and system) the replica process has used, from /proc/<pid>/stat.
func (r *replica) cpu() time.Duration { return procCPU(r.cmd.Process.Pid) }

type replicaResult struct {
	replicas, scenario string
	ok, errs           int64
	firstErr           string
	elapsed            time.Duration
	p50, p99           time.Duration
	cpu                time.Duration
}

// replicaLoad drives the replicas: 16 (-concurrency) clients, each request to the next replica.
type replicaLoad struct {
	o     options
	c     *http.Client
	reps  []*replica
	heads []string // heads[w] is the refresh token client w holds
	// Every answer and error, warm-ups included, for the checks afterwards.
	ccOK, refreshOK, allErrs atomic.Int64
	firstErr                 atomic.Value // string: the first of allErrs
}

func (l *replicaLoad) noteErr(err error) {
	if l.allErrs.Add(1) == 1 {
		l.firstErr.Store(err.Error())
	}
}

// one makes one request of scenario to iss as client w.
func (l *replicaLoad) one(ctx context.Context, iss, scenario string, w int) error {
	if scenario == "client_credentials" {
		_, err := send(l.c, post(ctx, iss+"/token", "grant_type=client_credentials&scope=read", svcID, svcSecret), http.StatusOK)
		if err == nil {
			l.ccOK.Add(1)
		}
		return err
	}
	body, err := send(l.c, post(ctx, iss+"/token", "grant_type=refresh_token&refresh_token="+url.QueryEscape(l.heads[w]), webID, webSecret), http.StatusOK)
	if err != nil {
		return err
	}
	var resp struct {
		RefreshToken string `json:"refresh_token"`
	}
	if err := json.Unmarshal(body, &resp); err != nil || resp.RefreshToken == "" {
		return fmt.Errorf("no refresh token in %s", body)
	}
	l.heads[w] = resp.RefreshToken
	l.refreshOK.Add(1)
	return nil
}

func (l *replicaLoad) serverCPU() time.Duration {
	var t time.Duration
	for _, r := range l.reps {
		t += r.cpu()
	}
	return t
}

// drive runs scenario against issuers round-robin: unmeasured warm-up, then the measured run.
func (l *replicaLoad) drive(ctx context.Context, label string, issuers []string, scenario string) replicaResult {
	l.loop(ctx, label, issuers, scenario, l.o.warmup) // its tokens are counted in the checks all the same
	return l.loop(ctx, label, issuers, scenario, l.o.duration)
}

func (l *replicaLoad) loop(ctx context.Context, label string, issuers []string, scenario string, d time.Duration) replicaResult {
	res := replicaResult{replicas: label, scenario: scenario}
	var (
		next     atomic.Uint64
		mu       sync.Mutex
		lat      []time.Duration
		ok, errs atomic.Int64
		wg       sync.WaitGroup
	)
	cpu0 := l.serverCPU()
	t0 := time.Now()
	deadline := t0.Add(d)
	for w := range l.o.concurrency {
		wg.Go(func() {
			var mine []time.Duration
			for time.Now().Before(deadline) && ctx.Err() == nil {
				s := time.Now()
				if err := l.one(ctx, issuers[(next.Add(1)-1)%uint64(len(issuers))], scenario, w); err != nil {
					l.noteErr(err)
					if errs.Add(1) == 1 {
						mu.Lock()
						res.firstErr = err.Error()
						mu.Unlock()
					}
					continue
				}
				ok.Add(1)
				mine = append(mine, time.Since(s))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	res.elapsed = time.Since(t0)
	res.cpu = l.serverCPU() - cpu0
	res.ok, res.errs = ok.Load(), errs.Load()
	if len(lat) > 0 {
		slices.Sort(lat)
		res.p50, res.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	return res
}

// startReplicas starts o.replicas server processes on dsn, sharing one sealing key, their
// GitHub connector pointed at githubURL. The replicas started are returned even with an error,
// to be stopped.
func startReplicas(ctx context.Context, o options, dsn string, key []byte, githubURL string) ([]*replica, error) {
	var reps []*replica
	for range o.replicas {
		cmd := exec.CommandContext(ctx, os.Args[0], "-replica-serve", dsn, "-people", strconv.Itoa(o.people))
		cmd.Env = append(os.Environ(), replicaKeyEnv+"="+hex.EncodeToString(key), replicaGitHubEnv+"="+githubURL)
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			return reps, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return reps, err
		}
		if err := cmd.Start(); err != nil {
			return reps, err
		}
		r := &replica{cmd: cmd, stdin: in}
		reps = append(reps, r)
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil {
			return reps, fmt.Errorf("replica did not start: %w", err)
		}
		r.issuer = strings.TrimSpace(line)
	}
	return reps, nil
}

func stopReplicas(reps []*replica) {
	for _, r := range reps {
		r.stdin.Close()
		_ = r.cmd.Wait()
	}
}

// printReplicaTable prints each run beside the one-process run before it.
func printReplicaTable(results []replicaResult) {
	fmt.Println("| scenario | replicas | req/s | p50 ms | p99 ms | errors | server CPU s | server CPU µs/req | req/s vs 1 replica | CPU/req vs 1 replica |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var one replicaResult
	for _, r := range results {
		rps := float64(r.ok) / r.elapsed.Seconds()
		per := 0.0
		if r.ok > 0 {
			per = float64(r.cpu.Microseconds()) / float64(r.ok)
		}
		vs, vsCPU := "1.00×", "1.00×"
		if r.replicas == "1" {
			one = r
		} else if one.ok > 0 {
			vs = fmt.Sprintf("%.2f×", rps/(float64(one.ok)/one.elapsed.Seconds()))
			vsCPU = fmt.Sprintf("%.2f×", per/(float64(one.cpu.Microseconds())/float64(one.ok)))
		}
		fmt.Printf("| %s | %s | %.0f | %.2f | %.2f | %d | %.1f | %.0f | %s | %s |\n",
			r.scenario, r.replicas, rps, ms(r.p50), ms(r.p99), r.errs, r.cpu.Seconds(), per, vs, vsCPU)
		if r.firstErr != "" {
			fmt.Printf("\nfirst error (%s, %s replicas): %s\n\n", r.scenario, r.replicas, r.firstErr)
		}
	}
}

func runReplicas(ctx context.Context, o options) error {
	if !strings.HasPrefix(o.database, "postgres") || o.pooler == "" {
		return errors.New("-replicas needs -database postgres://… (direct, to create the database) and -pooler host:port (PgBouncer in front of it)")
	}
	direct, err := url.Parse(o.database)
	if err != nil {
		return err
	}
	admin, err := sql.Open("pgx", o.database)
	if err != nil {
		return err
	}
	defer admin.Close()
	// A database of its own, not a schema: a pooler does not pass a search_path on.
	name := fmt.Sprintf("latchkey_bench_%d", time.Now().UnixNano())
	if _, err := admin.ExecContext(ctx, `CREATE DATABASE `+name); err != nil {
		return err
	}
	defer func() {
		if !o.keep {
			_, _ = admin.Exec(`DROP DATABASE ` + name + ` WITH (FORCE)`) // best-effort cleanup
		}
	}()
	direct.Path = "/" + name
	pooled := *direct
	pooled.Host = o.pooler
	// PgBouncer 1.18 in transaction mode does not carry named prepared statements between
	// transactions: the DSN setting docs/operations.md asks for behind such a pooler.
	q := pooled.Query()
	q.Set("default_query_exec_mode", "cache_describe")
	pooled.RawQuery = q.Encode()

	// Seed through the direct connection with the in-process fixture (its own server idles).
	o.tokens = o.tokenCounts[0]
	f, err := start(ctx, o, direct.String())
	if err != nil {
		return err
	}
	defer f.close()
	if err := f.seed(ctx); err != nil {
		return err
	}

	// The replicas' sealing key, which the harness also seals the connections of the checks
	// with, and the fake GitHub their connector calls.
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	keyring, err := secret.NewKeyring(map[string][]byte{"bench": key}, "bench")
	if err != nil {
		return err
	}
	gh, err := startReplicaGitHub()
	if err != nil {
		return err
	}
	defer gh.close()
	checkDB, err := sql.Open("pgx", direct.String())
	if err != nil {
		return err
	}
	defer checkDB.Close()

	reps, err := startReplicas(ctx, o, pooled.String(), key, gh.url)
	defer stopReplicas(reps)
	if err != nil {
		return err
	}

	before, err := f.st.CountLiveTokens(ctx, projectKey, time.Now())
	if err != nil {
		return err
	}
	// One refresh chain per client worker; heads[w] is what worker w holds.
	heads := make([]string, o.concurrency)
	now := time.Now()
	for w := range heads {
		heads[w] = secret.New(secret.PrefixRefreshToken)
		if err := f.st.CreateTokens(ctx, store.Token{
			Hash: secret.Hash(heads[w]), Kind: store.RefreshToken, Project: projectKey, ClientID: webID,
			Subject: f.people[w%len(f.people)], Scopes: []string{"read"}, FamilyID: secret.New("")[:22],
			AuthTime: now, IssuedAt: now, ExpiresAt: now.Add(24 * time.Hour),
		}); err != nil {
			return err
		}
	}

	l := &replicaLoad{o: o, reps: reps, heads: heads,
		c: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.concurrency, MaxConnsPerHost: o.concurrency}, Timeout: 30 * time.Second}}
	var results []replicaResult
	all := make([]string, len(reps))
	for i, r := range reps {
		all[i] = r.issuer
	}
	for run := range o.runs {
		for _, sc := range []string{"client_credentials", "refresh"} {
			logf(o, "run %d: %s on 1 replica", run+1, sc)
			results = append(results, l.drive(ctx, "1", all[:1], sc))
			logf(o, "run %d: %s on %d replicas", run+1, sc, len(all))
			results = append(results, l.drive(ctx, strconv.Itoa(len(all)), all, sc))
		}
	}

	// Links and upstream refresh, in bursts across the replicas.
	burstStart := time.Now()
	bursts, ended, err := l.burstChecks(ctx, f, checkDB, &upstream.Vault{Store: f.st, Keyring: keyring, Now: time.Now}, gh, all)
	if err != nil {
		return fmt.Errorf("checks under load: %w", err)
	}
	logf(o, "checks under load took %s", time.Since(burstStart).Round(time.Millisecond))

	// What the store holds against what the clients were told.
	after, err := f.st.CountLiveTokens(ctx, projectKey, time.Now())
	if err != nil {
		return err
	}
	liveHeads := 0
	for _, h := range heads {
		t, err := f.st.GetToken(ctx, secret.Hash(h))
		if err == nil && t.Active(time.Now()) && t.RotatedAt == nil && t.Kind == store.RefreshToken {
			liveHeads++
		}
	}
	ccDelta := after[svcID] - before[svcID]
	webDelta := after[webID] - before[webID]
	// The reuse check ends the live tokens of the web app of one person, besides its own.
	wantWeb := int64(len(heads)) + l.refreshOK.Load() - ended

	fmt.Printf("## Latchkey replicas on one PostgreSQL\n\n")
	fmt.Printf("- %d server processes, each through PgBouncer at %s to %s (database %s); %d clients, %s per run after %s warm-up, %d runs; load average %s\n\n",
		len(reps), o.pooler, direct.Host, name, o.concurrency, o.duration, o.warmup, o.runs, loadAvg())
	printReplicaTable(results)
	fmt.Printf("\n### Correctness after the load\n\n")
	firstErr, _ := l.firstErr.Load().(string)
	if firstErr != "" {
		firstErr = "; first: " + firstErr
	}
	checks := append([]check{
		checkf(l.allErrs.Load() == 0, "requests that failed: %d%s", l.allErrs.Load(), firstErr),
		checkf(ccDelta == l.ccOK.Load(), "client_credentials: %d answered with a token, %d new live tokens stored", l.ccOK.Load(), ccDelta),
		checkf(liveHeads == len(heads), "refresh chains: %d of %d end in a live refresh token, the one their client holds", liveHeads, len(heads)),
		checkf(webDelta == wantWeb, "refresh: %d rotations answered; live tokens of the client grew by %d (want %d: one access token per rotation plus one refresh token per chain, less the %d older ones the reuse check ended)", l.refreshOK.Load(), webDelta, wantWeb, ended),
	}, bursts...)
	failed := 0
	for _, c := range checks {
		mark := "ok"
		if !c.ok {
			mark = "FAILED"
			failed++
		}
		fmt.Printf("- %s: %s\n", mark, c.text)
	}
	if failed > 0 {
		return fmt.Errorf("%d correctness checks failed", failed)
	}
	return nil
}

package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/oauth2"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/internal/upstream/fakegithub"
)

// The real binary (-binary bin/latchkey).
//
// The in-process harness measures webhook.New; what a user runs is the latchkey process, which
// carries more: the flag defaults, the Go runtime settings of cmd/latchkey, the store opened as
// cmd/latchkey opens it (request and store metrics on), the log and audit as `make run-local`
// configures them, and the configuration directory's reader (or, with a cluster, the controller
// manager). This mode starts that binary as `make run-local` does (`latchkey serve --config-dir`,
// text logs to a file, metrics on their own port), with a configuration directory written here,
// and a floor as a separate process (this binary again, -floor-serve): a bare net/http handler
// that parses the form, checks Basic credentials (SHA-256, constant time) and commits one SQLite
// insert alone, and one that does one indexed read on latchkey's own database. Each round runs
// every scenario once, rounds alternate, and every ratio is against the floor of its round. CPU
// per request is the serving process's own, read from /proc.

// realScenarios run in this order in every round.
var realScenarios = []string{"floor_insert_alone", "client_credentials", "floor", "exchange_ok"}

// realFloorOf says which floor each scenario is read against.
var realFloorOf = map[string]string{"client_credentials": "floor_insert_alone", "exchange_ok": "floor"}

// hydraScenario is Hydra's client_credentials, run with -hydra after Latchkey's in each round.
const hydraScenario = "hydra_client_credentials"

const (
	realNS        = projectNS
	realProject   = projectName
	realKeyID     = "bench"
	floorReadyMsg = "floor: "
)

type realFixture struct {
	o         options
	dir       string
	latchkey  *proc
	floor     *proc
	issuer    string
	pprofURL  string
	floorURL  string
	svcID     string
	svcSecret string
	agentID   string
	agentSec  string
	subjects  []string // people's access tokens issued to the agent, each with a connected GitHub account
	stopGH    func()
	hydra     *hydraPeer // with -hydra
	// On PostgreSQL: the schema's label, and its removal; the backends' CPU reader.
	dbLabel  string
	dropDB   func()
	backends *backends
}

// proc is a child process whose CPU time is read from /proc.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *proc) cpu() time.Duration { return (&replica{cmd: p.cmd}).cpu() }

func (p *proc) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func startProc(cmd *exec.Cmd) (*proc, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

// freeAddr is a loopback address nothing listens on now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func runReal(ctx context.Context, o options) error {
	if err := checkRealDatabase(o.database); err != nil {
		return err
	}
	if o.profileDir != "" {
		if err := os.MkdirAll(o.profileDir, 0o755); err != nil {
			return err
		}
	}
	f, err := startReal(ctx, o)
	if err != nil {
		return err
	}
	defer f.close()

	chosen := realScenarios
	if o.scenarios != "" {
		chosen = nil
		for name := range strings.SplitSeq(o.scenarios, ",") {
			if !slices.Contains(realScenarios, name) {
				return fmt.Errorf("-binary runs %s; not %q", strings.Join(realScenarios, ", "), name)
			}
			chosen = append(chosen, name)
		}
	}
	c := newClient(o.concurrency)
	var results []result
	serverCPU := map[string]*proc{"floor": f.floor, "floor_insert_alone": f.floor, "client_credentials": f.latchkey, "exchange_ok": f.latchkey}
	dbApp := map[string]string{"floor": floorAppName, "floor_insert_alone": floorAppName, "client_credentials": latchkeyAppName, "exchange_ok": latchkeyAppName}
	if f.hydra != nil {
		if i := slices.Index(chosen, "client_credentials"); i >= 0 {
			chosen = slices.Insert(slices.Clone(chosen), i+1, hydraScenario)
		} else {
			chosen = append(slices.Clone(chosen), hydraScenario)
		}
		serverCPU[hydraScenario] = f.hydra.proc
	}
	for round := 1; round <= o.runs; round++ {
		for _, name := range chosen {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			newOp := f.op(c, name)
			if o.warmup > 0 {
				drive(ctx, o.concurrency, o.warmup, newOp, "")
			}
			p := serverCPU[name]
			cpu0 := p.cpu()
			db0 := f.backends.cpu(ctx, dbApp[name])
			var stopProf func()
			if round == 1 && o.profileDir != "" {
				switch p {
				case f.latchkey:
					stopProf = f.profile(ctx, f.pprofURL, name, o.duration, "profile", "allocs", "mutex", "block")
				case f.floor:
					stopProf = f.profile(ctx, f.floorURL, name, o.duration, "profile", "allocs")
				}
			}
			r := drive(ctx, o.concurrency, o.duration, newOp, "")
			if stopProf != nil {
				stopProf()
			}
			r.cpu = p.cpu() - cpu0
			if f.backends != nil {
				r.dbCPU = f.backends.cpu(ctx, dbApp[name]).since(db0)
			}
			r.scenario, r.run, r.load = name, round, loadAvg()
			results = append(results, r)
			logf(o, "%-19s round %d: %8.0f req/s  p50 %6.2f ms  p99 %6.2f ms  %5.0f µs server CPU/req  %5.0f µs database CPU/req  errors %d %s", name, round, r.rps(),
				ms(r.p50), ms(r.p99), r.cpuPerOp(), r.dbCPUPerOp(), r.errs, r.firstErr)
		}
	}
	reportReal(o, f.dbLabel, results)
	return nil
}

// startReal writes the configuration directory, starts the fake GitHub, the floor and
// latchkey, waits until latchkey is ready and seeds its database.
func startReal(ctx context.Context, o options) (*realFixture, error) {
	dir, err := os.MkdirTemp("", "latchkey-bench-real-")
	if err != nil {
		return nil, err
	}
	f := &realFixture{o: o, dir: dir}
	ok := false
	defer func() {
		if !ok {
			f.close()
		}
	}()
	listen, err := freeAddr()
	if err != nil {
		return nil, err
	}
	base := "http://" + listen
	f.issuer = base + "/" + realNS + "/" + realProject

	gh := fakegithub.New(fakegithub.Options{ClientID: githubClientID, ClientSecret: "bench-github-secret"})
	ghLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ghSrv := &http.Server{Handler: gh, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = ghSrv.Serve(ghLn) }() // returns http.ErrServerClosed after Close
	f.stopGH = func() { ghSrv.Close() }

	key := make([]byte, 32)
	_, _ = rand.Read(key)
	keysFile := filepath.Join(dir, "keys")
	if err := os.WriteFile(keysFile, []byte(realKeyID+"="+hex.EncodeToString(key)+"\n"), 0o600); err != nil {
		return nil, err
	}
	configDir := filepath.Join(dir, "config")
	if err := writeRealConfig(configDir, "http://"+ghLn.Addr().String(), o.people); err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	dbPath := filepath.Join(data, "latchkey.db")
	seedDSN, floorArg, dbArgs, err := f.openDatabase(ctx, dbPath)
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "latchkey.log")
	metrics, err := freeAddr()
	if err != nil {
		return nil, err
	}
	// As hack/dev starts it for make run-local, with the keys given so the harness can seal
	// the upstream tokens it seeds.
	args := []string{"serve",
		"--config-dir", configDir,
		"--data-dir", data,
		"--public-url", base,
		"--listen", listen,
		"--metrics-listen", metrics,
		"--log-format", "text",
		"--keys-file", keysFile,
	}
	args = append(args, dbArgs...)
	if o.profileDir != "" {
		pp, err := freeAddr()
		if err != nil {
			return nil, err
		}
		args = append(args, "--debug-pprof-listen", pp)
		f.pprofURL = "http://" + pp
	}
	args = append(args, strings.Fields(o.binaryArgs)...)
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(o.binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if f.latchkey, err = startProc(cmd); err != nil {
		logFile.Close()
		return nil, err
	}
	go func() { <-f.latchkey.done; logFile.Close() }()
	logf(o, "started %s %s (log %s)", o.binary, strings.Join(args, " "), logPath)

	if err := waitReady(ctx, base+"/-/readyz", f.latchkey); err != nil {
		b, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("latchkey did not become ready: %w\n%s", err, tail(b, 2000))
	}
	if f.svcID, f.svcSecret, err = readCredentials(data, "svc"); err != nil {
		return nil, err
	}
	if f.agentID, f.agentSec, err = readCredentials(data, "repo-helper"); err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := f.seed(ctx, seedDSN, key); err != nil {
		return nil, fmt.Errorf("seeding: %w", err)
	}
	logf(o, "seeded %d people in %s", o.people, time.Since(t0).Round(time.Millisecond))

	// The floor: this binary again, in a process of its own.
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	floorCmd := exec.Command(self, "-floor-serve", floorArg)
	floorCmd.Stderr = os.Stderr
	out, err := floorCmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if f.floor, err = startProc(floorCmd); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, floorReadyMsg) {
		return nil, fmt.Errorf("floor process: %q: %w", line, err)
	}
	f.floorURL = strings.TrimSpace(strings.TrimPrefix(line, floorReadyMsg))
	go func() { _, _ = io.Copy(io.Discard, out) }()
	if o.hydra != "" {
		if f.hydra, err = startHydra(ctx, o, dir); err != nil {
			return nil, err
		}
	}
	ok = true
	return f, nil
}

func (f *realFixture) close() {
	f.latchkey.stop()
	f.floor.stop()
	f.hydra.stop()
	if f.stopGH != nil {
		f.stopGH()
	}
	f.backends.close()
	if f.dropDB != nil {
		f.dropDB() // keeps the schema with -keep
	}
	if f.o.keep {
		fmt.Fprintln(os.Stderr, "bench: kept", f.dir)
		return
	}
	os.RemoveAll(f.dir)
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func waitReady(ctx context.Context, url string, p *proc) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return errors.New("the process exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		resp, err := http.Get(url) //nolint:noctx // loopback, bounded by the loop
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	return errors.New("timed out after 2 minutes")
}

// readCredentials reads an OAuthClient's credentials Secret as latchkey serve writes it.
func readCredentials(data, client string) (id, sec string, err error) {
	path := filepath.Join(data, "secrets", realNS, client+"-credentials.yaml")
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			var s corev1.Secret
			if err := yaml.Unmarshal(b, &s); err != nil {
				return "", "", err
			}
			return string(s.Data["client_id"]), string(s.Data["client_secret"]), nil
		}
		if time.Now().After(deadline) {
			return "", "", err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// writeRealConfig writes the Project, its people (a password file), the two clients and the
// GitHub Connector, as a directory `latchkey serve --config-dir` reads.
func writeRealConfig(dir, githubURL string, people int) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// One hash for everyone: nobody signs in with a password here, but the people must be in
	// the Project's sign-in sources for their tokens to count (site.PersonActive).
	hash, err := bcrypt.GenerateFromPassword([]byte("bench-person-pass"), bcrypt.MinCost)
	if err != nil {
		return err
	}
	var pw strings.Builder
	for i := range people {
		fmt.Fprintf(&pw, "      - email: p-%07d@bench.example\n        name: Person\n        hash: %s\n", i, hash)
	}
	files := map[string]string{
		"project.yaml": fmt.Sprintf(`apiVersion: latchkey.dev/v1alpha1
kind: Project
metadata:
  name: %[2]s
  namespace: %[1]s
spec:
  signIn:
    passwordSecretRef:
      name: people
      key: passwords.yaml
  upstreamNetwork:
    allowedCIDRs:
      - 127.0.0.1/32
---
apiVersion: v1
kind: Secret
metadata:
  name: people
  namespace: %[1]s
  labels:
    latchkey.dev/use: project
stringData:
  passwords.yaml: |
%[3]s`, realNS, realProject, pw.String()),
		"clients.yaml": fmt.Sprintf(`apiVersion: latchkey.dev/v1alpha1
kind: OAuthClient
metadata:
  name: svc
  namespace: %[1]s
spec:
  projectRef:
    name: %[2]s
  grantTypes:
    - client_credentials
  tokenEndpointAuthMethod: client_secret_basic
---
apiVersion: latchkey.dev/v1alpha1
kind: OAuthClient
metadata:
  name: repo-helper
  namespace: %[1]s
spec:
  projectRef:
    name: %[2]s
  redirectURIs:
    - http://127.0.0.1:8070/callback
  grantTypes:
    - authorization_code
    - refresh_token
    - urn:ietf:params:oauth:grant-type:token-exchange
  tokenEndpointAuthMethod: client_secret_basic
  connectors:
    - github
`, realNS, realProject),
		"github.yaml": fmt.Sprintf(`apiVersion: latchkey.dev/v1alpha1
kind: Connector
metadata:
  name: github
  namespace: %[1]s
spec:
  projectRef:
    name: %[2]s
  preset: github
  endpoints:
    authorizationURL: %[3]s/login/oauth/authorize
    tokenURL: %[3]s/login/oauth/access_token
    userInfoURL: %[3]s/user
  clientID: %[4]s
  clientSecretRef:
    name: github-oauth-app
    key: clientSecret
---
apiVersion: v1
kind: Secret
metadata:
  name: github-oauth-app
  namespace: %[1]s
  labels:
    latchkey.dev/use: connector
stringData:
  clientSecret: bench-github-secret
`, realNS, realProject, githubURL, githubClientID),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// seed stores, through the store's own methods on latchkey's database file, the people, their
// grants to the agent, a connected GitHub account for each (sealed with the key latchkey was
// given) the agent may use, and an access token for each issued to the agent.
func (f *realFixture) seed(ctx context.Context, dsn string, key []byte) error {
	st, err := sqlstore.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer st.Close()
	kr, err := secret.NewKeyring(map[string][]byte{realKeyID: key}, realKeyID)
	if err != nil {
		return err
	}
	vault := &upstream.Vault{Store: st, Keyring: kr, Now: time.Now}
	project, connector := realNS+"/"+realProject, realNS+"/github"
	now := time.Now()
	var toks []store.Token
	for i := range f.o.people {
		id := fmt.Sprintf("p-%07d", i)
		email := id + "@bench.example"
		if _, err := st.UpsertPerson(ctx, store.Person{Project: project, ID: id, Source: "password", SourceSubject: email,
			Email: email, Name: "Person", CreatedAt: now}); err != nil {
			return fmt.Errorf("person: %w", err)
		}
		if err := st.UpsertGrant(ctx, store.Grant{Project: project, Subject: id, ClientID: f.agentID,
			Scopes: []string{"openid"}, CreatedAt: now, UpdatedAt: now}); err != nil {
			return fmt.Errorf("grant: %w", err)
		}
		c := store.Connection{
			ID: fmt.Sprintf("c-%07d", i), Project: project, Subject: id, Connector: connector,
			AccountID: fmt.Sprint(100000 + i), AccountName: fmt.Sprintf("gh-%d", i),
			Status: store.ConnectionActive, CreatedAt: now, UpdatedAt: now,
		}
		vault.Seal(&c, &oauth2.Token{AccessToken: "gho_" + secret.New("")[:36], TokenType: "bearer"})
		c.Scopes = []string{"repo"}
		saved, err := st.SaveConnection(ctx, c)
		if err != nil {
			return fmt.Errorf("connection: %w", err)
		}
		if err := st.AllowAgent(ctx, store.AgentPermission{Project: project, Subject: id, Connector: connector,
			ClientID: f.agentID, ConnectionID: saved.ID, CreatedAt: now}); err != nil {
			return fmt.Errorf("permission: %w", err)
		}
		tok := secret.New(secret.PrefixAccessToken)
		f.subjects = append(f.subjects, tok)
		toks = append(toks, store.Token{
			Hash: secret.Hash(tok), Kind: store.AccessToken, Project: project, ClientID: f.agentID, Subject: id,
			Scopes: []string{"openid"}, FamilyID: secret.New("")[:22], AuthTime: now, IssuedAt: now, ExpiresAt: now.Add(24 * time.Hour),
		})
	}
	for len(toks) > 0 {
		n := min(len(toks), batch)
		if err := st.CreateTokens(ctx, toks[:n]...); err != nil {
			return fmt.Errorf("tokens: %w", err)
		}
		toks = toks[n:]
	}
	return nil
}

// op is one request of the named scenario. The floors get the same bodies as the endpoints
// they are held against.
func (f *realFixture) op(c *http.Client, name string) func(int) op {
	cc := "grant_type=client_credentials"
	bodies := make([]string, len(f.subjects))
	for i, t := range f.subjects {
		bodies[i] = exchangeForm(t)
	}
	next := roundRobin(bodies)
	if name == hydraScenario {
		hydra := f.hydra.op(c)
		return func(int) op { return hydra }
	}
	return func(int) op {
		return func(ctx context.Context) error {
			var err error
			switch name {
			case "floor_insert_alone":
				_, err = send(c, post(ctx, f.floorURL+"/floor_insert_alone", cc, svcID, svcSecret), http.StatusOK)
			case "client_credentials":
				_, err = send(c, post(ctx, f.issuer+"/token", cc, f.svcID, f.svcSecret), http.StatusOK)
			case "floor":
				_, err = send(c, post(ctx, f.floorURL+"/floor", next(), agentID, agentSecret), http.StatusOK)
			case "exchange_ok":
				var body []byte
				body, err = send(c, post(ctx, f.issuer+"/token", next(), f.agentID, f.agentSec), http.StatusOK)
				if err == nil && !strings.Contains(string(body), `"access_token"`) {
					err = fmt.Errorf("no access token: %s", body)
				}
			}
			return err
		}
	}
}

// profile takes a CPU profile of the process serving at base for d, and the other kinds (allocs,
// mutex, block) over the same time (deltas: ?seconds=): latchkey's through
// --debug-pprof-listen, the floor's from its own listener. The returned function waits for
// them.
func (f *realFixture) profile(ctx context.Context, base, name string, d time.Duration, kinds ...string) func() {
	secs := max(1, int(d.Seconds())-1)
	done := make(chan struct{}, len(kinds))
	for _, kind := range kinds {
		go func() {
			defer func() { done <- struct{}{} }()
			url := fmt.Sprintf("%s/debug/pprof/%s?seconds=%d", base, kind, secs)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench: profile:", err)
				return
			}
			defer resp.Body.Close()
			out, err := os.Create(filepath.Join(f.o.profileDir, fmt.Sprintf("real-%s.%s.pprof", name, strings.Replace(kind, "profile", "cpu", 1))))
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench: profile:", err)
				return
			}
			_, _ = io.Copy(out, resp.Body)
			out.Close()
		}()
	}
	return func() {
		for range kinds {
			<-done
		}
	}
}

// serveFloor is the floor process (-floor-serve DB): /floor reads one token from latchkey's
// database, /floor_insert_alone commits one insert alone into a SQLite file of its own next
// to it (on PostgreSQL, DB is latchkey's DSN and the insert goes into latchkey's schema). It prints its address and serves until stopped.
func serveFloor(ctx context.Context, db string) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	readDSN, aloneDSN, err := floorStores(db)
	if err != nil {
		return err
	}
	read, err := sqlstore.Open(ctx, readDSN)
	if err != nil {
		return err
	}
	defer read.Close()
	alone, err := sqlstore.Open(ctx, aloneDSN, sqlstore.WithoutGroupCommit())
	if err != nil {
		return err
	}
	defer alone.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/floor", floorHandler(read))
	mux.Handle("/floor_insert_alone", floorInsertHandler(alone))
	// The floor's own CPU and allocation profiles, for -profile: what the floor pays is the
	// baseline latchkey's profile is read against. Loopback only, like the listener.
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.Handle("/debug/pprof/allocs", pprof.Handler("allocs"))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); srv.Close() }()
	fmt.Println(floorReadyMsg + "http://" + ln.Addr().String())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// reportReal prints each round and the ratios against the floor of the same round. db names
// the PostgreSQL schema, empty on SQLite; on PostgreSQL the database backends' CPU per request
// is a column of its own.
func reportReal(o options, db string, results []result) {
	host, _ := os.Hostname()
	fmt.Printf("## Latchkey, the real binary (%s, as make run-local starts it)\n\n", o.binary)
	fmt.Printf("- machine: %s, %d CPUs; latchkey, the floor and the load generator are three processes\n", host, runtime.NumCPU())
	if db != "" {
		fmt.Printf("- database: %s; latchkey and the floor each with a pool of their own\n", db)
	}
	fmt.Printf("- %d people, %d concurrent clients, %s per run after %s warm-up, %d rounds, scenarios alternating\n\n",
		o.people, o.concurrency, o.duration, o.warmup, o.runs)
	dbCol := func(r result) string { return "" }
	if db != "" {
		fmt.Println("| scenario | round | req/s | p50 ms | p99 ms | errors | server CPU µs/req | database CPU µs/req | × its floor | load avg |")
		fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
		dbCol = func(r result) string { return fmt.Sprintf(" %.0f |", r.dbCPUPerOp()) }
	} else {
		fmt.Println("| scenario | round | req/s | p50 ms | p99 ms | errors | server CPU µs/req | × its floor | load avg |")
		fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---|")
	}
	floorOf := func(r result) (result, bool) {
		fl, ok := realFloorOf[r.scenario]
		if !ok {
			return result{}, false
		}
		i := slices.IndexFunc(results, func(x result) bool { return x.scenario == fl && x.run == r.run })
		if i < 0 {
			return result{}, false
		}
		return results[i], true
	}
	for _, r := range results {
		x := "–"
		if fl, ok := floorOf(r); ok && fl.rps() > 0 {
			x = fmt.Sprintf("%.2f×", r.rps()/fl.rps())
		}
		fmt.Printf("| %s | %d | %.0f | %.2f | %.2f | %d | %.0f |%s %s | %s |\n", r.scenario, r.run, r.rps(), ms(r.p50), ms(r.p99), r.errs, r.cpuPerOp(), dbCol(r), x, r.load)
	}
	for _, r := range results {
		if r.errs > 0 {
			fmt.Printf("\n%s round %d: first error: %s\n", r.scenario, r.run, r.firstErr)
		}
	}
	fmt.Printf("\n### Targets, round by round\n\n")
	for _, name := range []string{"client_credentials", "exchange_ok"} {
		var xs, cpus, totals []string
		for _, r := range results {
			if r.scenario != name {
				continue
			}
			if fl, ok := floorOf(r); ok && fl.rps() > 0 {
				xs = append(xs, fmt.Sprintf("%.2f", r.rps()/fl.rps()))
				cpus = append(cpus, fmt.Sprintf("%.2f", r.cpuPerOp()/fl.cpuPerOp()))
				totals = append(totals, fmt.Sprintf("%.2f", (r.cpuPerOp()+r.dbCPUPerOp())/(fl.cpuPerOp()+fl.dbCPUPerOp())))
			}
		}
		if len(xs) == 0 {
			continue // the scenario or its floor did not run
		}
		fmt.Printf("- %s: %s× %s by requests a second; server CPU per request %s× the floor's", name, strings.Join(xs, " / "), realFloorOf[name], strings.Join(cpus, " / "))
		if db != "" {
			fmt.Printf("; server and database CPU per request %s× the floor's", strings.Join(totals, " / "))
		}
		fmt.Println()
	}
	var xs, cpus []string
	for _, r := range results {
		if r.scenario != hydraScenario {
			continue
		}
		i := slices.IndexFunc(results, func(x result) bool { return x.scenario == "client_credentials" && x.run == r.run })
		if i >= 0 && r.rps() > 0 && r.cpuPerOp() > 0 {
			xs = append(xs, fmt.Sprintf("%.1f", results[i].rps()/r.rps()))
			cpus = append(cpus, fmt.Sprintf("%.2f", results[i].cpuPerOp()/r.cpuPerOp()))
		}
	}
	if len(xs) > 0 {
		fmt.Printf("- client_credentials: %s× Hydra by requests a second; server CPU per request %s× Hydra's\n", strings.Join(xs, " / "), strings.Join(cpus, " / "))
	}
}

// Command dev is `make run`: a whole Latchkey on one machine, with nothing downloaded from the
// internet. It builds (once) and starts a real etcd and kube-apiserver, installs the CRDs,
// applies config/samples, starts a fake GitHub for the demo Connector, runs bin/latchkey against
// all of it, and prints where to point a browser, an agent and kubectl. Ctrl-C stops everything
// it started.
//
// The control plane starts empty on every run; the runtime state (people, sessions, tokens,
// registered clients) lives in .latchkey/latchkey.db and survives restarts.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"latchkey.dev/latchkey/internal/upstream/fakegithub"
)

const (
	fakeGitHubAddr = "127.0.0.1:8090"
	fieldOwner     = "latchkey-dev"
	// adminAddr serves the admin API, which the kube-apiserver aggregates (docs/admin.md).
	adminAddr = "127.0.0.1:8443"
	// tenantAdmin is the demo's tenant administrator: RBAC on the admin API in the demo
	// namespace only.
	tenantAdmin = "tenant-admin"
)

// The demo people are declared in config/samples (their password file Secret); the fake GitHub
// accounts are declared here. Both are printed so a newcomer can sign in straight away.
var demoPeople = []struct{ email, password string }{
	{"alice@example.com", "alice-demo-pass"},
	{"mallory@example.com", "mallory-demo-pass"},
}

type options struct {
	binary    string
	publicURL string
	stateDir  string
	verbose   bool
	local     bool
}

func main() {
	var o options
	flag.StringVar(&o.binary, "latchkey", "bin/latchkey", "the latchkey binary to run")
	flag.StringVar(&o.publicURL, "public-url", "http://127.0.0.1:8080", "public URL of the server")
	flag.StringVar(&o.stateDir, "state-dir", ".latchkey", "where the kubeconfig, database and logs go")
	flag.BoolVar(&o.verbose, "v", false, "show the server's log here instead of only in the state dir")
	flag.BoolVar(&o.local, "local", false, "no cluster (make run-local): serve config/samples from its files with `latchkey serve --config-dir`, without etcd and kube-apiserver")
	flag.Parse()
	setLoggers(os.Stderr)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// After the first Ctrl-C a second one quits at once instead of waiting for a clean stop.
	context.AfterFunc(ctx, stop)
	if err := run(ctx, o); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "\nmake run: stopped before the server was up")
			os.Exit(130) //nolint:gocritic // the deferred stop only unregisters the signal handler; exiting does that too
		}
		fmt.Fprintf(os.Stderr, "\nmake run: %v\n", err)
		os.Exit(1)
	}
}

// setLoggers sends envtest's and client-go's warnings and errors to w; their progress lines
// would bury this command's own. Without a logger controller-runtime prints a
// "log.SetLogger(...) was never called" stack trace at the first line logged more than 30
// seconds after start: the control plane's first build, or any later stop.
func setLoggers(w io.Writer) {
	log := logr.FromSlogHandler(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctrllog.SetLogger(log)
	klog.SetLogger(log.WithName("client-go"))
}

func say(format string, args ...any) {
	fmt.Printf("==> "+format+"\n", args...)
}

func run(ctx context.Context, o options) error {
	if _, err := os.Stat("config/crd/bases"); err != nil {
		return errors.New("run this from the repository root (config/crd/bases not found)")
	}
	state, err := filepath.Abs(o.stateDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		return err
	}
	listen, err := hostPort(o.publicURL)
	if err != nil {
		return err
	}
	for _, addr := range []string{listen, fakeGitHubAddr, fakeLinearAddr, keyServiceAddr, repoHelperAddr, adminAddr} {
		if err := portFree(addr); err != nil {
			return fmt.Errorf("%s is already in use (is another `make run` still running?): %w", addr, err)
		}
	}
	if _, err := os.Stat(o.binary); err != nil {
		return fmt.Errorf("%s not found: build it with `make build`", o.binary)
	}
	if o.local {
		return runLocal(ctx, o, state, listen)
	}

	return runCluster(ctx, o, state, listen)
}

// latchkeyProcess is bin/latchkey running in its own process group.
type latchkeyProcess struct {
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
}

// startLatchkey runs the binary with args, its log going to logPath (and here with -v).
func startLatchkey(o options, logPath string, args ...string) (*latchkeyProcess, error) {
	say("starting %s", o.binary)
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	var logOut io.Writer = logFile
	if o.verbose {
		logOut = io.MultiWriter(logFile, os.Stderr)
	}
	cmd := exec.Command(o.binary, args...)
	cmd.Stdout, cmd.Stderr = logOut, logOut
	// Its own process group keeps the terminal's Ctrl-C away from it, so it is stopped in order
	// (server first, then the control plane it talks to); Pdeathsig stops it if we are killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	p := &latchkeyProcess{cmd: cmd, done: make(chan struct{})}
	go func() { p.waitErr = cmd.Wait(); logFile.Close(); close(p.done) }()
	return p, nil
}

func (p *latchkeyProcess) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	say("stopping latchkey")
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// serveDemo waits for the first issuer's metadata, starts Repo Helper with the demo client's
// credentials, prints the "try it" lines and runs until Ctrl-C or the server exits. ready runs
// once the server answers (the cluster sets up the admin API then); where and resources print
// the lines that differ with and without a cluster; secretCmd prints the demo client's secret.
func serveDemo(ctx context.Context, srv *latchkeyProcess, issuers []string, logPath string,
	creds func(context.Context) (string, string, error), ready func() error, where, resources func(), secretCmd string) error {
	metadata := issuers[0] + "/.well-known/oauth-authorization-server"
	if err := waitFor(ctx, metadata, srv.done, &srv.waitErr); err != nil {
		tail(logPath)
		return err
	}
	if err := ready(); err != nil {
		tail(logPath)
		return err
	}

	helper, stopHelper, err := startRepoHelper(ctx, creds, issuers[0])
	if err != nil {
		tail(logPath)
		return err
	}
	defer stopHelper()

	fmt.Println()
	fmt.Println("Latchkey is running. Ctrl-C stops everything started here.")
	fmt.Println()
	for _, iss := range issuers {
		fmt.Printf("issuer: %s\n", iss)
	}
	where()
	fmt.Println()
	fmt.Println("Demo people (sign in at the issuer's /sign-in page):")
	for _, p := range demoPeople {
		fmt.Printf("  %s  password: %s\n", p.email, p.password)
	}
	fmt.Printf("Fake GitHub at http://%s for the demo Connector:\n", fakeGitHubAddr)
	fmt.Println("  alice-gh  password: alice-gh-pass")
	fmt.Println("  mallory-gh  password: mallory-gh-pass")
	printDemoServices()
	fmt.Println()
	fmt.Printf("metadata:   curl %s\n", metadata)
	resources()
	fmt.Printf("server log: %s\n", logPath)
	fmt.Println()
	fmt.Printf("mcp: %s  (Repo Helper, the demo MCP server; walkthrough in docs/connections-for-agents.md)\n", helper.resource)
	// The client secret is not printed: terminals are scrolled back and pasted. The command
	// reads it from where the controller wrote it.
	fmt.Printf("try:        export REPO_HELPER_CLIENT_ID=%s\n", helper.clientID)
	fmt.Printf("            export REPO_HELPER_CLIENT_SECRET=$(%s)\n", secretCmd)
	fmt.Println("            go run ./examples/repohelper/cmd/repo-helper call")

	select {
	case <-ctx.Done():
		fmt.Println()
		return nil
	case <-srv.done:
		tail(logPath)
		return fmt.Errorf("latchkey exited on its own: %w (log above, full log in %s)", srv.waitErr, logPath)
	}
}

// applyOrder puts what other objects live in or refer to first. The controllers cope with any
// order (GitOps tools apply in any order), but a namespace must exist before its objects.
var applyOrder = map[string]int{
	"Namespace":      0,
	"Secret":         1,
	"ConfigMap":      1,
	"RedirectPolicy": 2,
	"Project":        3,
	"Connector":      4,
	"OAuthClient":    5,
}

// readManifests reads every YAML document under dir (kustomization files excepted), in
// dependency order.
func readManifests(dir string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		ext := filepath.Ext(path)
		if (ext != ".yaml" && ext != ".yml") || strings.HasPrefix(d.Name(), "kustomization.") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			var m map[string]any
			if err := dec.Decode(&m); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return fmt.Errorf("%s: %w", path, err)
			}
			if len(m) == 0 {
				continue // an empty document between separators
			}
			u := &unstructured.Unstructured{Object: m}
			if u.GetKind() == "" || u.GetAPIVersion() == "" {
				return fmt.Errorf("%s: a document has no kind or apiVersion", path)
			}
			objs = append(objs, u)
		}
	})
	if err != nil {
		return nil, err
	}
	rank := func(u *unstructured.Unstructured) int {
		if r, ok := applyOrder[u.GetKind()]; ok {
			return r
		}
		return len(applyOrder)
	}
	sort.SliceStable(objs, func(i, j int) bool { return rank(objs[i]) < rank(objs[j]) })
	return objs, nil
}

// issuersOf lists the issuer of every Project in objs: {publicURL}/{namespace}/{name}.
func issuersOf(objs []*unstructured.Unstructured, publicURL string) []string {
	var out []string
	for _, u := range objs {
		if u.GetKind() == "Project" && strings.HasPrefix(u.GetAPIVersion(), "latchkey.dev/") {
			ns := u.GetNamespace()
			if ns == "" {
				ns = "default"
			}
			out = append(out, publicURL+"/"+ns+"/"+u.GetName())
		}
	}
	return out
}

func startFakeGitHub() (stop func(), err error) {
	gh := fakegithub.New(fakegithub.Options{
		ClientID:     "latchkey-demo",
		ClientSecret: "demo-upstream-secret",
		Accounts: []fakegithub.Account{
			{ID: 1001, Login: "alice-gh", Name: "Alice", Password: "alice-gh-pass", Repos: []fakegithub.Repo{
				{Name: "diary", Private: true}, {Name: "website"},
			}},
			{ID: 1002, Login: "mallory-gh", Name: "Mallory", Password: "mallory-gh-pass", Repos: []fakegithub.Repo{
				{Name: "plans", Private: true}, {Name: "dotfiles"},
			}},
		},
	})
	ln, err := net.Listen("tcp", fakeGitHubAddr)
	if err != nil {
		return nil, fmt.Errorf("fake GitHub: %w", err)
	}
	srv := &http.Server{Handler: gh, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	say("fake GitHub listening on http://%s", fakeGitHubAddr)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// waitFor polls url until it answers 200, the server exits, or the user gives up.
func waitFor(ctx context.Context, url string, exited <-chan struct{}, exitErr *error) error {
	say("waiting for %s", url)
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(3 * time.Minute)
	last := "no answer yet"
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return errors.New("interrupted while waiting for the server")
		case <-exited:
			return fmt.Errorf("latchkey exited before serving the demo project: %w", *exitErr)
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not answer 200 within 3 minutes (last: %s)", url, last)
}

func hostPort(publicURL string) (string, error) {
	rest, ok := strings.CutPrefix(publicURL, "http://")
	if !ok {
		return "", fmt.Errorf("--public-url %q: make run serves plain http on loopback", publicURL)
	}
	host, _, _ := strings.Cut(rest, "/")
	if _, _, err := net.SplitHostPort(host); err != nil {
		host += ":80"
	}
	return host, nil
}

func portFree(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return ln.Close()
}

// tail prints the last lines of the server log, where the reason for a failure usually is.
func tail(path string) {
	const n = 40
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	fmt.Fprintf(os.Stderr, "--- last lines of %s ---\n", path)
	for _, l := range lines {
		fmt.Fprintln(os.Stderr, l)
	}
}

// Package lkproc runs the real latchkey binary without a cluster (`latchkey serve
// --config-dir`, docs/no-cluster.md), configured from config/samples' own files with the demo
// Connector pointed at a fake GitHub, for tests that need whole processes: two versions serving
// one PostgreSQL database during an upgrade (test/upgrade), a fresh install on a restored
// database (test/restore).
//
// Every process of one Demo shares what the cluster would share: the configuration directory,
// the objects' identities and the OAuthClients' credentials (copied from the first process's
// data directory, as every pod reads the same API server), the sealing keys file (the keys
// Secret) and the database. Requests reach them through one front (the Service), which the test
// points at one process or another, so every process serves the same public URL.
package lkproc

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"latchkey.dev/latchkey/internal/testenv"
	"latchkey.dev/latchkey/internal/upstream/fakegithub"
	"latchkey.dev/latchkey/test/stack"
)

// The demo of config/samples.
const (
	Namespace   = "latchkey-demo"
	Alice       = "alice@example.com"
	AlicePass   = "alice-demo-pass"
	Mallory     = "mallory@example.com"
	MalloryPass = "mallory-demo-pass"
	RedirectURI = "http://127.0.0.1:8070/callback"
)

// serviceClient is an OAuthClient the tests add to the demo: a service with client credentials.
const serviceClient = `apiVersion: latchkey.dev/v1alpha1
kind: OAuthClient
metadata:
  name: nightly-report
  namespace: latchkey-demo
spec:
  projectRef:
    name: demo
  displayName: Nightly report
  grantTypes:
    - client_credentials
  tokenEndpointAuthMethod: client_secret_basic
`

// ---------------------------------------------------------------------------------------------
// Building

var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
)

// Build builds ./cmd/latchkey of this checkout, once per test binary, and returns its path.
func Build(t testing.TB) string {
	t.Helper()
	testenv.SkipShort(t, "to build and run the latchkey binary")
	buildOnce.Do(func() {
		root, err := repoRoot()
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "latchkey-lkproc-")
		if err != nil {
			buildErr = err
			return
		}
		buildBin = filepath.Join(dir, "latchkey")
		buildErr = goBuild(filepath.Join(root, "cmd", "latchkey"), root, buildBin, "")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// RemoveBuild removes what Build built; a TestMain calls it after the tests.
func RemoveBuild() {
	if buildBin != "" {
		os.RemoveAll(filepath.Dir(buildBin))
	}
}

// BuildCommit builds ./cmd/latchkey as it was at commit of this repository's history and
// returns its path and the directory holding commit's tree (whose config/samples a demo of that
// release is made from). The tree is taken with `git archive` into the user's cache directory
// (~/.cache/latchkey/previous/<commit>), which is never changed once complete: the compiled
// packages of a path that stays the same are found in Go's build cache by the next run, and the
// binary itself is reused. Outside a git checkout the test is skipped; a commit the clone does
// not have (a shallow clone) fails it.
func BuildCommit(t testing.TB, commit string) (bin, tree string) {
	t.Helper()
	testenv.SkipShort(t, "to build and run a previous release of latchkey")
	root, err := repoRoot()
	if err != nil {
		t.Skipf("building the previous release needs this repository's git history: %v", err)
	}
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		t.Fatalf("commit %s is not in this clone (a shallow clone? git fetch --unshallow): %v %s", commit, err, out)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir() // no $HOME: built again by each run
	}
	dir := filepath.Join(cache, "latchkey", "previous", commit)
	bin = filepath.Join(dir, "latchkey")
	src := filepath.Join(dir, "src")
	complete := func() bool {
		_, err := os.Stat(filepath.Join(src, ".complete"))
		return err == nil
	}
	if _, err := os.Stat(bin); err == nil && complete() {
		return bin, src
	}
	if !complete() {
		// The tree is extracted beside and renamed into place whole, so a run that is
		// interrupted, or another one at the same time, never builds from half a tree.
		tmpSrc := fmt.Sprintf("%s.%d.tmp", src, os.Getpid())
		if err := os.RemoveAll(tmpSrc); err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(tmpSrc)
		if err := extract(root, commit, tmpSrc); err != nil {
			t.Fatalf("git archive %s: %v", commit, err)
		}
		if err := os.WriteFile(filepath.Join(tmpSrc, ".complete"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmpSrc, src); err != nil && !complete() {
			t.Fatalf("%v (remove %s and run again)", err, src)
		}
	}
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	if err := goBuild("./cmd/latchkey", src, tmp, commit); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	return bin, src
}

func repoRoot() (string, error) {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("not inside a git checkout: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// extract writes commit's tree into dir.
func extract(root, commit, dir string) error {
	cmd := exec.Command("git", "-C", root, "archive", "--format=tar", commit)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	tr := tar.NewReader(out)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		name := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(name, dir+string(filepath.Separator)) {
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(name, 0o755)
		case tar.TypeSymlink:
			if err = os.MkdirAll(filepath.Dir(name), 0o755); err == nil {
				err = os.Symlink(h.Linkname, name)
			}
		case tar.TypeReg:
			err = writeFile(name, tr, os.FileMode(h.Mode)&0o755|0o600)
		}
		if err != nil {
			return err
		}
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("%w: %s", err, stderr.String())
	}
	return nil
}

func writeFile(name string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// goBuild builds pkg in dir with the environment `go test` runs in, so the dependencies the
// tests compiled are found in the build cache.
func goBuild(pkg, dir, out, version string) error {
	args := []string{"build", "-o", out}
	if version != "" {
		args = append(args, "-ldflags", "-X main.version="+version)
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s in %s: %w\n%s", pkg, dir, err, b)
	}
	if testing.Verbose() {
		fmt.Printf("lkproc: built %s from %s in %s\n", pkg, dir, time.Since(start).Round(time.Second))
	}
	return nil
}

// ---------------------------------------------------------------------------------------------
// The demo

// Demo is the demo installation: a fake GitHub, the configuration directory, the keys file and
// the front every process serves behind.
type Demo struct {
	t testing.TB
	// Base is the public URL (the front); Issuer the demo Project's issuer.
	Base, Issuer string
	ConfigDir    string
	// KeysFile holds the sealing keys, one id=key per line (the keys Secret).
	KeysFile string
	GitHub   *fakegithub.Server
	GHURL    string

	front    *httptest.Server
	backend  atomic.Pointer[Process]
	identity string // data directory whose objects.yaml and secrets/ later processes copy

	// Agent is Repo Helper's credentials; Service the service client's.
	AgentID, AgentSecret     string
	ServiceID, ServiceSecret string
}

// NewDemo prepares a demo: config/samples of tree (a checkout's top directory; "" for this
// one) with the service client added and the Connector pointed at a fake GitHub, and a keys
// file with one fresh key. An upgrade starts from the previous release's samples: the objects
// an installation has are those the release it runs accepts.
func NewDemo(t testing.TB, tree string) *Demo {
	t.Helper()
	root := tree
	if root == "" {
		var err error
		if root, err = repoRoot(); err != nil {
			t.Skip(err)
		}
	}
	gh := fakegithub.New(fakegithub.Options{ClientID: "latchkey-demo", ClientSecret: "demo-upstream-secret", Accounts: []fakegithub.Account{
		{ID: 1001, Login: "alice-gh", Name: "Alice", Password: "alice-gh-pass"},
		{ID: 1002, Login: "mallory-gh", Name: "Mallory", Password: "mallory-gh-pass"},
	}})
	ghSrv := httptest.NewServer(gh)
	t.Cleanup(ghSrv.Close)
	d := &Demo{t: t, ConfigDir: t.TempDir(), GitHub: gh, GHURL: ghSrv.URL}
	samples, err := filepath.Glob(filepath.Join(root, "config", "samples", "*.yaml"))
	must(t, err)
	for _, f := range samples {
		b, err := os.ReadFile(f)
		must(t, err)
		b = []byte(strings.ReplaceAll(string(b), "http://127.0.0.1:8090", ghSrv.URL))
		must(t, os.WriteFile(filepath.Join(d.ConfigDir, filepath.Base(f)), b, 0o600))
	}
	must(t, os.WriteFile(filepath.Join(d.ConfigDir, "nightly-report.yaml"), []byte(serviceClient), 0o600))
	d.KeysFile = filepath.Join(t.TempDir(), "keys")
	d.WriteKeys(map[string][]byte{"2026-12": randomKey()})

	d.front = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := d.backend.Load()
		if p == nil {
			http.Error(w, "no backend", http.StatusBadGateway)
			return
		}
		u, _ := url.Parse(p.Addr)
		rp := httputil.NewSingleHostReverseProxy(u)
		rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, "front: "+err.Error(), http.StatusBadGateway)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(d.front.Close)
	d.Base = d.front.URL
	d.Issuer = d.Base + "/" + Namespace + "/demo"
	return d
}

func randomKey() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return k
}

// WriteKeys replaces the keys file.
func (d *Demo) WriteKeys(keys map[string][]byte) {
	var b strings.Builder
	for id, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", id, base64.StdEncoding.EncodeToString(k))
	}
	must(d.t, os.WriteFile(d.KeysFile, []byte(b.String()), 0o600))
}

// Use sends every request the front receives from now on to p.
func (d *Demo) Use(p *Process) { d.backend.Store(p) }

// serving names the process the front sends requests to, for messages.
func (d *Demo) serving() string {
	if p := d.backend.Load(); p != nil {
		return p.Name
	}
	return "nobody"
}

// Process is one running `latchkey serve`.
type Process struct {
	Name    string
	Addr    string
	DataDir string
	cmd     *exec.Cmd
	log     string
	done    chan struct{}
	err     error
}

// Start runs bin on database (a postgres:// DSN or sqlite:FILE) with the demo's configuration
// and keys, and waits until it serves the demo Project. The first process of a demo makes the
// objects' identities and the clients' credentials; later ones start from a copy of them.
func (d *Demo) Start(name, bin, database string) *Process {
	t := d.t
	t.Helper()
	p := &Process{Name: name, DataDir: filepath.Join(t.TempDir(), "data"), done: make(chan struct{})}
	if d.identity != "" {
		must(t, os.CopyFS(filepath.Join(p.DataDir, "secrets"), os.DirFS(filepath.Join(d.identity, "secrets"))))
		b, err := os.ReadFile(filepath.Join(d.identity, "objects.yaml"))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(p.DataDir, "objects.yaml"), b, 0o600))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := ln.Addr().String()
	ln.Close()
	p.Addr = "http://" + addr
	logFile, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	must(t, err)
	p.log = logFile.Name()
	p.cmd = exec.Command(bin, "serve", "--config-dir", d.ConfigDir, "--data-dir", p.DataDir,
		"--database", database, "--keys-file", d.KeysFile,
		"--listen", addr, "--public-url", d.Base, "--metrics-listen", "0", "--log-format", "text")
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	must(t, p.cmd.Start())
	go func() {
		p.err = p.cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("%s's log:\n%s", name, p.Log())
		}
	})
	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case <-p.done:
			t.Fatalf("%s exited while starting: %v\n%s", name, p.err, p.Log())
		default:
		}
		resp, err := http.Get(p.Addr + "/" + Namespace + "/demo/.well-known/oauth-authorization-server")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not serve the demo Project within 90s:\n%s", name, p.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if d.identity == "" {
		d.identity = p.DataDir
		d.AgentID, d.AgentSecret = credentials(t, p.DataDir, "repo-helper-credentials")
		d.ServiceID, d.ServiceSecret = credentials(t, p.DataDir, "nightly-report-credentials")
	}
	return p
}

func credentials(t testing.TB, dataDir, name string) (id, secret string) {
	t.Helper()
	path := filepath.Join(dataDir, "secrets", Namespace, name+".yaml")
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			var sec corev1.Secret
			must(t, yaml.Unmarshal(b, &sec))
			if id, secret = string(sec.Data["client_id"]), string(sec.Data["client_secret"]); id != "" && secret != "" {
				return id, secret
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no credentials in %s: %v", path, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop ends the process as Kubernetes ends a pod (SIGTERM) and waits for it.
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Log is what the process wrote so far.
func (p *Process) Log() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// ---------------------------------------------------------------------------------------------
// Requests

// Browser signs a person in through the front.
func (d *Demo) Browser(email, password string) *stack.Browser {
	d.t.Helper()
	b := stack.NewBrowser(d.Base, d.Issuer)
	must(d.t, b.SignIn(email, password))
	return b
}

// CodeFlow is Repo Helper's authorization code flow for the person signed in to b: its access
// and refresh tokens.
func (d *Demo) CodeFlow(b *stack.Browser) stack.Answer {
	d.t.Helper()
	pk := stack.NewPKCE()
	code, err := b.Authorize(d.AgentID, RedirectURI, "", "", "", pk)
	if err != nil {
		d.t.Fatalf("authorization on %s: %v", d.serving(), err)
	}
	a := d.Agent("/token", url.Values{"grant_type": {"authorization_code"}, "code": {code},
		"redirect_uri": {RedirectURI}, "code_verifier": {pk.Verifier}})
	if a.Status != http.StatusOK || a.Str("access_token") == "" || a.Str("refresh_token") == "" {
		d.t.Fatalf("code redemption on %s: %d %s", d.serving(), a.Status, a.Raw)
	}
	return a
}

// Agent posts a form to a path under the issuer as Repo Helper.
func (d *Demo) Agent(path string, form url.Values) stack.Answer {
	return d.post(path, form, d.AgentID, d.AgentSecret)
}

// Service posts a form as the service client.
func (d *Demo) Service(path string, form url.Values) stack.Answer {
	return d.post(path, form, d.ServiceID, d.ServiceSecret)
}

func (d *Demo) post(path string, form url.Values, id, secret string) stack.Answer {
	d.t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, d.Issuer+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(id), url.QueryEscape(secret))
	a, err := stack.Do(req)
	must(d.t, err)
	return a
}

// Exchange is Repo Helper asking for the GitHub token of subject's person.
func (d *Demo) Exchange(subject string) stack.Answer {
	d.t.Helper()
	return d.Agent("/token", url.Values{
		"grant_type":         {"urn:ietf:params:oauth:grant-type:token-exchange"},
		"subject_token":      {subject},
		"subject_token_type": {"urn:ietf:params:oauth:token-type:access_token"},
		"audience":           {"github"},
	})
}

// Refresh is Repo Helper refreshing.
func (d *Demo) Refresh(rt string) stack.Answer {
	d.t.Helper()
	return d.Agent("/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}})
}

// Active is whether Repo Helper's introspection says token is active.
func (d *Demo) Active(token string) bool {
	d.t.Helper()
	a := d.Agent("/introspect", url.Values{"token": {token}})
	if a.Status != http.StatusOK {
		d.t.Fatalf("introspection on %s: %d %s", d.serving(), a.Status, a.Raw)
	}
	active, _ := a.Body["active"].(bool)
	return active
}

// ConnectGitHub finishes the connect link of refusal (an exchange's connect_required answer)
// in b, signing in at the fake GitHub as login. between runs after the Connect button took the
// browser to GitHub and before GitHub's redirect comes back: an upgrade may switch processes
// there.
func (d *Demo) ConnectGitHub(b *stack.Browser, refusal stack.Answer, login string, between func()) {
	d.t.Helper()
	link := strings.TrimPrefix(refusal.Str("connect_uri"), d.Base)
	if link == "" {
		d.t.Fatalf("no connect link: %d %s", refusal.Status, refusal.Raw)
	}
	offer, err := b.Get(link)
	must(d.t, err)
	toGitHub, err := b.Press(offer, "Connect GitHub")
	if err != nil || toGitHub.Status != http.StatusSeeOther {
		d.t.Fatalf("Connect on %s: %v %d %s", d.serving(), err, toGitHub.Status, toGitHub.Body)
	}
	ghURL, _ := url.Parse(d.GHURL)
	b.Jar.SetCookies(ghURL, []*http.Cookie{d.GitHub.SessionCookie(login)})
	d.GitHub.Approve(login, "latchkey-demo")
	if between != nil {
		between()
	}
	done, err := b.Follow(toGitHub)
	if err != nil || done.Status != http.StatusOK {
		d.t.Fatalf("callback on %s: %v %d %s", d.serving(), err, done.Status, done.Body)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Package nocluster tells the seeds' key stories against `latchkey serve --config-dir`: the real
// binary, no kube-apiserver, configured from config/samples' own files (the demo `make
// run-local` serves) with the demo Connector pointed at a fake GitHub on a free port. The
// stories are the ones test/attacks and test/logs tell against the in-process server: the
// connect link refused to the wrong person, the upstream authorization URL forwarded to someone
// else, connect then exchange; and a broken edit of the directory leaves all of it serving.
package nocluster_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"latchkey.dev/latchkey/internal/testenv"
	"latchkey.dev/latchkey/internal/upstream/fakegithub"
	"latchkey.dev/latchkey/test/stack"
)

const (
	ns          = "latchkey-demo"
	alice       = "alice@example.com"
	alicePass   = "alice-demo-pass"
	mallory     = "mallory@example.com"
	malloryPass = "mallory-demo-pass"
	redirectURI = "http://127.0.0.1:8070/callback"
)

type server struct {
	base, issuer, dataDir, configDir string
	clientID, clientSecret           string
	gh                               *fakegithub.Server
	ghURL                            string
}

// start copies config/samples, points its Connector at a fake GitHub, builds latchkey as `make
// build-local` builds it and runs `latchkey serve` on a free port.
func start(t *testing.T) *server {
	t.Helper()
	testenv.SkipShort(t, "to build and run the latchkey binary")
	gh := fakegithub.New(fakegithub.Options{ClientID: "latchkey-demo", ClientSecret: "demo-upstream-secret", Accounts: []fakegithub.Account{
		{ID: 1001, Login: "alice-gh", Name: "Alice", Password: "alice-gh-pass"},
		{ID: 1002, Login: "mallory-gh", Name: "Mallory", Password: "mallory-gh-pass"},
	}})
	ghSrv := httptest.NewServer(gh)
	t.Cleanup(ghSrv.Close)

	s := &server{configDir: t.TempDir(), dataDir: filepath.Join(t.TempDir(), "data"), gh: gh, ghURL: ghSrv.URL}
	samples, err := filepath.Glob("../../config/samples/*.yaml")
	must(t, err)
	for _, f := range samples {
		b, err := os.ReadFile(f)
		must(t, err)
		b = []byte(strings.ReplaceAll(string(b), "http://127.0.0.1:8090", ghSrv.URL))
		must(t, os.WriteFile(filepath.Join(s.configDir, filepath.Base(f)), b, 0o600))
	}

	bin := buildLocal(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := ln.Addr().String()
	ln.Close()
	s.base = "http://" + addr
	s.issuer = s.base + "/" + ns + "/demo"
	logFile, err := os.Create(filepath.Join(t.TempDir(), "latchkey.log"))
	must(t, err)
	cmd := exec.Command(bin, "serve", "--config-dir", s.configDir, "--data-dir", s.dataDir,
		"--listen", addr, "--public-url", s.base, "--metrics-listen", "0", "--config-poll", "50ms", "--log-format", "text")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	must(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("server log:\n%s", b)
		}
	})
	waitFor(t, "metadata", func() bool {
		resp, err := http.Get(s.issuer + "/.well-known/oauth-authorization-server")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	b, err := os.ReadFile(filepath.Join(s.dataDir, "secrets", ns, "repo-helper-credentials.yaml"))
	must(t, err)
	var sec corev1.Secret
	must(t, yaml.Unmarshal(b, &sec))
	s.clientID, s.clientSecret = string(sec.Data["client_id"]), string(sec.Data["client_secret"])
	if s.clientID == "" || s.clientSecret == "" {
		t.Fatal("no credentials for Repo Helper")
	}
	return s
}

func (s *server) browser(t *testing.T, email, password string) *stack.Browser {
	t.Helper()
	b := stack.NewBrowser(s.base, s.issuer)
	must(t, b.SignIn(email, password))
	return b
}

// accessToken is Repo Helper's code flow for the person signed in to b.
func (s *server) accessToken(t *testing.T, b *stack.Browser) string {
	t.Helper()
	pk := stack.NewPKCE()
	code, err := b.Authorize(s.clientID, redirectURI, "", "", "", pk)
	must(t, err)
	a := s.post(t, "/token", url.Values{"grant_type": {"authorization_code"}, "code": {code},
		"redirect_uri": {redirectURI}, "code_verifier": {pk.Verifier}})
	if a.Status != http.StatusOK || a.Str("access_token") == "" {
		t.Fatalf("code redemption: %d %s", a.Status, a.Raw)
	}
	return a.Str("access_token")
}

func (s *server) exchange(t *testing.T, subject string) stack.Answer {
	t.Helper()
	return s.post(t, "/token", url.Values{
		"grant_type":         {"urn:ietf:params:oauth:grant-type:token-exchange"},
		"subject_token":      {subject},
		"subject_token_type": {"urn:ietf:params:oauth:token-type:access_token"},
		"audience":           {"github"},
	})
}

func (s *server) post(t *testing.T, path string, form url.Values) stack.Answer {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, s.issuer+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(s.clientID), url.QueryEscape(s.clientSecret))
	a, err := stack.Do(req)
	must(t, err)
	return a
}

// linkPath is the path of a connect link under the server.
func (s *server) linkPath(a stack.Answer) string {
	return strings.TrimPrefix(a.Str("connect_uri"), s.base)
}

func TestSeedStoriesWithoutACluster(t *testing.T) {
	s := start(t)
	aliceB := s.browser(t, alice, alicePass)
	malloryB := s.browser(t, mallory, malloryPass)
	aliceToken := s.accessToken(t, aliceB)
	malloryToken := s.accessToken(t, malloryB)

	// The agent asks for Alice's GitHub token: refused with a connect link made for her.
	refusal := s.exchange(t, aliceToken)
	if refusal.Status != http.StatusBadRequest || refusal.Str("reason") != "connect_required" || refusal.Str("connect_uri") == "" {
		t.Fatalf("first exchange: %d %s", refusal.Status, refusal.Raw)
	}
	if again := s.exchange(t, aliceToken); again.Str("connect_uri") != refusal.Str("connect_uri") {
		t.Errorf("asking again while the link is open gave another link: %s", again.Raw)
	}

	// The forwarded link: Mallory opens Alice's link and is refused.
	if p, err := malloryB.Get(s.linkPath(refusal)); err != nil || !strings.Contains(p.Body, "This link was made for another account") {
		t.Fatalf("Mallory opening Alice's link: %v %d %s", err, p.Status, p.Body)
	}

	// The forwarded upstream authorization URL: Mallory starts connecting with her own link and
	// gets Alice to open GitHub's authorization URL; the callback lands in Alice's browser and
	// must not connect Alice's GitHub account to Mallory.
	mRefusal := s.exchange(t, malloryToken)
	offer, err := malloryB.Get(s.linkPath(mRefusal))
	must(t, err)
	toGitHub, err := malloryB.Press(offer, "Connect GitHub")
	if err != nil || toGitHub.Status != http.StatusSeeOther {
		t.Fatalf("Mallory's Connect: %v %d", err, toGitHub.Status)
	}
	ghURL, _ := url.Parse(s.ghURL)
	aliceB.Jar.SetCookies(ghURL, []*http.Cookie{s.gh.SessionCookie("alice-gh")})
	s.gh.Approve("alice-gh", "latchkey-demo")
	landed, err := aliceB.Follow(toGitHub)
	must(t, err)
	if landed.Status != http.StatusForbidden || !strings.Contains(landed.Body, "It is not yours to finish.") || !strings.Contains(landed.Body, "Nothing was saved") {
		t.Fatalf("the callback of Mallory's connection in Alice's browser: %d %s", landed.Status, landed.Body)
	}
	if still := s.exchange(t, malloryToken); still.Str("reason") != "connect_required" {
		t.Fatalf("Mallory got a connection from Alice's browser: %s", still.Raw)
	}

	// Alice connects through her own link, and the exchange hands out her GitHub token.
	offer, err = aliceB.Get(s.linkPath(refusal))
	must(t, err)
	toGitHub, err = aliceB.Press(offer, "Connect GitHub")
	if err != nil || toGitHub.Status != http.StatusSeeOther {
		t.Fatalf("Alice's Connect: %v %d", err, toGitHub.Status)
	}
	done, err := aliceB.Follow(toGitHub)
	if err != nil || done.Status != http.StatusOK {
		t.Fatalf("Alice's callback: %v %d %s", err, done.Status, done.Body)
	}
	got := s.exchange(t, aliceToken)
	if got.Status != http.StatusOK || got.Str("access_token") == "" {
		t.Fatalf("exchange after connecting: %d %s", got.Status, got.Raw)
	}

	// A broken edit is refused (status/directory.yaml names the file) and everything above
	// keeps working with the last good configuration.
	project := filepath.Join(s.configDir, "latchkey_v1alpha1_project.yaml")
	b, err := os.ReadFile(project)
	must(t, err)
	tmp := filepath.Join(s.configDir, ".project.tmp")
	must(t, os.WriteFile(tmp, []byte(strings.Replace(string(b), "link: 30m", "link: 30d", 1)), 0o600))
	must(t, os.Rename(tmp, project))
	waitFor(t, "the refusal", func() bool {
		var st struct {
			Ready bool   `json:"ready"`
			Error string `json:"error"`
		}
		b, _ := os.ReadFile(filepath.Join(s.dataDir, "status", "directory.yaml"))
		return yaml.Unmarshal(b, &st) == nil && !st.Ready &&
			strings.Contains(st.Error, "latchkey_v1alpha1_project.yaml:6 (document 1): ") &&
			strings.Contains(st.Error, "lifetimes.link must be between 1m and 24h")
	})
	if again := s.exchange(t, aliceToken); again.Status != http.StatusOK {
		t.Fatalf("exchange after a broken edit: %d %s", again.Status, again.Raw)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 60s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

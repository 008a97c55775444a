package configdir

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/yaml"

	"latchkey.dev/latchkey/controllers"
	"latchkey.dev/latchkey/internal/config"
)

const project = `# The project.
apiVersion: latchkey.dev/v1alpha1
kind: Project
metadata:
  name: demo
  namespace: team
spec:
  signIn:
    passwordSecretRef: {name: people, key: passwords.yaml}
  lifetimes:
    accessToken: 1h
`

const people = `apiVersion: v1
kind: Secret
metadata: {name: people, namespace: team, labels: {latchkey.dev/use: project}}
stringData:
  passwords.yaml: |
    - email: alice@example.com
      hash: $2a$10$5ai4.gQFC2HTMrdNoweK0eV.EidIA5.eyvrOffs4Ao4TM7P23dxoe
`

const machine = `apiVersion: latchkey.dev/v1alpha1
kind: OAuthClient
metadata: {name: reporter, namespace: team}
spec:
  projectRef: {name: demo}
  grantTypes: [client_credentials]
`

type fixture struct {
	dir, data string
	holder    *config.Holder
	src       *Source
}

func newFixture(t *testing.T, files map[string]string) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir(), data: filepath.Join(t.TempDir(), "data"), holder: &config.Holder{}}
	for name, content := range files {
		f.write(t, name, content)
	}
	sa, err := controllers.NewStandalone(controllers.Options{PublicURL: "http://127.0.0.1:8080", Config: f.holder}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	f.src, err = New(Options{Dir: f.dir, DataDir: f.data, Standalone: sa, Logger: logr.Discard(), Poll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) write(t *testing.T, name, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(filepath.Join(f.dir, name)), 0o700); err != nil {
		t.Fatal(err)
	}
	// Written whole and renamed into place, as editors and configuration tools do: on a machine
	// busy enough to pause the writer for two polls, a truncate-then-write would be read half
	// done twice.
	tmp := filepath.Join(f.dir, "."+filepath.Base(name)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(f.dir, name)); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) directoryStatus(t *testing.T) directoryDoc {
	t.Helper()
	var d directoryDoc
	b, err := os.ReadFile(filepath.Join(f.data, "status", directoryStatus))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestValidDirectoryCompiles(t *testing.T) {
	f := newFixture(t, map[string]string{
		"project.yaml":       project + "---\n" + people,
		"clients/a.yml":      machine,
		"kustomization.yaml": "resources: [project.yaml]\n",
		"notes.txt":          "not read",
	})
	if err := f.src.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := f.holder.Load().Project("team/demo")
	if p == nil || len(p.Clients) != 1 || p.Lifetimes.AccessToken != time.Hour {
		t.Fatalf("compiled %+v", p)
	}
	// The CRD's defaults are applied, as the API server applies them.
	if p.Lifetimes.RecentSignIn != 15*time.Minute {
		t.Errorf("recentSignIn %s, want the CRD default 15m", p.Lifetimes.RecentSignIn)
	}
	if d := f.directoryStatus(t); !d.Ready || d.Error != "" || d.Readings != 1 {
		t.Errorf("status/directory.yaml = %+v", d)
	}
	if _, err := os.Stat(filepath.Join(f.data, "status", "OAuthClient.team.reporter.yaml")); err != nil {
		t.Error(err)
	}

	// The credentials and the client id survive a restart: same identities, same Secret file.
	var id string
	for k := range p.Clients {
		id = k
	}
	cred := filepath.Join(f.data, "secrets", "team", "reporter-credentials.yaml")
	before, err := os.ReadFile(cred)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(cred); fi.Mode().Perm() != 0o600 {
		t.Errorf("credentials file mode %s, want 0600", fi.Mode().Perm())
	}
	g := newFixture(t, nil)
	g.dir = f.dir
	g.src, err = New(Options{Dir: f.dir, DataDir: f.data, Standalone: mustStandalone(t, g.holder), Logger: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.src.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if g.holder.Load().Project("team/demo").Clients[id] == nil {
		t.Error("the client id changed across a restart")
	}
	if after, _ := os.ReadFile(cred); !bytes.Equal(after, before) {
		t.Error("the credentials Secret was replaced across a restart")
	}
}

func mustStandalone(t *testing.T, h *config.Holder) *controllers.Standalone {
	t.Helper()
	sa, err := controllers.NewStandalone(controllers.Options{PublicURL: "http://127.0.0.1:8080", Config: h}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return sa
}

// A file the API server would refuse is refused with the API server's message, naming the file,
// the line its document starts on and the document's position.
func TestRefusalsNameTheFile(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"CEL rule", strings.Replace(strings.TrimPrefix(project, "# The project.\n"), "passwordSecretRef: {name: people, key: passwords.yaml}", "{}", 1),
			[]string{`Project.latchkey.dev "demo" is invalid: spec.signIn: Invalid value: signIn must set passwordSecretRef, oidc, or both`}},
		{"required field", strings.Replace(machine, "  projectRef: {name: demo}\n", "", 1),
			[]string{`OAuthClient.latchkey.dev "reporter" is invalid`, "spec.projectRef: Required value"}},
		{"enum", strings.Replace(machine, "[client_credentials]", "[password]", 1),
			[]string{`spec.grantTypes[0]: Unsupported value: "password"`}},
		{"unknown field", strings.Replace(machine, "spec:\n", "spec:\n  grantType: [x]\n", 1),
			[]string{`strict decoding error: unknown field "spec.grantType"`}},
		{"unknown kind", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
			[]string{"v1 ConfigMap is not read here"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, map[string]string{"a.yaml": people, "b.yaml": "# first\n" + machine + "---\n" + tc.doc})
			err := f.src.Sync(context.Background())
			if err == nil {
				t.Fatal("refused nothing")
			}
			// The second document of b.yaml starts after the 1 comment line, the machine's 6
			// lines and the separator.
			want := append([]string{"b.yaml:9 (document 2): "}, tc.want...)
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
			if d := f.directoryStatus(t); d.Ready || d.Error != err.Error() {
				t.Errorf("status/directory.yaml = %+v", d)
			}
			if f.holder.Load() != nil {
				t.Error("a refused directory was published")
			}
		})
	}
}

// Run picks up a change, and a broken edit keeps the last good configuration serving.
func TestRunFollowsChangesAndKeepsLastGood(t *testing.T) {
	f := newFixture(t, map[string]string{"project.yaml": project, "people.yaml": people, "machine.yaml": machine})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.src.Run(ctx) }()
	defer func() { cancel(); <-done }()

	waitFor(t, "first configuration", func() bool {
		s := f.holder.Load()
		return s != nil && s.Project("team/demo") != nil
	})
	first := f.holder.Load()

	f.write(t, "project.yaml", strings.Replace(project, "accessToken: 1h", "accessToken: 30m", 1))
	waitFor(t, "the edit", func() bool {
		p := f.holder.Load().Project("team/demo")
		return p.Lifetimes.AccessToken == 30*time.Minute
	})
	good := f.holder.Load()
	if good.Version <= first.Version {
		t.Errorf("version %d after %d", good.Version, first.Version)
	}

	f.write(t, "project.yaml", strings.Replace(project, "accessToken: 1h", "accessToken: 3d", 1))
	waitFor(t, "the refusal in status/directory.yaml", func() bool {
		b, _ := os.ReadFile(filepath.Join(f.data, "status", directoryStatus))
		return strings.Contains(string(b), "project.yaml:2 (document 1)") && strings.Contains(string(b), "lifetimes.accessToken must be between 1m and 24h")
	})
	if f.holder.Load() != good {
		t.Error("a broken edit replaced the last good configuration")
	}

	// Removing the client's file removes the client, and its credentials with it.
	if err := os.Remove(filepath.Join(f.dir, "machine.yaml")); err != nil {
		t.Fatal(err)
	}
	f.write(t, "project.yaml", project)
	waitFor(t, "the client to go", func() bool {
		p := f.holder.Load().Project("team/demo")
		return p.Lifetimes.AccessToken == time.Hour && len(p.Clients) == 0
	})
	if _, err := os.Stat(filepath.Join(f.data, "secrets", "team", "reporter-credentials.yaml")); !os.IsNotExist(err) {
		t.Errorf("credentials of a removed client: %v", err)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen within 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestDataDirInsideConfigDir(t *testing.T) {
	dir := t.TempDir()
	sa := mustStandalone(t, &config.Holder{})
	if _, err := New(Options{Dir: dir, DataDir: filepath.Join(dir, "state"), Standalone: sa}); err == nil {
		t.Error("a data directory inside the configuration directory was accepted")
	}
	if _, err := New(Options{Dir: dir, DataDir: filepath.Join(dir, ".latchkey"), Standalone: sa}); err != nil {
		t.Errorf("a hidden data directory inside it: %v", err)
	}
}

func TestSplitDocuments(t *testing.T) {
	docs := splitDocuments([]byte("# c\n\na: 1\n---\n--- # x\n# only a comment\n---\nb: 2\nc: 3\n"))
	if len(docs) != 2 || docs[0].line != 3 || docs[1].line != 8 || string(docs[1].text) != "b: 2\nc: 3\n" {
		t.Errorf("documents %+v", docs)
	}
}

package install_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestInstallPage: docs/install.md is what a new administrator follows from an empty cluster, so
// what it tells them to apply and to set must be true of this tree:
//
//   - every Latchkey manifest on the page is applied with server-side dry run and strict field
//     validation to the test's API server, which has the CRDs (a misspelled or removed field,
//     or a value a CEL rule refuses, fails here);
//   - every values file on the page, the Argo CD Application's valuesObject, and the --set
//     values of every helm command render with the chart (values.schema.json refuses unknown
//     keys and wrong types; the chart refuses what cannot work);
//   - the output of `make -s release-names` shown under "Versions" is what the Makefile prints.
func TestInstallPage(t *testing.T) {
	skip(t)
	page, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	chart := filepath.Join(root, "charts", "latchkey")
	blocks := fencedBlocks(string(page))
	if len(blocks) < 10 {
		t.Fatalf("found %d code blocks in docs/install.md: the parser no longer reads it", len(blocks))
	}
	render := func(t *testing.T, args ...string) {
		t.Helper()
		base := []string{"template", "latchkey", chart, "--namespace", "latchkey-system", "--kube-version", kubeVersion}
		if _, err := helm(t, append(base, args...)...); err != nil {
			t.Error(err)
		}
	}

	var manifests, values, helmCommands int
	for i, b := range blocks {
		switch {
		case b.lang == "yaml" && strings.HasPrefix(b.text, "# latchkey-values.yaml"):
			values++
			t.Run("values "+firstLine(b.text), func(t *testing.T) {
				f := filepath.Join(t.TempDir(), "values.yaml")
				if err := os.WriteFile(f, []byte(b.text), 0o600); err != nil {
					t.Fatal(err)
				}
				render(t, "--set", "publicURL=https://auth.example.com", "-f", f)
			})
		case b.lang == "yaml" && strings.Contains(b.text, "apiVersion: latchkey.dev/"):
			manifests++
			t.Run("manifest "+kindName(b.text), func(t *testing.T) {
				if ns := regexp.MustCompile(`(?m)^  namespace: (\S+)`).FindStringSubmatch(b.text); ns != nil {
					if out, err := kubectl(t, "", "create", "namespace", ns[1]); err != nil && !strings.Contains(out+err.Error(), "AlreadyExists") {
						t.Fatal(err)
					}
				}
				dryRun(t, b.text)
			})
		case b.lang == "yaml" && strings.Contains(b.text, "kind: Application"):
			values++
			t.Run("Argo CD valuesObject", func(t *testing.T) {
				var app struct {
					Spec struct {
						Source struct {
							Chart          string         `json:"chart"`
							TargetRevision string         `json:"targetRevision"`
							Helm           map[string]any `json:"helm"`
						} `json:"source"`
					} `json:"spec"`
				}
				if err := yaml.Unmarshal([]byte(b.text), &app); err != nil {
					t.Fatal(err)
				}
				vo, err := yaml.Marshal(app.Spec.Source.Helm["valuesObject"])
				if err != nil {
					t.Fatal(err)
				}
				f := filepath.Join(t.TempDir(), "values.yaml")
				if err := os.WriteFile(f, vo, 0o600); err != nil {
					t.Fatal(err)
				}
				render(t, "-f", f)
			})
		case b.lang == "sh":
			for j, cmd := range shellCommands(b.text) {
				if len(cmd) < 2 || cmd[0] != "helm" || (cmd[1] != "install" && cmd[1] != "upgrade") {
					continue
				}
				helmCommands++
				args := []string{"--set", "publicURL=https://auth.example.com"}
				for k := 0; k+1 < len(cmd); k++ {
					if cmd[k] == "--set" || cmd[k] == "--set-string" {
						args = append(args, cmd[k], cmd[k+1])
					}
				}
				t.Run("helm command "+strings.Join(cmd[:2], " ")+" "+strconv.Itoa(i)+"."+strconv.Itoa(j), func(t *testing.T) {
					render(t, args...)
				})
			}
		}
		if strings.HasPrefix(b.text, "make -s release-names") {
			t.Run("release names", func(t *testing.T) {
				cmd := exec.Command("make", "-s", "release-names")
				cmd.Dir = root
				out, err := cmd.Output()
				if err != nil {
					t.Fatal(err)
				}
				for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
					if !strings.Contains(b.text, "# "+line+"\n") {
						t.Errorf("docs/install.md does not show %q, which make release-names prints", line)
					}
				}
			})
		}
	}
	if manifests < 4 || values < 3 || helmCommands < 2 {
		t.Errorf("checked %d manifests, %d values files and %d helm commands: the page lost some, or the test no longer finds them",
			manifests, values, helmCommands)
	}
}

type fenced struct{ lang, text string }

// fencedBlocks returns the page's ``` blocks with their language.
func fencedBlocks(page string) []fenced {
	var out []fenced
	for _, m := range regexp.MustCompile("(?s)```([a-z]*)\\n(.*?\\n)```").FindAllStringSubmatch(page, -1) {
		out = append(out, fenced{m[1], m[2]})
	}
	return out
}

// shellCommands splits a shell block into commands (lines joined at a trailing backslash,
// comments dropped) and each into words, honouring single and double quotes. Enough for the
// commands on the page; not a shell.
func shellCommands(text string) [][]string {
	text = strings.ReplaceAll(text, "\\\n", " ")
	var cmds [][]string
	for _, line := range strings.Split(text, "\n") {
		var words []string
		var w strings.Builder
		in, quote, comment := false, rune(0), false
		for _, r := range line {
			switch {
			case quote != 0 && r == quote:
				quote = 0
			case quote != 0:
				w.WriteRune(r)
			case r == '\'' || r == '"':
				quote, in = r, true
			case r == '#' && !in:
				comment = true
			case r == ' ' || r == '\t':
				if in {
					words = append(words, w.String())
					w.Reset()
					in = false
				}
			default:
				w.WriteRune(r)
				in = true
			}
			if comment {
				break
			}
		}
		if in && !comment {
			words = append(words, w.String())
		}
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
	}
	return cmds
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return strings.TrimPrefix(l, "# ")
}

func kindName(s string) string {
	kind := regexp.MustCompile(`(?m)^kind: (\S+)`).FindStringSubmatch(s)
	name := regexp.MustCompile(`(?m)^  name: (\S+)`).FindStringSubmatch(s)
	if kind == nil || name == nil {
		return "?"
	}
	return kind[1] + "/" + name[1]
}

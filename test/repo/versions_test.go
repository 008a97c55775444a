package repo

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestVersionsInDocs: the documentation's install commands and GitOps examples name versions
// that a release really publishes. A release is the git tag v{appVersion}
// (.github/workflows/release.yml refuses any other), which publishes the image
// {REGISTRY}/latchkey:{appVersion} and the chart oci://{REGISTRY}/charts/latchkey at the chart's
// own version; docs/install.md, "Versions", explains the three. So a chart version must be
// Chart.yaml's version, and an image tag or a git tag Chart.yaml's appVersion.
func TestVersionsInDocs(t *testing.T) {
	root := "../.."
	chartYAML, err := os.ReadFile(filepath.Join(root, "charts", "latchkey", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	field := func(name string) string {
		m := regexp.MustCompile(`(?m)^` + name + `:\s*"?([^"\s]+)"?\s*$`).FindSubmatch(chartYAML)
		if m == nil {
			t.Fatalf("Chart.yaml has no %s", name)
		}
		return string(m[1])
	}
	chartVersion, appVersion := field("version"), field("appVersion")

	checks := []struct {
		what string
		re   *regexp.Regexp
		want string
	}{
		{"chart version", regexp.MustCompile(`charts/latchkey(?: --version |:)v?(\d+\.\d+\.\d+)`), chartVersion},
		{"chart version", regexp.MustCompile(`chart: latchkey\s+targetRevision: v?(\d+\.\d+\.\d+)`), chartVersion},
		{"image tag", regexp.MustCompile(`ghcr\.io/latchkey-dev/latchkey:v?(\d+\.\d+\.\d+)`), appVersion},
		{"git tag", regexp.MustCompile(`ref: \{tag: v(\d+\.\d+\.\d+)\}`), appVersion},
		{"git tag", regexp.MustCompile(`(?m)targetRevision: v(\d+\.\d+\.\d+)`), appVersion},
		{"git tag", regexp.MustCompile(`git checkout v(\d+\.\d+\.\d+)`), appVersion},
	}
	seen := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && skipDirs[d.Name()] {
			return filepath.SkipDir
		}
		// The changelog and the decisions record history; the chart README is generated
		// from Chart.yaml.
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() || !strings.HasSuffix(p, ".md") || rel == "CHANGELOG.md" ||
			strings.HasPrefix(rel, filepath.Join("docs", "decisions")) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, c := range checks {
			for _, m := range c.re.FindAllStringSubmatch(string(b), -1) {
				seen++
				if m[1] != c.want {
					t.Errorf("%s: %q names %s %s; Chart.yaml makes it %s", rel, m[0], c.what, m[1], c.want)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 3 {
		t.Fatalf("only %d versions found in the documentation: the patterns no longer match it", seen)
	}
}

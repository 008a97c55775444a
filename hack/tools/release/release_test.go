package main

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	yamlv3 "gopkg.in/yaml.v3"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"sigs.k8s.io/yaml"
)

// TestRelease checks what `make release-dry-run` left in LATCHKEY_RELEASE_DIR, as a release
// would publish it: the image archive, the packaged chart and the SBOM exist and agree with each
// other, with the Makefile's REGISTRY, with Chart.yaml and with the release workflow, so that
// `helm install` of the published chart pulls the image the workflow pushed.
func TestRelease(t *testing.T) {
	dir := os.Getenv("LATCHKEY_RELEASE_DIR")
	if dir == "" {
		t.Skip("LATCHKEY_RELEASE_DIR is not set: run `make release-dry-run`")
	}
	root := filepath.Join("..", "..", "..")
	read := func(p string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	// The one place the registry is named.
	m := regexp.MustCompile(`(?m)^REGISTRY \?= (\S+)$`).FindSubmatch(read("Makefile"))
	if m == nil {
		t.Fatal("no REGISTRY ?= in the Makefile")
	}
	registry := string(m[1])
	if !regexp.MustCompile(`(?m)^IMAGE \?= \$\(REGISTRY\)/latchkey$`).Match(read("Makefile")) {
		t.Fatal("the Makefile's IMAGE is not $(REGISTRY)/latchkey")
	}
	image := registry + "/latchkey"
	var meta struct{ Version, AppVersion string }
	if err := yaml.Unmarshal(read("charts/latchkey/Chart.yaml"), &meta); err != nil {
		t.Fatal(err)
	}
	want := image + ":" + meta.AppVersion

	t.Run("the workflow pushes where the Makefile says, signs and attests", func(t *testing.T) {
		raw := read(".github/workflows/release.yml")
		if strings.Contains(string(raw), registry) {
			t.Errorf("the workflow names the registry %s itself; it must take it from the Makefile", registry)
		}
		// YAML 1.2 (yaml.v3), as GitHub reads it: in YAML 1.1 the key "on" is a boolean.
		var wf struct {
			On struct {
				Push struct {
					Tags []string `yaml:"tags"`
				} `yaml:"push"`
			} `yaml:"on"`
			Permissions map[string]string `yaml:"permissions"`
			Jobs        map[string]struct {
				Permissions map[string]string `yaml:"permissions"`
				Steps       []struct {
					Uses string            `yaml:"uses"`
					Run  string            `yaml:"run"`
					With map[string]string `yaml:"with"`
				} `yaml:"steps"`
			} `yaml:"jobs"`
		}
		if err := yamlv3.Unmarshal(raw, &wf); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(wf.On.Push.Tags, []string{"v*"}) {
			t.Errorf("triggered by tags %v, want [v*]", wf.On.Push.Tags)
		}
		if len(wf.Permissions) != 0 {
			t.Errorf("workflow-wide permissions %v: want none, each job asks", wf.Permissions)
		}
		job, ok := wf.Jobs["release"]
		if !ok {
			t.Fatal("no release job")
		}
		wantPerms := map[string]string{"contents": "write", "packages": "write", "id-token": "write", "attestations": "write"}
		if !mapsEqual(job.Permissions, wantPerms) {
			t.Errorf("job permissions %v, want exactly %v", job.Permissions, wantPerms)
		}
		var runs, uses []string
		for _, s := range job.Steps {
			runs = append(runs, s.Run)
			uses = append(uses, strings.Split(s.Uses, "@")[0])
		}
		all := strings.Join(runs, "\n")
		order := []string{"make -s release-names", "make release-dry-run", "make release-push", `cosign sign --yes "$IMAGE"`,
			`cosign sign --yes "$CHART"`, "cosign attest --yes --type spdxjson --predicate bin/release/latchkey.spdx.json",
			// The binaries: one keyless signature over SHA256SUMS, then the release carries them.
			"cosign sign-blob --yes --bundle bin/release/SHA256SUMS.sigstore.json bin/release/SHA256SUMS",
			"gh release create"}
		last := -1
		for _, s := range order {
			i := strings.Index(all, s)
			if i < 0 || i < last {
				t.Errorf("the workflow does not run %q after the steps before it", s)
			}
			last = i
		}
		for _, u := range []string{"actions/checkout", "actions/setup-go", "sigstore/cosign-installer", "actions/attest-build-provenance"} {
			if !slices.Contains(uses, u) {
				t.Errorf("the workflow does not use %s", u)
			}
		}
		release := all[strings.Index(all, "gh release create"):]
		for _, f := range []string{"bin/release/*.tar.gz", "bin/release/SHA256SUMS ", "bin/release/SHA256SUMS.sigstore.json", "bin/release/" + KrewManifestName} {
			if !strings.Contains(release, f) {
				t.Errorf("the GitHub release does not carry %s", f)
			}
		}
		if !slices.ContainsFunc(job.Steps, func(s struct {
			Uses string            `yaml:"uses"`
			Run  string            `yaml:"run"`
			With map[string]string `yaml:"with"`
		}) bool {
			return strings.HasPrefix(s.Uses, "actions/attest-build-provenance@") && s.With["subject-checksums"] == "bin/release/SHA256SUMS"
		}) {
			t.Error("no build provenance for the binaries (attest-build-provenance with subject-checksums: bin/release/SHA256SUMS)")
		}
		if !strings.Contains(all, `releases/download/$GITHUB_REF_NAME`) {
			t.Error("the workflow does not check that RELEASE_URL is this repository's release")
		}
	})

	var idx struct {
		Manifests []struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	archive := filepath.Join(dir, "latchkey-image.tar")
	if err := json.Unmarshal(tarFile(t, archive, "index.json"), &idx); err != nil {
		t.Fatal(err)
	}
	t.Run("the image archive is named what the chart pulls by default", func(t *testing.T) {
		if len(idx.Manifests) != 1 {
			t.Fatalf("index.json: %d entries", len(idx.Manifests))
		}
		if got := idx.Manifests[0].Annotations["io.containerd.image.name"]; got != want {
			t.Errorf("image %q, want %q", got, want)
		}
	})

	chartFile := filepath.Join(dir, "latchkey-"+meta.Version+".tgz")
	t.Run("the packaged chart", func(t *testing.T) {
		c, err := loader.Load(chartFile)
		if err != nil {
			t.Fatal(err)
		}
		if c.Metadata.Version != meta.Version || c.Metadata.AppVersion != meta.AppVersion {
			t.Errorf("packaged %s/%s, Chart.yaml %s/%s", c.Metadata.Version, c.Metadata.AppVersion, meta.Version, meta.AppVersion)
		}
		img, _ := c.Values["image"].(map[string]any)
		ref := img["repository"].(string) + ":" + img["tag"].(string)
		if img["tag"] == "" {
			ref += c.Metadata.AppVersion // the templates' default
		}
		if ref != want {
			t.Errorf("the chart installs %s by default, the release pushes %s", ref, want)
		}
		if c.Schema == nil {
			t.Error("values.schema.json is not packaged")
		}
		for _, f := range c.Raw {
			if strings.HasPrefix(f.Name, "ci/") || f.Name == "README.md.gotmpl" {
				t.Errorf("%s is packaged (.helmignore)", f.Name)
			}
		}
		if !slices.ContainsFunc(c.Files, func(f *chart.File) bool { return f.Name == "README.md" }) {
			t.Error("README.md is not packaged")
		}
	})

	t.Run("the SBOM lists every module in the image's binary", func(t *testing.T) {
		index, cleanup, err := readArchive(archive)
		if err != nil {
			t.Fatal(err)
		}
		defer cleanup()
		_, bi, err := Binary(index, "linux/amd64")
		if err != nil {
			t.Fatal(err)
		}
		var doc SPDX
		b, err := os.ReadFile(filepath.Join(dir, "latchkey.spdx.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		if doc.SPDXVersion != "SPDX-2.3" || len(doc.Packages) != len(bi.Deps)+2 {
			t.Fatalf("%s with %d packages; the binary has %d modules", doc.SPDXVersion, len(doc.Packages), len(bi.Deps))
		}
		have := map[string]string{}
		for _, p := range doc.Packages {
			have[p.Name] = p.VersionInfo
		}
		if have["latchkey.dev/latchkey"] != meta.AppVersion {
			t.Errorf("the SBOM describes latchkey %q, want %q", have["latchkey.dev/latchkey"], meta.AppVersion)
		}
		if have["stdlib"] != strings.TrimPrefix(bi.GoVersion, "go") {
			t.Errorf("stdlib %q, the binary was built with %s", have["stdlib"], bi.GoVersion)
		}
		for _, d := range bi.Deps {
			v := d.Version
			if d.Replace != nil && d.Replace.Version != "" {
				v = d.Replace.Version
			}
			if have[d.Path] != v && (d.Replace == nil || have[d.Replace.Path] != v) {
				t.Errorf("module %s@%s is in the binary, not in the SBOM", d.Path, v)
			}
		}
	})

	t.Run("the binaries for every platform, SHA256SUMS and the krew manifest", func(t *testing.T) {
		m := regexp.MustCompile(`(?m)^RELEASE_URL \?= (\S+)$`).FindSubmatch(read("Makefile"))
		if m == nil {
			t.Fatal("no RELEASE_URL ?= in the Makefile")
		}
		url := strings.ReplaceAll(string(m[1]), "$(VERSION)", meta.AppVersion)
		checkBuilt(t, checkBinaries(t, dir, meta.AppVersion, url), meta.AppVersion)
	})
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func tarFile(t *testing.T, archive, name string) []byte {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("%s: no %s", archive, name)
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == name {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}

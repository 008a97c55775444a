package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// release is what checkBinaries found in a release directory.
type release struct {
	sums map[string]string // archive name → sha256, from SHA256SUMS
	// files maps each archive to its entries' contents.
	files map[string]map[string][]byte
}

// checkBinaries checks the archives, SHA256SUMS and the krew manifest in dir: every binary for
// every platform is archived, SHA256SUMS holds exactly the archives' real sums, and the krew
// manifest lists every platform once, with an archive of this release, its real sha256, and
// files that are in it.
func checkBinaries(t *testing.T, dir, version, url string) *release {
	t.Helper()
	r := &release{sums: map[string]string{}, files: map[string]map[string][]byte{}}
	f, err := os.Open(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	line := regexp.MustCompile(`^([0-9a-f]{64})  (\S+)$`)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			t.Fatalf("SHA256SUMS: %q is not `sha256  name`", sc.Text())
		}
		r.sums[m[2]] = m[1]
	}
	var want []string
	for _, p := range Platforms {
		for _, b := range Binaries {
			want = append(want, ArchiveName(b, version, p))
		}
	}
	var listed []string
	for name := range r.sums {
		listed = append(listed, name)
	}
	slices.Sort(want)
	slices.Sort(listed)
	if !slices.Equal(listed, want) {
		t.Fatalf("SHA256SUMS lists %v, want %v", listed, want)
	}
	for name, sum := range r.sums {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := sha256.Sum256(b); hex.EncodeToString(got[:]) != sum {
			t.Errorf("%s: SHA256SUMS says %s, the file's is %x", name, sum, got)
		}
		r.files[name] = untar(t, b)
		bin := strings.SplitN(name, "_", 2)[0]
		if _, ok := r.files[name][bin]; !ok {
			t.Errorf("%s holds no %s", name, bin)
		}
		if _, ok := r.files[name]["LICENSE"]; !ok {
			t.Errorf("%s holds no LICENSE", name)
		}
	}

	b, err := os.ReadFile(filepath.Join(dir, KrewManifestName))
	if err != nil {
		t.Fatal(err)
	}
	var p KrewPlugin
	if err := yaml.UnmarshalStrict(b, &p); err != nil {
		t.Fatalf("%s: %v", KrewManifestName, err)
	}
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" || p.Metadata.Name != "latchkey" {
		t.Errorf("krew manifest: %s %s %s", p.APIVersion, p.Kind, p.Metadata.Name)
	}
	if p.Spec.Version != "v"+version || p.Spec.ShortDescription == "" || len(p.Spec.ShortDescription) > 50 || p.Spec.Homepage == "" {
		t.Errorf("krew manifest spec: version %q, shortDescription %q, homepage %q", p.Spec.Version, p.Spec.ShortDescription, p.Spec.Homepage)
	}
	seen := map[string]bool{}
	for _, kp := range p.Spec.Platforms {
		platform := kp.Selector.MatchLabels["os"] + "/" + kp.Selector.MatchLabels["arch"]
		if len(kp.Selector.MatchLabels) != 2 || !slices.Contains(Platforms, platform) || seen[platform] {
			t.Errorf("krew manifest: platform %v is not one of %v, or listed twice", kp.Selector.MatchLabels, Platforms)
			continue
		}
		seen[platform] = true
		name := ArchiveName("kubectl-latchkey", version, platform)
		if kp.URI != url+"/"+name {
			t.Errorf("krew manifest %s: uri %s, want %s/%s", platform, kp.URI, url, name)
		}
		if kp.SHA256 != r.sums[name] || kp.SHA256 == "" {
			t.Errorf("krew manifest %s: sha256 %q, the archive's is %q", platform, kp.SHA256, r.sums[name])
		}
		if kp.Bin != "kubectl-latchkey" {
			t.Errorf("krew manifest %s: bin %q", platform, kp.Bin)
		}
		for _, f := range kp.Files {
			if _, ok := r.files[name][f.From]; !ok || f.To != "." {
				t.Errorf("krew manifest %s: file %s → %s is not in %s", platform, f.From, f.To, name)
			}
		}
		if !slices.ContainsFunc(kp.Files, func(f KrewFile) bool { return f.From == kp.Bin }) {
			t.Errorf("krew manifest %s: the bin is not among the files", platform)
		}
	}
	if len(seen) != len(Platforms) {
		t.Errorf("krew manifest lists %d of the %d platforms", len(seen), len(Platforms))
	}
	return r
}

func untar(t *testing.T, archive []byte) map[string][]byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	out := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg || strings.Contains(h.Name, "/") || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("archive entry %s: type %c, uid %d, gid %d: want a regular file at the top, owned by 0", h.Name, h.Typeflag, h.Uid, h.Gid)
		}
		if exe := h.Name != "LICENSE"; exe != (h.Mode&0o111 != 0) {
			t.Errorf("archive entry %s: mode %o", h.Name, h.Mode)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = b
	}
}

// The archiving step on stand-in binaries: the same binaries give byte-identical archives (so
// a rebuild of the tag gives the same SHA256SUMS), a missing platform fails, and the manifest
// and sums agree.
func TestReleaseBinariesArchives(t *testing.T) {
	in, license := t.TempDir(), filepath.Join(t.TempDir(), "LICENSE")
	if err := os.WriteFile(license, []byte("Apache-2.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range Platforms {
		dir := filepath.Join(in, strings.ReplaceAll(p, "/", "_"))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, b := range Binaries {
			if err := os.WriteFile(filepath.Join(dir, b), []byte(b+" for "+p), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	const url = "https://github.com/example/latchkey/releases/download/v1.2.3"
	mtime := time.Unix(1700000000, 0)
	out1, out2 := t.TempDir(), t.TempDir()
	for _, out := range []string{out1, out2} {
		if err := archiveBinaries(in, out, "1.2.3", url, license, mtime); err != nil {
			t.Fatal(err)
		}
	}
	r := checkBinaries(t, out1, "1.2.3", url)
	if got := string(r.files[ArchiveName("kubectl-latchkey", "1.2.3", "darwin/arm64")]["kubectl-latchkey"]); got != "kubectl-latchkey for darwin/arm64" {
		t.Errorf("the darwin/arm64 plugin archive holds %q", got)
	}
	if script := string(r.files[ArchiveName("kubectl-latchkey", "1.2.3", "linux/amd64")]["kubectl_complete-latchkey"]); !strings.Contains(script, "kubectl-latchkey __complete \"$@\"") {
		t.Errorf("kubectl_complete-latchkey: %q", script)
	}
	a, _ := os.ReadFile(filepath.Join(out1, "SHA256SUMS"))
	b, _ := os.ReadFile(filepath.Join(out2, "SHA256SUMS"))
	if !bytes.Equal(a, b) {
		t.Errorf("two runs on the same binaries gave different sums:\n%s\n%s", a, b)
	}

	if err := os.Remove(filepath.Join(in, "darwin_amd64", "kubectl-latchkey")); err != nil {
		t.Fatal(err)
	}
	if err := archiveBinaries(in, t.TempDir(), "1.2.3", url, license, mtime); err == nil || !strings.Contains(err.Error(), "darwin/amd64") {
		t.Errorf("a missing binary: %v", err)
	}
}

// checkBuilt checks the real binaries in the archives: each built for its platform, static
// (CGO_ENABLED=0) and -trimpath, from this module; the ones for this machine run and print the
// release's version.
func checkBuilt(t *testing.T, r *release, version string) {
	t.Helper()
	for _, p := range Platforms {
		for _, bin := range Binaries {
			name := ArchiveName(bin, version, p)
			exe := r.files[name][bin]
			bi, err := buildinfo.Read(bytesReaderAt(exe))
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			settings := map[string]string{}
			for _, s := range bi.Settings {
				settings[s.Key] = s.Value
			}
			os, arch, _ := strings.Cut(p, "/")
			if settings["GOOS"] != os || settings["GOARCH"] != arch || settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
				t.Errorf("%s: built with %v", name, settings)
			}
			if bi.Path != "latchkey.dev/latchkey/cmd/"+bin {
				t.Errorf("%s: %s is %s", name, bin, bi.Path)
			}
			if p != runtime.GOOS+"/"+runtime.GOARCH {
				continue
			}
			path := filepath.Join(t.TempDir(), bin)
			if err := writeExecutable(path, exe); err != nil {
				t.Fatal(err)
			}
			arg := "--version"
			if bin == "kubectl-latchkey" {
				arg = "version"
			}
			out, err := exec.CommandContext(t.Context(), path, arg).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != bin+" "+version {
				t.Errorf("%s %s: %v %q, want %q", name, arg, err, out, bin+" "+version)
			}
		}
	}
}

func writeExecutable(path string, b []byte) error {
	return os.WriteFile(path, b, 0o755) //nolint:gosec // a test's own temporary executable
}

package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

const version = "1.2.3-test"

// TestImage builds the archive the way `make image` does, twice, and reads it back the ways its
// consumers do: as an OCI layout (containerd, kind, crane) and through manifest.json (Docker's
// classic image store). It then runs the binary taken out of the layer.
func TestImage(t *testing.T) {
	// Both builds read one copy of the sources, so files edited or committed in the checkout
	// meanwhile cannot make them differ; the copy is the Dockerfile's build context.
	src := dockerContext(t, "../../..")
	dir := t.TempDir()
	certs := filepath.Join(dir, "ca.crt")
	certData := []byte("-----BEGIN CERTIFICATE-----\ntest bundle\n-----END CERTIFICATE-----\n")
	if err := os.WriteFile(certs, certData, 0o644); err != nil {
		t.Fatal(err)
	}
	epoch := time.Unix(1767225600, 0).UTC()
	t.Setenv("SOURCE_DATE_EPOCH", "1767225600")

	var digests []v1.Hash
	var sums [][32]byte
	for _, name := range []string{"a.tar", "b.tar"} {
		out := filepath.Join(dir, name)
		err := run(t.Context(), []string{"-o", out, "-ref", "latchkey:" + version, "-version", version,
			"-platforms", "linux/amd64,linux/arm64", "-src", src, "-ca-certs", certs}, t.Output())
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, sha256.Sum256(b))
		idx := readLayout(t, out)
		d, err := idx.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d)
	}
	// A timestamp, a map order or a temporary path leaking into the image shows up here.
	if digests[0] != digests[1] || sums[0] != sums[1] {
		t.Fatalf("two builds differ: index %s vs %s, archive %x vs %x", digests[0], digests[1], sums[0], sums[1])
	}

	archive := filepath.Join(dir, "a.tar")
	idx := readLayout(t, archive)
	if err := validate.Index(idx); err != nil {
		t.Fatalf("index does not hold together: %v", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var plats []string
	for _, d := range im.Manifests {
		plats = append(plats, d.Platform.String())
	}
	if want := []string{"linux/amd64", "linux/arm64/v8"}; !slices.Equal(plats, want) {
		t.Fatalf("platforms %v, want %v", plats, want)
	}

	for _, d := range im.Manifests {
		t.Run(d.Platform.String(), func(t *testing.T) {
			img, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.Config.User != "65532:65532" {
				t.Errorf("user %q: the chart runs it as 65532 with runAsNonRoot", cf.Config.User)
			}
			if !slices.Equal(cf.Config.Entrypoint, []string{"/latchkey"}) {
				t.Errorf("entrypoint %q", cf.Config.Entrypoint)
			}
			if cf.Architecture != d.Platform.Architecture || cf.OS != "linux" {
				t.Errorf("config platform %s/%s, index says %s", cf.OS, cf.Architecture, d.Platform)
			}
			if got := cf.Config.Labels["org.opencontainers.image.version"]; got != version {
				t.Errorf("version label %q, want %q", got, version)
			}
			if !cf.Created.Equal(epoch) {
				t.Errorf("created %s, want SOURCE_DATE_EPOCH %s", cf.Created, epoch)
			}

			files := layerFiles(t, img, epoch)
			bin, ok := files["latchkey"]
			if !ok || bin.hdr.Typeflag != tar.TypeReg || bin.hdr.Mode != 0o755 || bin.hdr.Uid != 0 {
				t.Fatalf("/latchkey missing or not a root-owned 0755 file: %+v", bin.hdr)
			}
			if c := files["etc/ssl/certs/ca-certificates.crt"]; !bytes.Equal(c.data, certData) {
				t.Errorf("CA bundle %q, want the build host's %q", c.data, certData)
			}
			if p := files["etc/passwd"]; !strings.Contains(string(p.data), "\nnonroot:x:65532:65532:") {
				t.Errorf("/etc/passwd has no nonroot 65532: %q", p.data)
			}
			if g := files["etc/group"]; !strings.Contains(string(g.data), "\nnonroot:x:65532:") {
				t.Errorf("/etc/group has no nonroot 65532: %q", g.data)
			}
			if tmp := files["tmp/"]; tmp.hdr == nil || tmp.hdr.Mode != 0o1777 {
				t.Errorf("/tmp is not world-writable and sticky: %+v", tmp.hdr)
			}

			if d.Platform.Architecture != runtime.GOARCH || runtime.GOOS != "linux" {
				return
			}
			exe := filepath.Join(t.TempDir(), "latchkey")
			if err := os.WriteFile(exe, bin.data, os.FileMode(bin.hdr.Mode)); err != nil {
				t.Fatal(err)
			}
			got, err := exec.Command(exe, "-version").CombinedOutput()
			if err != nil {
				t.Fatalf("latchkey -version from the image: %v\n%s", err, got)
			}
			if want := "latchkey " + version + "\n"; string(got) != want {
				t.Errorf("latchkey -version printed %q, want %q", got, want)
			}
		})
	}

	// What Docker's classic image store loads: the build host's image, under the tag.
	dockerImg, err := tarball.ImageFromPath(archive, nil)
	if err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if err := validate.Image(dockerImg); err != nil {
		t.Fatalf("manifest.json image does not hold together: %v", err)
	}
	// manifest.json carries no manifest of its own (Docker writes one on load), so the image is
	// known by its config, which names its layers by digest.
	dockerConfig, err := dockerImg.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	host := im.Manifests[0]
	for _, d := range im.Manifests {
		if d.Platform.Architecture == runtime.GOARCH {
			host = d
		}
	}
	hostImg, err := idx.Image(host.Digest)
	if err != nil {
		t.Fatal(err)
	}
	hostConfig, err := hostImg.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if dockerConfig != hostConfig {
		t.Errorf("manifest.json holds config %s, want the %s image's %s", dockerConfig, host.Platform, hostConfig)
	}
}

// dockerContext copies what .dockerignore lets into a docker build. It understands the one
// shape that file has, everything excluded and then paths let back in, and refuses others so
// that a change there is a change here too.
func dockerContext(t *testing.T, root string) string {
	t.Helper()
	ignore, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	excludedAll := false
	for line := range strings.Lines(string(ignore)) {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case line == "*" && !excludedAll:
			excludedAll = true
		case strings.HasPrefix(line, "!") && excludedAll && !strings.ContainsAny(line[1:], "*?[\\"):
			from, to := filepath.Join(root, line[1:]), filepath.Join(dst, line[1:])
			fi, err := os.Stat(from)
			if err != nil {
				t.Fatal(err)
			}
			if fi.IsDir() {
				err = os.CopyFS(to, os.DirFS(from))
			} else {
				var b []byte
				if b, err = os.ReadFile(from); err == nil {
					if err = os.MkdirAll(filepath.Dir(to), 0o755); err == nil {
						err = os.WriteFile(to, b, 0o644)
					}
				}
			}
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf(".dockerignore: %q: this test reads only \"*\" followed by \"!path\" lines", line)
		}
	}
	return dst
}

// readLayout untars the archive and returns the one index its index.json names, checking the
// name containerd imports it under.
func readLayout(t *testing.T, archive string) v1.ImageIndex {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("index.json has %d entries, want the one index", len(m.Manifests))
	}
	if got, want := m.Manifests[0].Annotations[containerdImageName], "docker.io/library/latchkey:"+version; got != want {
		t.Errorf("containerd would import it as %q, want %q (the name the kubelet asks for)", got, want)
	}
	idx, err := top.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

type layerFile struct {
	hdr  *tar.Header
	data []byte
}

// layerFiles reads the image's only layer, checking every entry carries SOURCE_DATE_EPOCH.
func layerFiles(t *testing.T, img v1.Image, epoch time.Time) map[string]layerFile {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]layerFile{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(epoch) {
			t.Errorf("%s: time %s, want SOURCE_DATE_EPOCH %s", h.Name, h.ModTime, epoch)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = layerFile{hdr: h, data: b}
	}
}

package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The user the image runs as: distroless's nonroot, which the chart and config/manager pin
// with runAsUser/runAsGroup 65532.
const (
	nonroot = 65532
	user    = "65532:65532"
)

const (
	// defaultSource is the module path: `go get latchkey.dev/latchkey` resolves it to the code.
	defaultSource = "https://latchkey.dev/latchkey"
	homepage      = "https://latchkey.dev"
	binaryPath    = "latchkey"
	certsPath     = "etc/ssl/certs/ca-certificates.crt"
)

// imageSpec is everything in the image besides the binary.
type imageSpec struct {
	Version  string
	Created  time.Time // every timestamp in the image
	CACerts  []byte
	Source   string
	Licenses string
}

func (s imageSpec) labels() map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       "latchkey",
		"org.opencontainers.image.description": "OAuth 2.1 authorization server for AI agents, run as a Kubernetes operator",
		"org.opencontainers.image.url":         homepage,
		"org.opencontainers.image.source":      s.Source,
		"org.opencontainers.image.version":     s.Version,
	}
	if s.Licenses != "" {
		l["org.opencontainers.image.licenses"] = s.Licenses
	}
	return l
}

// buildIndex makes one image per platform from the binary compiled for it, under one OCI index
// carrying the same labels as annotations, which registries show for multi-platform images.
func buildIndex(spec imageSpec, plats []v1.Platform, binaries []string) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for i, p := range plats {
		img, err := buildImage(spec, p, binaries[i])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &p},
		})
	}
	return mutate.Annotations(idx, spec.labels()).(v1.ImageIndex), nil
}

// buildImage starts from nothing (a pull is not possible where this runs) and adds one layer
// holding all the filesystem Latchkey needs.
func buildImage(spec imageSpec, p v1.Platform, binary string) (v1.Image, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	layerTar, err := rootfs(spec, bin)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, err
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: spec.Created},
			CreatedBy: "hack/tools/image: /latchkey, CA certificates, nonroot user",
		},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: spec.Created}
	cf.OS = p.OS
	cf.Architecture = p.Architecture
	cf.Variant = p.Variant
	cf.Config = v1.Config{
		User:       user,
		Entrypoint: []string{"/" + binaryPath},
		WorkingDir: "/",
		Labels:     spec.labels(),
	}
	return mutate.ConfigFile(img, cf)
}

// rootfs is the layer's tar stream: the distroless static:nonroot essentials Latchkey uses, with
// fixed owners, modes and times so the bytes depend only on the inputs. The binary and the
// certificates are root's and read-only to the nonroot user.
func rootfs(spec imageSpec, bin []byte) ([]byte, error) {
	entries := []struct {
		name     string
		mode     int64
		owner    int
		contents []byte // nil for a directory
	}{
		{"etc/", 0o755, 0, nil},
		{"etc/group", 0o644, 0, []byte("root:x:0:\nnonroot:x:65532:\n")},
		// Go's resolver reads this: /etc/hosts before DNS, as in distroless.
		{"etc/nsswitch.conf", 0o644, 0, []byte("hosts: files dns\n")},
		{"etc/passwd", 0o644, 0, []byte("root:x:0:0:root:/root:/sbin/nologin\n" +
			"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{"etc/ssl/", 0o755, 0, nil},
		{"etc/ssl/certs/", 0o755, 0, nil},
		{certsPath, 0o644, 0, spec.CACerts},
		{"home/", 0o755, 0, nil},
		{"home/nonroot/", 0o700, nonroot, nil},
		{binaryPath, 0o755, 0, bin},
		// The chart mounts an emptyDir here; without one (docker run) it must still be writable.
		{"tmp/", 0o1777, 0, nil},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			Uid:     e.owner,
			Gid:     e.owner,
			ModTime: spec.Created,
		}
		if e.contents == nil {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.contents))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.contents); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

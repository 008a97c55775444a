package main

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// containerdImageName is the annotation containerd (ctr, kind, Docker with the containerd
// image store) names an imported image by; it must be the fully qualified name the kubelet
// asks for ("latchkey:0.1.0" is "docker.io/library/latchkey:0.1.0" there).
const containerdImageName = "io.containerd.image.name"

// writeArchive writes idx as a tarred OCI image layout named ref, the shape `docker save`
// produces since Docker 25: index.json holds one entry, the multi-platform index, for
// containerd and crane; manifest.json names the image of plats[dockerIdx] for Docker engines
// whose image store reads only that. Every entry has fixed owners, modes and the time of the
// image itself, so the file's bytes depend only on idx. It returns the index digest.
func writeArchive(out, ref string, idx v1.ImageIndex, dockerIdx int) (v1.Hash, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("-ref: %w", err)
	}
	registry := tag.RegistryStr()
	if registry == name.DefaultRegistry {
		registry = "docker.io"
	}
	digest, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return v1.Hash{}, err
	}
	img, err := idx.Image(im.Manifests[dockerIdx].Digest)
	if err != nil {
		return v1.Hash{}, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return v1.Hash{}, err
	}
	created := cf.Created.Time

	dir, err := os.MkdirTemp("", "latchkey-layout-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(dir)
	top := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{
		Add: idx,
		Descriptor: v1.Descriptor{Annotations: map[string]string{
			containerdImageName:                 registry + "/" + tag.RepositoryStr() + ":" + tag.TagStr(),
			"org.opencontainers.image.ref.name": tag.TagStr(),
		}},
	})
	if _, err := layout.Write(dir, top); err != nil {
		return v1.Hash{}, err
	}
	docker, err := dockerManifest(img, ref)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), docker, 0o644); err != nil {
		return v1.Hash{}, err
	}

	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return v1.Hash{}, err
	}
	// Written beside the target and renamed, so a failed build leaves no half archive that
	// `docker load` would then reject with a less helpful error.
	f, err := os.CreateTemp(filepath.Dir(out), filepath.Base(out)+".*")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.Remove(f.Name())
	if err := tarDir(f, dir, created); err != nil {
		f.Close()
		return v1.Hash{}, err
	}
	if err := f.Close(); err != nil {
		return v1.Hash{}, err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return v1.Hash{}, err
	}
	return digest, os.Rename(f.Name(), out)
}

// dockerManifest is the manifest.json of `docker save`, pointing into the layout's blobs.
func dockerManifest(img v1.Image, ref string) ([]byte, error) {
	m, err := img.Manifest()
	if err != nil {
		return nil, err
	}
	blob := func(h v1.Hash) string { return path.Join("blobs", h.Algorithm, h.Hex) }
	d := tarball.Descriptor{Config: blob(m.Config.Digest), RepoTags: []string{ref}}
	for _, l := range m.Layers {
		d.Layers = append(d.Layers, blob(l.Digest))
	}
	return json.Marshal(tarball.Manifest{d})
}

// tarDir writes dir's files in lexical order (WalkDir's) with fixed metadata.
func tarDir(w io.Writer, dir string, mtime time.Time) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: mtime}
		if d.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			return tw.WriteHeader(h)
		}
		data, err := os.Open(p)
		if err != nil {
			return err
		}
		defer data.Close()
		fi, err := data.Stat()
		if err != nil {
			return err
		}
		h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, fi.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = io.Copy(tw, data)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

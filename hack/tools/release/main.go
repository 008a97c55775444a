// Command release makes and publishes what a Latchkey release ships, for `make release-dry-run`
// and the release workflow (.github/workflows/release.yml), which run the same steps:
//
//	release chart -chart charts/latchkey -out DIR        # DIR/latchkey-{version}.tgz (Helm's own packaging)
//	release sbom -image ARCHIVE -out FILE                 # SPDX 2.3 JSON of the Go modules in the image's binary
//	release push -image ARCHIVE -ref REGISTRY/latchkey:V  # pushes the multi-platform index; prints its digest
//	release platforms                                     # the platforms the binaries are built for
//	release binaries -in DIR -version V -url URL -out DIR # archives, SHA256SUMS and the krew manifest (binaries.go)
//
// The SBOM is read from the binary itself (its embedded build information: the main module,
// every dependency module with its version and checksum, the Go toolchain), so it lists what was
// compiled in, and needs no network.
package main

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: release chart|sbom|push [flags]")
	}
	fs := flag.NewFlagSet("release "+args[0], flag.ContinueOnError)
	chartDir := fs.String("chart", "charts/latchkey", "the chart's directory")
	out := fs.String("out", "", "where to write")
	archive := fs.String("image", "", "the image archive (make image)")
	ref := fs.String("ref", "", "the tag to push to")
	in := fs.String("in", "", "binaries: the directory holding {os}_{arch}/latchkey and kubectl-latchkey")
	version := fs.String("version", "", "binaries: the release's version (Chart.yaml appVersion)")
	url := fs.String("url", "", "binaries: where the release's files are downloaded from")
	license := fs.String("license", "LICENSE", "binaries: the license file to put in each archive")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	switch args[0] {
	case "chart":
		c, err := loader.LoadDir(*chartDir)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(*out, 0o755); err != nil {
			return err
		}
		file, err := chartutil.Save(c, *out)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, file)
		return nil
	case "sbom":
		idx, cleanup, err := readArchive(*archive)
		if err != nil {
			return err
		}
		defer cleanup()
		doc, err := sbom(idx)
		if err != nil {
			return err
		}
		b, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(*out, append(b, '\n'), 0o644)
	case "push":
		idx, cleanup, err := readArchive(*archive)
		if err != nil {
			return err
		}
		defer cleanup()
		tag, err := name.NewTag(*ref)
		if err != nil {
			return err
		}
		if err := remote.WriteIndex(tag, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return err
		}
		d, err := idx.Digest()
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, d)
		return nil
	case "platforms":
		// The Makefile builds for these; the archives and the krew manifest list exactly them.
		fmt.Fprintln(stdout, strings.Join(Platforms, " "))
		return nil
	case "binaries":
		if *in == "" || *out == "" || *version == "" || *url == "" {
			return errors.New("binaries: -in, -out, -version and -url are required")
		}
		// The image's rule: every timestamp is SOURCE_DATE_EPOCH, so a rebuild gives the same sums.
		var mtime time.Time
		if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
			sec, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
			}
			mtime = time.Unix(sec, 0).UTC()
		} else {
			mtime = time.Unix(0, 0).UTC()
		}
		return archiveBinaries(*in, *out, *version, *url, *license, mtime)
	}
	return fmt.Errorf("unknown step %q: want chart, sbom, push, platforms or binaries", args[0])
}

// readArchive opens the multi-platform index in an image archive written by `make image` (a
// tarred OCI image layout whose index.json holds the one index).
func readArchive(archive string) (v1.ImageIndex, func(), error) {
	dir, err := os.MkdirTemp("", "latchkey-release-")
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	fail := func(err error) (v1.ImageIndex, func(), error) { cleanup(); return nil, nil, err }
	f, err := os.Open(archive)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fail(err)
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
				err = writeFile(p, tr)
			}
		}
		if err != nil {
			return fail(err)
		}
	}
	lp, err := layout.FromPath(dir)
	if err != nil {
		return fail(err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		return fail(err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		return fail(err)
	}
	if len(m.Manifests) != 1 {
		return fail(fmt.Errorf("%s: index.json holds %d entries, want the one multi-platform index", archive, len(m.Manifests)))
	}
	idx, err := top.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		return fail(err)
	}
	return idx, cleanup, nil
}

func writeFile(p string, r io.Reader) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil { //nolint:gosec // our own archive, of a known size
		f.Close()
		return err
	}
	return f.Close()
}

// Binary returns the latchkey binary of the image for one platform, with its build information.
func Binary(idx v1.ImageIndex, platform string) ([]byte, *buildinfo.BuildInfo, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, nil, err
	}
	for _, d := range m.Manifests {
		if d.Platform == nil || d.Platform.OS+"/"+d.Platform.Architecture != platform {
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, nil, err
		}
		rc := mutate.Extract(img)
		defer rc.Close()
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				return nil, nil, fmt.Errorf("%s: no /latchkey in the image", platform)
			}
			if err != nil {
				return nil, nil, err
			}
			if strings.TrimPrefix(h.Name, "/") != "latchkey" {
				continue
			}
			bin, err := io.ReadAll(tr)
			if err != nil {
				return nil, nil, err
			}
			bi, err := buildinfo.Read(bytesReaderAt(bin))
			return bin, bi, err
		}
	}
	return nil, nil, fmt.Errorf("no %s image in the index", platform)
}

type bytesReaderAt []byte

func (b bytesReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// SPDX 2.3, the fields this document uses.
type (
	SPDX struct {
		SPDXVersion       string         `json:"spdxVersion"`
		DataLicense       string         `json:"dataLicense"`
		SPDXID            string         `json:"SPDXID"`
		Name              string         `json:"name"`
		DocumentNamespace string         `json:"documentNamespace"`
		CreationInfo      CreationInfo   `json:"creationInfo"`
		DocumentDescribes []string       `json:"documentDescribes"`
		Packages          []Package      `json:"packages"`
		Relationships     []Relationship `json:"relationships"`
	}
	CreationInfo struct {
		Created  string   `json:"created"`
		Creators []string `json:"creators"`
	}
	Package struct {
		Name                  string        `json:"name"`
		SPDXID                string        `json:"SPDXID"`
		VersionInfo           string        `json:"versionInfo"`
		DownloadLocation      string        `json:"downloadLocation"`
		FilesAnalyzed         bool          `json:"filesAnalyzed"`
		LicenseConcluded      string        `json:"licenseConcluded"`
		LicenseDeclared       string        `json:"licenseDeclared"`
		CopyrightText         string        `json:"copyrightText"`
		Checksums             []Checksum    `json:"checksums,omitempty"`
		ExternalRefs          []ExternalRef `json:"externalRefs,omitempty"`
		PrimaryPackagePurpose string        `json:"primaryPackagePurpose,omitempty"`
		Comment               string        `json:"comment,omitempty"`
	}
	Checksum struct {
		Algorithm string `json:"algorithm"`
		Value     string `json:"checksumValue"`
	}
	ExternalRef struct {
		Category string `json:"referenceCategory"`
		Type     string `json:"referenceType"`
		Locator  string `json:"referenceLocator"`
	}
	Relationship struct {
		Element string `json:"spdxElementId"`
		Type    string `json:"relationshipType"`
		Related string `json:"relatedSpdxElement"`
	}
)

// sbom describes the image's binary (linux/amd64; every platform is built from the same module
// graph): the main module, each dependency module and the Go standard library.
func sbom(idx v1.ImageIndex) (*SPDX, error) {
	bin, bi, err := Binary(idx, "linux/amd64")
	if err != nil {
		return nil, err
	}
	digest, err := idx.Digest()
	if err != nil {
		return nil, err
	}
	// The version is the image's: the builder links it into the binary with -ldflags, which
	// a -trimpath build leaves out of the build information, and labels the image with it.
	cf, err := firstConfig(idx)
	if err != nil {
		return nil, err
	}
	created := cf.Created.UTC()
	version := cf.Config.Labels["org.opencontainers.image.version"]
	if version == "" {
		return nil, errors.New("the image has no org.opencontainers.image.version label")
	}
	sum := sha256.Sum256(bin)
	doc := &SPDX{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              "latchkey-" + version,
		DocumentNamespace: "https://latchkey.dev/spdx/latchkey-" + version + "-" + digest.Hex,
		CreationInfo:      CreationInfo{Created: created.Format(time.RFC3339), Creators: []string{"Tool: latchkey-release"}},
		DocumentDescribes: []string{"SPDXRef-Package-latchkey"},
	}
	doc.Packages = append(doc.Packages, Package{
		Name: bi.Main.Path, SPDXID: "SPDXRef-Package-latchkey", VersionInfo: version,
		DownloadLocation: "NOASSERTION", LicenseConcluded: "NOASSERTION", LicenseDeclared: "Apache-2.0",
		CopyrightText: "NOASSERTION", PrimaryPackagePurpose: "APPLICATION",
		Checksums:    []Checksum{{"SHA256", hex.EncodeToString(sum[:])}},
		ExternalRefs: []ExternalRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + bi.Main.Path + "@" + version}},
		Comment:      "the binary /latchkey of the image " + digest.String() + " (linux/amd64)",
	})
	add := func(id, path, ver, comment string) {
		doc.Packages = append(doc.Packages, Package{
			Name: path, SPDXID: id, VersionInfo: ver, DownloadLocation: "NOASSERTION",
			LicenseConcluded: "NOASSERTION", LicenseDeclared: "NOASSERTION", CopyrightText: "NOASSERTION",
			PrimaryPackagePurpose: "LIBRARY", Comment: comment,
			ExternalRefs: []ExternalRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + path + "@" + ver}},
		})
		doc.Relationships = append(doc.Relationships, Relationship{"SPDXRef-Package-latchkey", "DEPENDS_ON", id})
	}
	doc.Relationships = append(doc.Relationships, Relationship{"SPDXRef-DOCUMENT", "DESCRIBES", "SPDXRef-Package-latchkey"})
	add("SPDXRef-Package-go-stdlib", "stdlib", strings.TrimPrefix(bi.GoVersion, "go"), "the Go standard library and runtime")
	for i, d := range bi.Deps {
		m := d
		comment := "go.sum " + m.Sum
		if d.Replace != nil {
			comment = "replaces " + d.Path + "@" + d.Version
			m = d.Replace
			if m.Version == "" {
				m = &debug.Module{Path: d.Path, Version: d.Version}
				comment = "from this repository (replace " + d.Replace.Path + ")"
			}
		}
		add(fmt.Sprintf("SPDXRef-Package-go-%d", i+1), m.Path, m.Version, comment)
	}
	return doc, nil
}

func firstConfig(idx v1.ImageIndex) (*v1.ConfigFile, error) {
	m, err := idx.IndexManifest()
	if err != nil || len(m.Manifests) == 0 {
		return nil, errors.New("empty index")
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		return nil, err
	}
	return img.ConfigFile()
}

package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// The binaries a release publishes (docs/decisions/0068-release-binaries-and-krew.md): for each
// platform, latchkey and the kubectl plugin, each in its own tar.gz archive; SHA256SUMS over the
// archives, which the release workflow signs keylessly with cosign; and the krew manifest of the
// plugin with the archives' sha256.

// Binaries names the release's executables; Platforms are the platforms each is built for.
var (
	Binaries  = []string{"latchkey", "kubectl-latchkey"}
	Platforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}
)

// ArchiveName is the file name of one binary's archive for one platform ("linux/amd64").
func ArchiveName(binary, version, platform string) string {
	return fmt.Sprintf("%s_%s_%s.tar.gz", binary, version, strings.ReplaceAll(platform, "/", "_"))
}

// KrewManifestName is the krew manifest's file name in the release.
const KrewManifestName = "latchkey.krew.yaml"

// completeScript is kubectl's convention for completing a plugin's arguments: kubectl runs
// kubectl_complete-<plugin> on PATH with the words to complete.
const completeScript = `#!/bin/sh
# kubectl runs this for "kubectl latchkey <TAB>": copy it next to kubectl-latchkey on PATH.
exec kubectl-latchkey __complete "$@"
`

// archiveBinaries writes the archives, SHA256SUMS and the krew manifest into out, from the
// binaries built into in/{os}_{arch}/. mtime is every file's modification time, so the same
// binaries give the same archives.
func archiveBinaries(in, out, version, url, license string, mtime time.Time) error {
	lic, err := os.ReadFile(license)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	sums := map[string]string{}
	for _, platform := range Platforms {
		dir := filepath.Join(in, strings.ReplaceAll(platform, "/", "_"))
		for _, bin := range Binaries {
			exe, err := os.ReadFile(filepath.Join(dir, bin))
			if err != nil {
				return fmt.Errorf("%s for %s: %w (was it built?)", bin, platform, err)
			}
			files := []archiveFile{{bin, 0o755, exe}, {"LICENSE", 0o644, lic}}
			if bin == "kubectl-latchkey" {
				files = append(files, archiveFile{"kubectl_complete-latchkey", 0o755, []byte(completeScript)})
			}
			name := ArchiveName(bin, version, platform)
			sum, err := writeArchive(filepath.Join(out, name), files, mtime)
			if err != nil {
				return err
			}
			sums[name] = sum
		}
	}
	var lines []string
	for name, sum := range sums {
		lines = append(lines, sum+"  "+name) // sha256sum's format: sha256sum -c SHA256SUMS
	}
	slices.Sort(lines)
	if err := os.WriteFile(filepath.Join(out, "SHA256SUMS"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	b, err := yaml.Marshal(krewManifest(version, url, sums))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, KrewManifestName), b, 0o644)
}

type archiveFile struct {
	name string
	mode int64
	data []byte
}

// writeArchive writes a gzipped tar of files, without owners or gzip timestamps, and returns
// its sha256.
func writeArchive(path string, files []archiveFile, mtime time.Time) (string, error) {
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	zw := gzip.NewWriter(io.MultiWriter(f, h))
	tw := tar.NewWriter(zw)
	for _, tf := range files {
		hdr := &tar.Header{Name: tf.name, Mode: tf.mode, Size: int64(len(tf.data)), ModTime: mtime, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			f.Close()
			return "", err
		}
		if _, err := tw.Write(tf.data); err != nil {
			f.Close()
			return "", err
		}
	}
	if err := errors.Join(tw.Close(), zw.Close()); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Krew's plugin manifest (krew.googlecontainertools.github.com/v1alpha2), the fields it uses.
type (
	KrewPlugin struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec KrewSpec `json:"spec"`
	}
	KrewSpec struct {
		Version          string         `json:"version"`
		Homepage         string         `json:"homepage"`
		ShortDescription string         `json:"shortDescription"`
		Description      string         `json:"description"`
		Platforms        []KrewPlatform `json:"platforms"`
	}
	KrewPlatform struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		URI    string     `json:"uri"`
		SHA256 string     `json:"sha256"`
		Files  []KrewFile `json:"files"`
		Bin    string     `json:"bin"`
	}
	KrewFile struct {
		From string `json:"from"`
		To   string `json:"to"`
	}
)

// krewManifest is the plugin's manifest for krew: one platform per archive of
// kubectl-latchkey, fetched from url (the release's download address) and checked by sha256.
func krewManifest(version, url string, sums map[string]string) *KrewPlugin {
	p := &KrewPlugin{APIVersion: "krew.googlecontainertools.github.com/v1alpha2", Kind: "Plugin"}
	p.Metadata.Name = "latchkey"
	p.Spec = KrewSpec{
		Version:          "v" + version,
		Homepage:         "https://latchkey.dev",
		ShortDescription: "See and end access to Latchkey's Projects",
		Description: "Latchkey is an OAuth 2.1 authorization server for AI agents, run as a Kubernetes operator.\n" +
			"This plugin shows, through Latchkey's admin API (admin.latchkey.dev) and the cluster's own\n" +
			"RBAC, who has connected which services, which agents may act for whom and the audit log,\n" +
			"and ends that access: a person's, a consent, a connected account, a passkey, a client's tokens.\n",
	}
	for _, platform := range Platforms {
		os, arch, _ := strings.Cut(platform, "/")
		name := ArchiveName("kubectl-latchkey", version, platform)
		kp := KrewPlatform{URI: strings.TrimSuffix(url, "/") + "/" + name, SHA256: sums[name], Bin: "kubectl-latchkey",
			Files: []KrewFile{{"kubectl-latchkey", "."}, {"kubectl_complete-latchkey", "."}, {"LICENSE", "."}}}
		kp.Selector.MatchLabels = map[string]string{"os": os, "arch": arch}
		p.Spec.Platforms = append(p.Spec.Platforms, kp)
	}
	return p
}

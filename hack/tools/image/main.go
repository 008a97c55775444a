// Command image builds Latchkey's container image without a container engine: it cross-compiles
// cmd/latchkey for each platform, puts each binary with CA certificates and a nonroot user into
// a one-layer image, and writes the images as one multi-platform OCI image archive that
// `docker load`, `kind load image-archive`, `ctr images import` and `crane push` accept.
// `make image` runs it from the repository root; the Dockerfile builds the equivalent image
// where an engine is at hand.
//
// The archive is reproducible: every timestamp is SOURCE_DATE_EPOCH (0 when unset), so the same
// source, Go toolchain and CA bundle give the same digest.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

// version becomes both the image tag (by the Makefile) and -ldflags text, so it is held to
// what a tag may contain.
var versionPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "bin/latchkey-image.tar", "the OCI image archive to write")
	ref := fs.String("ref", "latchkey:dev", "the image name and tag recorded in the archive")
	version := fs.String("version", "dev", "the version the binary reports (-version) and the image label")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "comma-separated os/arch list to build")
	src := fs.String("src", ".", "the root of the Latchkey module")
	goCmd := fs.String("go", "go", "the go command to compile with")
	caCerts := fs.String("ca-certs", "/etc/ssl/certs/ca-certificates.crt",
		"the CA bundle copied into the image: Latchkey calls upstream OAuth services, OIDC issuers and event sinks over HTTPS")
	source := fs.String("source", defaultSource, "the org.opencontainers.image.source label")
	licenses := fs.String("licenses", "", "the org.opencontainers.image.licenses label (SPDX; omitted when empty)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if !versionPattern.MatchString(*version) {
		return fmt.Errorf("-version %q: want letters, digits, '_', '.' or '-'", *version)
	}
	plats, err := parsePlatforms(*platforms)
	if err != nil {
		return err
	}
	epoch, err := sourceDateEpoch()
	if err != nil {
		return err
	}
	certs, err := os.ReadFile(*caCerts)
	if err != nil {
		return fmt.Errorf("-ca-certs: %w (install the ca-certificates package or point -ca-certs at a bundle)", err)
	}

	tmp, err := os.MkdirTemp("", "latchkey-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	binaries := make([]string, len(plats))
	for i, p := range plats {
		binaries[i] = filepath.Join(tmp, "latchkey-"+p.OS+"-"+p.Architecture)
		if err := compile(ctx, *goCmd, *src, p, *version, binaries[i]); err != nil {
			return err
		}
	}

	spec := imageSpec{
		Version:  *version,
		Created:  epoch,
		CACerts:  certs,
		Source:   *source,
		Licenses: *licenses,
	}
	idx, err := buildIndex(spec, plats, binaries)
	if err != nil {
		return err
	}
	digest, err := writeArchive(*out, *ref, idx, dockerPlatform(plats))
	if err != nil {
		return err
	}
	fi, err := os.Stat(*out)
	if err != nil {
		return err
	}
	names := make([]string, len(plats))
	for i, p := range plats {
		names[i] = p.String()
	}
	fmt.Fprintf(stderr, "image: %s: %s %s (%s), %.1f MB\n", *out, *ref, digest,
		strings.Join(names, ", "), float64(fi.Size())/1e6)
	return nil
}

// compile builds cmd/latchkey the way `make build` does, for one platform, with the version
// linked in so `latchkey -version` names the image it came from.
func compile(ctx context.Context, goCmd, src string, p v1.Platform, version, out string) error {
	cmd := exec.CommandContext(ctx, goCmd, "build", "-trimpath",
		"-ldflags", "-X main.version="+version, "-o", out, "./cmd/latchkey")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("compiling for %s: %w", p, err)
	}
	return nil
}

func parsePlatforms(list string) ([]v1.Platform, error) {
	var plats []v1.Platform
	seen := map[string]bool{}
	for s := range strings.SplitSeq(list, ",") {
		p, err := v1.ParsePlatform(s)
		if err != nil {
			return nil, fmt.Errorf("-platforms: %w", err)
		}
		// A static pure-Go binary needs nothing from the OS but Linux.
		if p.OS != "linux" || p.Architecture == "" || p.OSVersion != "" {
			return nil, fmt.Errorf("-platforms: %q: want linux/ARCH", s)
		}
		if seen[p.Architecture] {
			return nil, fmt.Errorf("-platforms: %s given twice", p.Architecture)
		}
		seen[p.Architecture] = true
		// The arm64 variant is what registries and containerd record for 64-bit ARM.
		if p.Architecture == "arm64" && p.Variant == "" {
			p.Variant = "v8"
		}
		plats = append(plats, *p)
	}
	if len(plats) == 0 {
		return nil, errors.New("-platforms: empty")
	}
	return plats, nil
}

// dockerPlatform picks the one image a Docker engine with the classic image store loads from
// the archive (it reads manifest.json, which cannot hold an index): the build host's own
// platform when it was built, else the first one.
func dockerPlatform(plats []v1.Platform) int {
	for i, p := range plats {
		if p.OS == runtime.GOOS && p.Architecture == runtime.GOARCH {
			return i
		}
	}
	return 0
}

// sourceDateEpoch follows https://reproducible-builds.org/specs/source-date-epoch/; without
// it every timestamp is the Unix epoch, which keeps two builds of one tree identical.
func sourceDateEpoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since 1970", s)
	}
	return time.Unix(n, 0).UTC(), nil
}

// Package configdir is the no-cluster mode's source of Latchkey objects: a directory of YAML
// files holding Projects, OAuthClients, RedirectPolicies and Connectors, with the Secrets and
// Namespaces they refer to (docs/no-cluster.md). Each object is admitted as the API server would
// admit it (internal/admission: the CRDs' schemas, defaults and CEL rules, with the API server's
// messages), then the whole set goes to controllers.Standalone, which runs the reconcilers'
// status phases and the one compile function. The directory is watched by polling, with the
// standard library only; a reading that fails changes nothing that serves.
//
// What a cluster keeps, the data directory keeps: each object's identity (uid, creation time,
// generation) in objects.yaml, OAuthClient credentials Secrets under secrets/, and each
// object's status under status/, with status/directory.yaml saying whether the last reading
// of the directory was good and, when not, which file and document it refused and why.
package configdir

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"latchkey.dev/latchkey/config/crd"
	"latchkey.dev/latchkey/controllers"
	"latchkey.dev/latchkey/internal/admission"
)

// Options configures a Source.
type Options struct {
	// Dir is the configuration directory. Required.
	Dir string
	// DataDir keeps what a cluster would keep (see the package comment). Required; it must not
	// be inside Dir.
	DataDir string
	// Namespace is given to objects whose metadata.namespace is empty. Defaults to "default".
	Namespace string
	// Poll is how often the directory is looked at. Defaults to one second.
	Poll time.Duration
	// Standalone compiles and publishes what was read. Required.
	Standalone *controllers.Standalone
	// Clock stamps creation times and status/directory.yaml. Defaults to time.Now.
	Clock  func() time.Time
	Logger logr.Logger
}

// Source reads the directory and hands what it declares to Standalone, at start and on every
// change.
type Source struct {
	opts   Options
	adm    *admission.Admitter
	creds  credentials
	status statusFiles

	// attempted is the fingerprint of the last reading, good or not: the same files are not
	// read again until something changes.
	attempted string
	loaded    int
	warned    map[string]bool
}

// New checks opts and compiles the CRDs' schemas.
func New(opts Options) (*Source, error) {
	if opts.Dir == "" || opts.DataDir == "" || opts.Standalone == nil {
		return nil, errors.New("configdir: Dir, DataDir and Standalone are required")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	data, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, err
	}
	if rel, err := filepath.Rel(dir, data); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") &&
		(rel == "." || !strings.HasPrefix(rel, ".")) {
		// Its files would be read as configuration. A hidden directory is never read.
		return nil, fmt.Errorf("configdir: the data directory %s must not be inside the configuration directory %s (a hidden directory such as %s/.latchkey is fine)", data, dir, dir)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("configuration directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("configuration directory %s is not a directory", dir)
	}
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	opts.Dir, opts.DataDir = dir, data
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	bases, err := fs.Sub(crd.Bases, "bases")
	if err != nil {
		return nil, err
	}
	adm, err := admission.New(bases)
	if err != nil {
		return nil, err
	}
	return &Source{
		opts:   opts,
		adm:    adm,
		creds:  credentials{dir: filepath.Join(data, "secrets")},
		status: statusFiles{dir: filepath.Join(data, "status")},
		warned: map[string]bool{},
	}, nil
}

// Run reads the directory now and whenever it changes, until ctx ends. A reading that fails is
// logged and written to status/directory.yaml, and the last good configuration keeps serving
// (none, before the first good reading: /-/readyz says not ready). Every
// controllers.EnforceInterval the directory is applied again even unchanged, as a
// RedirectPolicy's reconciler runs again after that interval.
func (s *Source) Run(ctx context.Context) error {
	t := time.NewTicker(s.opts.Poll)
	defer t.Stop()
	lastApplied := time.Time{}
	var credsSum, seen string
	for first := true; ; first = false {
		sum, err := fingerprint(inputFiles(s.opts.Dir))
		creds, cerr := fingerprint(s.creds.files())
		changed := err != nil || cerr != nil || sum != s.attempted || creds != credsSum
		// A change is read once it has held for one poll: an editor that truncates a file and
		// then writes it must not have the half-written file applied.
		settled := first || sum == seen
		seen = sum
		force := !lastApplied.IsZero() && time.Since(lastApplied) >= controllers.EnforceInterval
		if changed && settled || force {
			s.attempted = sum
			if err := s.Sync(ctx); err == nil {
				lastApplied = time.Now()
			} else if ctx.Err() != nil {
				return nil
			}
			// What Sync itself wrote is no change to react to; a credentials file someone
			// deleted or edited is.
			credsSum, _ = fingerprint(s.creds.files())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sync reads and applies the directory once. On any error nothing that serves changes.
func (s *Source) Sync(ctx context.Context) error {
	started := s.opts.Clock()
	err := s.sync(ctx)
	if err != nil {
		s.opts.Logger.Error(err, "configuration directory refused; still serving the last good configuration",
			"dir", s.opts.Dir, "lastGood", s.loaded)
	}
	if werr := s.status.writeDirectory(s.opts.Dir, started, s.loaded, err); werr != nil {
		s.opts.Logger.Error(werr, "writing status/directory.yaml")
	}
	return err
}

func (s *Source) sync(ctx context.Context) error {
	r, err := readDir(ctx, s.opts.Dir, s.opts.Namespace, s.adm)
	if err != nil {
		return err
	}
	s.warnReadable(r.secretFiles)
	ids, err := readIdentities(s.opts.DataDir)
	if err != nil {
		return err
	}
	next, err := ids.assign(r, s.opts.Clock())
	if err != nil {
		return err
	}
	// Kept at once: the credentials written next are owned by these uids.
	if err := next.write(s.opts.DataDir); err != nil {
		return err
	}
	used, err := s.creds.ensure(r)
	if err != nil {
		return err
	}
	s.status.carryOver(r)
	if err := s.opts.Standalone.Apply(ctx, &r.objs); err != nil {
		return err
	}
	s.loaded++
	if err := s.creds.prune(used); err != nil {
		s.opts.Logger.Error(err, "removing credentials of deleted OAuthClients")
	}
	if err := s.status.write(r); err != nil {
		s.opts.Logger.Error(err, "writing status files")
	}
	s.opts.Logger.Info("configuration loaded", "dir", s.opts.Dir, "reading", s.loaded,
		"projects", len(r.objs.Projects), "oauthClients", len(r.objs.OAuthClients),
		"connectors", len(r.objs.Connectors), "redirectPolicies", len(r.objs.RedirectPolicies),
		"status", s.status.dir)
	return nil
}

// warnReadable warns, once per file, about a Secret others on the machine may read: in a
// cluster RBAC guards Secrets, here only the file's mode does.
func (s *Source) warnReadable(files []string) {
	for _, f := range files {
		if s.warned[f] {
			continue
		}
		fi, err := os.Stat(filepath.Join(s.opts.Dir, f))
		if err == nil && fi.Mode().Perm()&0o077 != 0 {
			s.warned[f] = true
			s.opts.Logger.Info("warning: a file holding a Secret is readable by other users; chmod 600 it",
				"file", filepath.Join(s.opts.Dir, f), "mode", fi.Mode().Perm().String())
		}
	}
}

// fingerprint hashes the names and contents of files.
func fingerprint(files []string, err error) (string, error) {
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

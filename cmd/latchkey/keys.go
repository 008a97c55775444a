package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/keys"
	"latchkey.dev/latchkey/internal/secret"
)

// setupKeys returns the keyring the server seals with.
//
// With --keys-secret the keys live in the Secret the operator keeps (docs/operations.md, "Keys:
// creation and rotation"): a keysecret.Loader on every replica reads it, and a keysecret.Keeper on the
// elected replica (with SQLite, the one replica) creates it when missing, rotates keys and
// re-seals stored values (keepKeys). The keyring is empty until the Loader has read the Secret; the
// returned Loader's WaitLoaded holds the first configuration back until then, so nothing is
// served, and nothing sealed, before.
//
// Without it the keys come from --keys-dir / --keys-file (or the development key), now.
func setupKeys(h host, o options, st keys.ResealStore, holder *config.Holder, log logr.Logger) (*secret.Keyring, *keptKeys, error) {
	if o.keysSecret == "" {
		kr, err := loadKeyring(o, log)
		return kr, nil, err
	}
	if o.keysDir != "" || o.keysFile != "" || o.primaryKey != "" {
		return nil, nil, errors.New("--keys-secret excludes --keys-dir, --keys-file and --primary-key")
	}
	ns, name, ok := strings.Cut(o.keysSecret, "/")
	if !ok || ns == "" || name == "" {
		return nil, nil, fmt.Errorf("--keys-secret %q: want namespace/name", o.keysSecret)
	}
	if o.signingAnnounce < 0 || o.signingRetire < 0 || o.signingRotate < 0 {
		return nil, nil, errors.New("--signing-key-announce, -retire and -rotate-every must not be negative")
	}
	if o.signingRotate > 0 && o.signingRotate <= o.signingAnnounce {
		return nil, nil, errors.New("--signing-key-rotate-every must be longer than --signing-key-announce")
	}
	return keepKeys(h, o, types.NamespacedName{Namespace: ns, Name: name}, st, holder, log)
}

// keptKeys are the operator's keys kept in a Secret (keepKeys, cluster mode only), as the
// compiler needs them: the signing keys, a wait for the first reading, and a hook to compile
// again when they change.
type keptKeys struct {
	signing    *keys.Signing
	waitLoaded func(context.Context) error
	changed    func(func())
}

// longestTokenLifetime is the longest any Project's signed tokens live (ID tokens live as
// long as access tokens); a retired signing key stays published at least this long.
func longestTokenLifetime(s *config.Snapshot) time.Duration {
	var d time.Duration
	if s == nil {
		return config.DefaultLifetimes().AccessToken
	}
	for _, p := range s.Projects {
		d = max(d, p.Lifetimes.AccessToken)
	}
	return d
}

// keyID limits ids to what a Secret key and a file name can both hold.
var keyID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// loadKeyring reads the sealing keys for upstream tokens. Losing a key loses every value sealed
// with it, so without configured keys an embedded install generates one key and keeps it on
// disk beside its database rather than using a key that dies with the process.
func loadKeyring(o options, log logr.Logger) (*secret.Keyring, error) {
	keys := map[string][]byte{}
	if o.keysDir != "" {
		if err := readKeysDir(o.keysDir, keys); err != nil {
			return nil, err
		}
	}
	if o.keysFile != "" {
		if err := readKeysFile(o.keysFile, keys); err != nil {
			return nil, err
		}
	}
	if o.keysDir == "" && o.keysFile == "" {
		path, ok := strings.CutPrefix(o.database, "sqlite:")
		if !ok {
			return nil, errors.New("--keys-dir or --keys-file is required with PostgreSQL: " +
				"every replica must seal upstream tokens with the same keys")
		}
		dir := filepath.Join(filepath.Dir(path), "keys")
		generated, err := devKeys(dir, keys)
		if err != nil {
			return nil, err
		}
		// logr has no warning level; slog, which the logger is built on, does.
		slog.New(logr.ToSlogHandler(log)).Warn("no --keys-dir or --keys-file given: sealing "+
			"upstream tokens with a development key stored beside the database. Anyone who can "+
			"read that directory can read the key; give production installs keys from a Secret.",
			"dir", dir, "generated", generated)
	}
	if len(keys) == 0 {
		return nil, errors.New("no sealing keys found in --keys-dir / --keys-file")
	}
	kr, err := secret.NewKeyring(keys, o.primaryKey)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(keys))
	for id := range keys {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	log.Info("sealing keys loaded", "ids", ids, "primary", kr.PrimaryID())
	return kr, nil
}

// readKeysDir reads one key per file, the file name being its id: the shape of a Kubernetes
// Secret mounted as a volume. Names starting with "." are the volume's own bookkeeping
// (..data and timestamped directories) and are skipped.
func readKeysDir(dir string, keys map[string][]byte) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("--keys-dir: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		path := filepath.Join(dir, name)
		fi, err := os.Stat(path) // follows the Secret volume's symlinks
		if err != nil {
			return fmt.Errorf("--keys-dir: %w", err)
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		if !keyID.MatchString(name) {
			return fmt.Errorf("--keys-dir: %s: key id must be letters, digits, '.', '_' or '-'", path)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("--keys-dir: %w", err)
		}
		key, err := parseKey(b)
		if err != nil {
			return fmt.Errorf("--keys-dir: %s: %w", path, err)
		}
		keys[name] = key
	}
	return nil
}

// readKeysFile reads "id=key" lines; blank lines and lines starting with # are ignored.
func readKeysFile(path string, keys map[string][]byte) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--keys-file: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, value, ok := strings.Cut(line, "=")
		id = strings.TrimSpace(id)
		if !ok || !keyID.MatchString(id) {
			return fmt.Errorf("--keys-file: %s:%d: want id=key", path, n)
		}
		if _, dup := keys[id]; dup {
			return fmt.Errorf("--keys-file: %s:%d: key id %q given twice", path, n, id)
		}
		key, err := parseKey([]byte(strings.TrimSpace(value)))
		if err != nil {
			// The line number only: the line itself holds key material.
			return fmt.Errorf("--keys-file: %s:%d: %w", path, n, err)
		}
		keys[id] = key
	}
	return sc.Err()
}

// parseKey accepts 32 raw bytes or text holding 32 bytes as base64 or hex.
func parseKey(b []byte) ([]byte, error) { return keys.ParseSealingKey(b) }

// devKeys loads the development keys in dir, creating one if there is none. It reports whether
// it generated a key.
func devKeys(dir string, keys map[string][]byte) (bool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("development keys: %w", err)
	}
	if err := readKeysDir(dir, keys); err != nil {
		return false, err
	}
	if len(keys) > 0 {
		return false, nil
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return false, err
	}
	id := "dev-" + time.Now().UTC().Format("20060102T150405Z")
	f, err := os.OpenFile(filepath.Join(dir, id), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return false, fmt.Errorf("development keys: %w", err)
	}
	_, werr := f.WriteString(base64.StdEncoding.EncodeToString(key) + "\n")
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return false, fmt.Errorf("development keys: %w", werr)
	}
	keys[id] = key
	return true, nil
}

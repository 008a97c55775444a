package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
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

	"latchkey.dev/latchkey/internal/secret"
)

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

// parseKey accepts 32 raw bytes (what `helm`'s randBytes or `head -c32 /dev/urandom` put in a
// Secret) or text holding 32 bytes as base64 (standard or URL, padded or not) or hex.
func parseKey(b []byte) ([]byte, error) {
	if len(b) == 32 {
		return b, nil
	}
	s := strings.TrimSpace(string(b))
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding,
		base64.URLEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(s); err == nil && len(k) == 32 {
			return k, nil
		}
	}
	if k, err := hex.DecodeString(s); err == nil && len(k) == 32 {
		return k, nil
	}
	return nil, errors.New("not an AES-256 key: want 32 raw bytes, or 32 bytes as base64 or hex")
}

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

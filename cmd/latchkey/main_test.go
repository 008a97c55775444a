package main

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
)

func TestParseKey(t *testing.T) {
	raw := bytes.Repeat([]byte{0xA5}, 32)
	tests := []struct {
		name  string
		in    []byte
		valid bool
	}{
		{"raw 32 bytes", raw, true},
		{"base64 with newline", []byte(base64.StdEncoding.EncodeToString(raw) + "\n"), true},
		{"unpadded base64url", []byte(base64.RawURLEncoding.EncodeToString(raw)), true},
		{"hex", []byte(hex.EncodeToString(raw)), true},
		{"16-byte key", []byte(base64.StdEncoding.EncodeToString(raw[:16])), false},
		{"33 raw bytes", append(raw, 1), false},
		{"empty", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := parseKey(tt.in)
			if !tt.valid {
				if err == nil {
					t.Fatalf("parseKey accepted %q", tt.in)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(k, raw) {
				t.Fatalf("parseKey = %x, want %x", k, raw)
			}
		})
	}
}

// A Secret mounted as a volume holds ..data and timestamped directories beside the keys.
func TestReadKeysDirSecretVolume(t *testing.T) {
	dir := t.TempDir()
	ts := filepath.Join(dir, "..2026_11_30_12_00_00.000")
	must(t, os.Mkdir(ts, 0o700))
	must(t, os.WriteFile(filepath.Join(ts, "2026-11"), bytes.Repeat([]byte{1}, 32), 0o600))
	must(t, os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data")))
	must(t, os.Symlink(filepath.Join("..data", "2026-11"), filepath.Join(dir, "2026-11")))

	keys := map[string][]byte{}
	must(t, readKeysDir(dir, keys))
	if len(keys) != 1 || len(keys["2026-11"]) != 32 {
		t.Fatalf("keys = %v, want one key 2026-11", keys)
	}
}

func TestReadKeysFile(t *testing.T) {
	k := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 32))
	tests := []struct {
		name    string
		content string
		ids     int
		errHas  string
	}{
		{"two keys and a comment", "# rotation\n2026-10=" + k + "\n\n2026-11 = " + k + "\n", 2, ""},
		{"missing id", "=" + k + "\n", 0, ":1: want id=key"},
		{"duplicate", "a=" + k + "\na=" + k + "\n", 0, "given twice"},
		{"short key", "a=c2hvcnQ=\n", 0, ":1: not an AES-256 key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "keys")
			must(t, os.WriteFile(path, []byte(tt.content), 0o600))
			keys := map[string][]byte{}
			err := readKeysFile(path, keys)
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("err = %v, want one containing %q", err, tt.errHas)
				}
				if strings.Contains(err.Error(), k) {
					t.Fatal("error message contains key material")
				}
				return
			}
			must(t, err)
			if len(keys) != tt.ids {
				t.Fatalf("got %d keys, want %d", len(keys), tt.ids)
			}
		})
	}
}

// The development key must survive a restart, or every sealed upstream token is lost.
func TestDevelopmentKeyPersists(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "state", "latchkey.db")
	o := options{database: db}
	first, err := loadKeyring(o, logr.Discard())
	must(t, err)
	id, sealed := first.Seal("test", []byte("upstream token"))

	second, err := loadKeyring(o, logr.Discard())
	must(t, err)
	pt, err := second.Open("test", id, sealed)
	if err != nil || string(pt) != "upstream token" {
		t.Fatalf("reopened keyring cannot open a value sealed before restart: %v", err)
	}
	fi, err := os.Stat(filepath.Join(strings.TrimPrefix(filepath.Dir(db), "sqlite:"), "keys", id))
	must(t, err)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode = %v, want 0600", fi.Mode().Perm())
	}
}

func TestPostgresNeedsKeys(t *testing.T) {
	_, err := loadKeyring(options{database: "postgres://latchkey@db/latchkey"}, logr.Discard())
	if err == nil {
		t.Fatal("PostgreSQL without keys was accepted; replicas would seal with different keys")
	}
}

func TestRedactDSN(t *testing.T) {
	tests := map[string]string{
		"postgres://lk:s3cret@db:5432/lk?sslmode=require": "postgres://lk:***@db:5432/lk?sslmode=require",
		"postgres://lk@db/lk":                             "postgres://lk:***@db/lk",
		"sqlite:.latchkey/latchkey.db":                    "sqlite:.latchkey/latchkey.db",
		"postgres://db/lk":                                "postgres://db/lk",
		"postgres://lk@db/lk?password=s3cret&sslmode=x":   "postgres://lk:***@db/lk?password=***&sslmode=x",
		"host=db user=lk password=s3cret dbname=lk":       "host=db user=lk password=*** dbname=lk",
		"host=db password='s3 cret' dbname=lk":            "host=db password=*** dbname=lk",
	}
	for in, want := range tests {
		if got := redactDSN(in); got != want {
			t.Errorf("redactDSN(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCheckPublicURL(t *testing.T) {
	tests := map[string]bool{
		"https://auth.example.com":        true,
		"https://auth.example.com/prefix": true,
		"http://127.0.0.1:8080":           true,
		"http://localhost:8080":           true,
		"http://auth.example.com":         false,
		"https://auth.example.com/#frag":  false,
		"auth.example.com":                false,
		"http://localhost.evil.example":   false,
		"http://127.0.0.2:8080":           true,
		"https://u:p@auth.example.com":    false,
	}
	for in, ok := range tests {
		if err := checkPublicURL(in); (err == nil) != ok {
			t.Errorf("checkPublicURL(%q) = %v, want ok=%v", in, err, ok)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

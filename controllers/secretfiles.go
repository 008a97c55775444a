package controllers

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/mail"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"latchkey.dev/latchkey/internal/config"
)

// passwordEntry is one person in a password file (spec.signIn.passwordSecretRef).
type passwordEntry struct {
	Email string `json:"email"`
	Name  string `json:"name,omitempty"`
	Hash  string `json:"hash"`
}

// parsePasswordFile reads a YAML or JSON list of {email, name, hash}. It refuses anything that is
// not a bcrypt or argon2id hash, so a plain password pasted by mistake never becomes one.
// Errors name the entry by position and never quote a hash.
func parsePasswordFile(data []byte) (map[string]config.PasswordUser, error) {
	var entries []passwordEntry
	if err := yaml.UnmarshalStrict(data, &entries); err != nil {
		return nil, fmt.Errorf("not a YAML or JSON list of {email, name, hash}: %w", err)
	}
	out := make(map[string]config.PasswordUser, len(entries))
	for i, e := range entries {
		email := strings.TrimSpace(e.Email)
		addr, err := mail.ParseAddress(email)
		if email == "" || err != nil || addr.Address != email || len(email) > 254 {
			return nil, fmt.Errorf("entry %d: email %q is not an email address", i+1, e.Email)
		}
		if !isPasswordHash(e.Hash) {
			return nil, fmt.Errorf("entry %d (%s): hash must be bcrypt ($2a$, $2b$, $2y$) or argon2id ($argon2id$)", i+1, email)
		}
		key := strings.ToLower(email)
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("entry %d: email %s appears more than once", i+1, email)
		}
		out[key] = config.PasswordUser{Email: email, Name: strings.TrimSpace(e.Name), Hash: e.Hash}
	}
	return out, nil
}

func isPasswordHash(h string) bool {
	switch {
	case strings.HasPrefix(h, "$2a$"), strings.HasPrefix(h, "$2b$"), strings.HasPrefix(h, "$2y$"):
		return len(h) == 60
	case strings.HasPrefix(h, "$argon2id$"):
		return strings.Count(h, "$") == 5
	}
	return false
}

// parseSigningKeys reads a Secret of PEM private keys (spec.signingKeySecretRef). The entry whose
// name sorts last is current and comes first; the others follow, newest first, so tokens they
// signed keep verifying while keys rotate.
func parseSigningKeys(data map[string][]byte) ([]config.SigningKey, error) {
	names := make([]string, 0, len(data))
	for k := range data {
		names = append(names, k)
	}
	if len(names) == 0 {
		return nil, errors.New("holds no keys")
	}
	slices.Sort(names)
	slices.Reverse(names)
	out := make([]config.SigningKey, 0, len(names))
	for _, name := range names {
		key, alg, err := parsePrivateKey(data[name])
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", name, err)
		}
		out = append(out, config.SigningKey{ID: name, Algorithm: alg, Private: key})
	}
	return out, nil
}

func parsePrivateKey(data []byte) (any, string, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, "", errors.New("not PEM")
	}
	var key any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, "", fmt.Errorf("PEM block %q is not a private key", block.Type)
	}
	if err != nil {
		return nil, "", errors.New("cannot parse the private key")
	}
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return nil, "", errors.New("ECDSA keys must use P-256 (ES256)")
		}
		return k, "ES256", nil
	case *rsa.PrivateKey:
		if k.N.BitLen() < 2048 {
			return nil, "", errors.New("RSA keys must have at least 2048 bits")
		}
		return k, "RS256", nil
	default:
		return nil, "", fmt.Errorf("unsupported key type %T; use ECDSA P-256 or RSA", key)
	}
}

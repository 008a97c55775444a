package secret

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
)

// Keyring seals and opens values with AES-256-GCM. Every sealed value records the id of the key
// that sealed it, so keys can rotate without downtime: new values use the primary key, old ones
// still open with the key that sealed them until they are re-sealed or expire.
//
// Replace swaps the keys while the Keyring is in use, so a rotation reaches every handler
// without a restart. The zero Keyring holds no keys: it opens nothing, and Seal must not be
// called before Replace.
type Keyring struct {
	set atomic.Pointer[ringKeys]
}

type ringKeys struct {
	primary string
	aeads   map[string]cipher.AEAD
}

// ErrUnknownKey: the value was sealed with a key this keyring does not hold.
var ErrUnknownKey = errors.New("secret: sealed with an unknown key")

// ErrOpen: the value is not authentic (tampered, or sealed for another purpose).
var ErrOpen = errors.New("secret: cannot open sealed value")

// NewKeyring builds a keyring from 32-byte keys by id. primary names the key used to seal; when
// empty, the lexically greatest id is used (ids like "2026-11" then rotate naturally).
func NewKeyring(keys map[string][]byte, primary string) (*Keyring, error) {
	k := &Keyring{}
	if err := k.Replace(keys, primary); err != nil {
		return nil, err
	}
	return k, nil
}

// Replace makes keys the keyring's keys and primary (or, when empty, the lexically greatest id)
// the key that seals. On error the keyring keeps its keys.
func (k *Keyring) Replace(keys map[string][]byte, primary string) error {
	r, err := newRingKeys(keys, primary)
	if err != nil {
		return err
	}
	k.set.Store(r)
	return nil
}

// IDs are the ids of the keys the keyring holds, sorted.
func (k *Keyring) IDs() []string {
	r := k.set.Load()
	if r == nil {
		return nil
	}
	ids := make([]string, 0, len(r.aeads))
	for id := range r.aeads {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func newRingKeys(keys map[string][]byte, primary string) (*ringKeys, error) {
	if len(keys) == 0 {
		return nil, errors.New("secret: keyring needs at least one key")
	}
	k := &ringKeys{aeads: make(map[string]cipher.AEAD, len(keys))}
	ids := make([]string, 0, len(keys))
	for id, key := range keys {
		if len(key) != 32 {
			return nil, fmt.Errorf("secret: key %q is %d bytes, want 32 (AES-256)", id, len(key))
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, err
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		k.aeads[id] = aead
		ids = append(ids, id)
	}
	sort.Strings(ids)
	if primary == "" {
		primary = ids[len(ids)-1]
	}
	if _, ok := k.aeads[primary]; !ok {
		return nil, fmt.Errorf("secret: primary key %q is not in the keyring", primary)
	}
	k.primary = primary
	return k, nil
}

// NewRandomKeyring returns a keyring with one fresh random key, for tests and for an embedded
// install that has not been given keys (values sealed with it do not survive a restart).
func NewRandomKeyring() *Keyring {
	key := make([]byte, 32)
	rand.Read(key)
	k, _ := NewKeyring(map[string][]byte{"ephemeral": key}, "")
	return k
}

// PrimaryID is the id of the key that Seal uses.
func (k *Keyring) PrimaryID() string {
	if r := k.set.Load(); r != nil {
		return r.primary
	}
	return ""
}

// Seal encrypts plaintext with the primary key. purpose is bound as associated data, so a value
// sealed for one use (say, an upstream token) cannot be replayed as another (a link code).
func (k *Keyring) Seal(purpose string, plaintext []byte) (keyID string, sealed []byte) {
	r := k.set.Load()
	aead := r.aeads[r.primary]
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plaintext)+aead.Overhead())
	rand.Read(nonce)
	return r.primary, aead.Seal(nonce, nonce, plaintext, []byte(purpose))
}

// Open decrypts a value sealed by Seal with the key keyID.
func (k *Keyring) Open(purpose, keyID string, sealed []byte) ([]byte, error) {
	r := k.set.Load()
	if r == nil {
		return nil, ErrUnknownKey
	}
	aead, ok := r.aeads[keyID]
	if !ok {
		return nil, ErrUnknownKey
	}
	if len(sealed) < aead.NonceSize()+aead.Overhead() {
		return nil, ErrOpen
	}
	nonce, ct := sealed[:aead.NonceSize()], sealed[aead.NonceSize():]
	pt, err := aead.Open(nil, nonce, ct, []byte(purpose))
	if err != nil {
		return nil, ErrOpen
	}
	return pt, nil
}

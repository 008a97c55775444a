package mcp

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Why requestState is refused. Relay.Token returns them (test with errors.Is); Relay.Result turns
// them into a JSON-RPC invalid-params error, since the state is attacker-controlled input that
// failed verification, not a tool failure.
var (
	ErrStateInvalid      = errors.New("requestState is not authentic (edited, or sealed by another server)")
	ErrStateExpired      = errors.New("requestState has expired")
	ErrStateOtherPerson  = errors.New("requestState was issued to another person")
	ErrStateOtherRequest = errors.New("requestState was issued for a different request")
)

const (
	// statePrefix versions the format, so a later one can be told apart before decrypting.
	statePrefix = "lk1."
	// stateAD binds sealed states to this use: a value sealed with the same key for another
	// purpose does not open here.
	stateAD = "latchkey.dev/mcp requestState v1"
	// maxStateLen bounds what is decoded from a request: real states are about 300 bytes.
	maxStateLen = 4096
)

// requestState is what the relay seals into an input_required result and expects back on the
// retry: who asked, for which request, until when. The MCP specification (2026-07-28,
// multi round-trip requests) asks for exactly these three bindings.
type requestState struct {
	// Subject and Client identify the authenticated caller: the person, and the agent their
	// token was issued to.
	Subject string `json:"sub"`
	Client  string `json:"cid,omitempty"`
	// Request is the digest of the tool call: name and canonical arguments.
	Request string `json:"req"`
	// Audience and Link say which connect link the person was shown.
	Audience string `json:"aud"`
	Link     string `json:"lid"`
	// Expires is in Unix seconds.
	Expires int64 `json:"exp"`
}

func newStateAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("latchkey: requestState key is %d bytes, want 32 (AES-256-GCM)", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

func sealState(aead cipher.AEAD, s requestState) string {
	plain, _ := json.Marshal(s) // plain strings and an int: cannot fail
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
	rand.Read(nonce)
	sealed := aead.Seal(nonce, nonce, plain, []byte(stateAD))
	return statePrefix + base64.RawURLEncoding.EncodeToString(sealed)
}

// openState verifies a state from a retry: authentic first (nothing in it counts before that),
// then the person, then the request, then the clock.
func openState(aead cipher.AEAD, raw string, caller Caller, digest string, now time.Time) (*requestState, error) {
	if len(raw) > maxStateLen || !strings.HasPrefix(raw, statePrefix) {
		return nil, ErrStateInvalid
	}
	sealed, err := base64.RawURLEncoding.DecodeString(raw[len(statePrefix):])
	if err != nil || len(sealed) < aead.NonceSize()+aead.Overhead() {
		return nil, ErrStateInvalid
	}
	n := aead.NonceSize()
	plain, err := aead.Open(nil, sealed[:n], sealed[n:], []byte(stateAD))
	if err != nil {
		return nil, ErrStateInvalid
	}
	var s requestState
	if err := json.Unmarshal(plain, &s); err != nil {
		return nil, ErrStateInvalid
	}
	if !sameString(s.Subject, caller.Subject) || !sameString(s.Client, caller.ClientID) {
		return nil, ErrStateOtherPerson
	}
	if !sameString(s.Request, digest) {
		return nil, ErrStateOtherRequest
	}
	if !now.Before(time.Unix(s.Expires, 0)) {
		return nil, ErrStateExpired
	}
	return &s, nil
}

func sameString(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// requestDigest names one tool call: its method, tool name and arguments. Arguments are
// canonicalised (keys sorted, insignificant space dropped) so a client that re-encodes the same
// arguments on retry still matches, while any changed value does not.
func requestDigest(params *sdk.CallToolParamsRaw) string {
	h := sha256.New()
	h.Write([]byte("tools/call\x00"))
	h.Write([]byte(params.Name))
	h.Write([]byte{0})
	h.Write(canonicalJSON(params.Arguments))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

func canonicalJSON(raw json.RawMessage) []byte {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.UseNumber() // keep numbers as written: 1 and 1.0 stay different requests
	var v any
	if err := dec.Decode(&v); err != nil {
		return trimmed
	}
	out, err := json.Marshal(v) // map keys come out sorted
	if err != nil {
		return trimmed
	}
	return out
}

package mcp

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

func testAEADKey(t *testing.T) []byte {
	t.Helper()
	key := make([]byte, 32)
	rand.Read(key)
	return key
}

func TestStateRoundTripAndRefusals(t *testing.T) {
	aead, err := newStateAEAD(testAEADKey(t))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := newStateAEAD(testAEADKey(t))
	now := time.Unix(1_800_000_000, 0)
	alice := Caller{Token: "lk_at_alice", Subject: "alice", ClientID: "agent-1"}
	params := &sdk.CallToolParamsRaw{Name: "list_repos", Arguments: json.RawMessage(`{"owner":"alice","page":1}`)}
	digest := requestDigest(params)
	st := requestState{Subject: "alice", Client: "agent-1", Request: digest, Audience: "github", Link: "c-alice", Expires: now.Add(10 * time.Minute).Unix()}
	sealed := sealState(aead, st)

	got, err := openState(aead, sealed, alice, digest, now)
	if err != nil || *got != st {
		t.Fatalf("openState = %+v, %v; want %+v", got, err, st)
	}
	if strings.Contains(sealed, "alice") || strings.Contains(sealed, "github") {
		t.Errorf("sealed state %q shows its contents", sealed)
	}

	flip := func(s string, i int) string {
		raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(s, statePrefix))
		if err != nil {
			t.Fatal(err)
		}
		raw[i] ^= 0x01
		return statePrefix + base64.RawURLEncoding.EncodeToString(raw)
	}
	tests := []struct {
		name   string
		state  string
		caller Caller
		digest string
		now    time.Time
		want   error
	}{
		{"nonce byte flipped", flip(sealed, 0), alice, digest, now, ErrStateInvalid},
		{"ciphertext byte flipped", flip(sealed, 20), alice, digest, now, ErrStateInvalid},
		{"tag byte flipped", flip(sealed, len(mustDecode(t, sealed))-1), alice, digest, now, ErrStateInvalid},
		{"sealed with another key", sealState(other, st), alice, digest, now, ErrStateInvalid},
		{"no prefix", strings.TrimPrefix(sealed, statePrefix), alice, digest, now, ErrStateInvalid},
		{"not base64", statePrefix + "!!!", alice, digest, now, ErrStateInvalid},
		{"too short", statePrefix + "AAAA", alice, digest, now, ErrStateInvalid},
		{"too long", statePrefix + strings.Repeat("A", maxStateLen), alice, digest, now, ErrStateInvalid},
		{"other person", sealed, Caller{Token: "lk_at_mallory", Subject: "mallory", ClientID: "agent-1"}, digest, now, ErrStateOtherPerson},
		{"same person, other agent", sealed, Caller{Token: "lk_at_alice2", Subject: "alice", ClientID: "agent-2"}, digest, now, ErrStateOtherPerson},
		{"other request", sealed, alice, requestDigest(&sdk.CallToolParamsRaw{Name: "list_repos", Arguments: json.RawMessage(`{"owner":"bob","page":1}`)}), now, ErrStateOtherRequest},
		{"other tool", sealed, alice, requestDigest(&sdk.CallToolParamsRaw{Name: "delete_repo", Arguments: params.Arguments}), now, ErrStateOtherRequest},
		{"expired at the second", sealed, alice, digest, now.Add(10 * time.Minute), ErrStateExpired},
		{"expired long ago", sealed, alice, digest, now.Add(time.Hour), ErrStateExpired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := openState(aead, tt.state, tt.caller, tt.digest, tt.now)
			if !errors.Is(err, tt.want) || got != nil {
				t.Fatalf("openState = %+v, %v; want %v", got, err, tt.want)
			}
		})
	}
	if _, err := openState(aead, sealed, alice, digest, now.Add(10*time.Minute-time.Second)); err != nil {
		t.Errorf("a second before expiry: %v", err)
	}
}

func mustDecode(t *testing.T, s string) []byte {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(s, statePrefix))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestRequestDigestIsCanonical(t *testing.T) {
	d := func(name, args string) string {
		var raw json.RawMessage
		if args != "" {
			raw = json.RawMessage(args)
		}
		return requestDigest(&sdk.CallToolParamsRaw{Name: name, Arguments: raw})
	}
	same := [][2]string{
		{`{"a":1,"b":[1,2]}`, `{ "b" : [1, 2], "a" : 1 }`},
		{``, `{}`},
		{`null`, `{}`},
	}
	for _, p := range same {
		if d("t", p[0]) != d("t", p[1]) {
			t.Errorf("digest(%s) != digest(%s)", p[0], p[1])
		}
	}
	different := [][2]string{
		{`{"a":1}`, `{"a":2}`},
		{`{"a":1}`, `{"a":1.0}`},
		{`{"a":"1"}`, `{"a":1}`},
		{`{"a":1}`, `{"a":1,"b":null}`},
	}
	for _, p := range different {
		if d("t", p[0]) == d("t", p[1]) {
			t.Errorf("digest(%s) == digest(%s)", p[0], p[1])
		}
	}
	if d("t", `{}`) == d("u", `{}`) {
		t.Error("tool name is not part of the digest")
	}
}

func TestNewStateAEADNeeds32Bytes(t *testing.T) {
	for _, n := range []int{0, 16, 24, 31, 33} {
		if _, err := newStateAEAD(bytes.Repeat([]byte{1}, n)); err == nil {
			t.Errorf("newStateAEAD(%d bytes) = nil error", n)
		}
	}
}

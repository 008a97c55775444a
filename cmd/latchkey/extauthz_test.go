//go:build !latchkey_local

package main

import (
	"strings"
	"testing"

	"github.com/go-logr/logr"
)

// TestExtAuthzListenerRefusesPlaintextBeyondLoopback: plaintext ext_authz, whose OK answers
// carry people's tokens, is served on loopback (a sidecar) and elsewhere only with
// --ext-authz-insecure; TLS needs all three files, and excludes --ext-authz-insecure.
func TestExtAuthzListenerRefusesPlaintextBeyondLoopback(t *testing.T) {
	cases := []struct {
		name string
		o    extAuthzOptions
		want string // "" for a listener
	}{
		{"loopback, plaintext", extAuthzOptions{listen: "127.0.0.1:0"}, ""},
		{"loopback v6, plaintext", extAuthzOptions{listen: "[::1]:0"}, ""},
		{"every address, plaintext", extAuthzOptions{listen: ":0"}, "not a loopback address"},
		{"every address, insecure", extAuthzOptions{listen: ":0", insecure: true}, ""},
		{"certificate without a client CA", extAuthzOptions{listen: ":0", certFile: "tls.crt", keyFile: "tls.key"}, "the CA of the clients' certificates"},
		{"only a client CA", extAuthzOptions{listen: "127.0.0.1:0", clientCA: "ca.crt"}, "needs a certificate"},
		{"TLS and insecure", extAuthzOptions{listen: ":0", certFile: "tls.crt", keyFile: "tls.key", clientCA: "ca.crt", insecure: true}, "excludes"},
		{"TLS files missing", extAuthzOptions{listen: ":0", certFile: "/nonexistent/tls.crt", keyFile: "/nonexistent/tls.key", clientCA: "/nonexistent/ca.crt"}, "no such file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ln, cfg, err := tc.o.listener(logr.Discard())
			if ln != nil {
				defer ln.Close()
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want == "" && cfg != nil:
				t.Fatal("TLS without TLS flags")
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

package main

import (
	"io"
	"net/http"
	"runtime"
	"testing"

	"github.com/go-logr/logr"
)

// TestDebugPprofLoopbackOnly plays someone on the network: profiles and goroutine dumps can
// hold request data, so --debug-pprof-listen refuses any address but a loopback one, and an
// empty one serves nothing.
func TestDebugPprofLoopbackOnly(t *testing.T) {
	t.Cleanup(func() {
		runtime.SetMutexProfileFraction(0)
		runtime.SetBlockProfileRate(0)
	})
	for _, tc := range []struct {
		addr  string
		serve bool
	}{
		{"0.0.0.0:0", false},
		{":0", false},
		{"[::]:0", false},
		{"192.0.2.1:0", false},
		{"example.com:0", false},
		{"127.0.0.1", false}, // no port
		{"127.0.0.1:0", true},
		{"localhost:0", true},
		{"", false},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			ln, err := serveDebugPprof(tc.addr, logr.Discard())
			if ln != nil {
				defer ln.Close()
			}
			if !tc.serve {
				if ln != nil {
					t.Fatalf("serving profiles on %s", ln.Addr())
				}
				if tc.addr != "" && err == nil {
					t.Fatal("no error for a refused address")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.Get("http://" + ln.Addr().String() + "/debug/pprof/cmdline") //nolint:noctx // loopback test
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
		})
	}
}

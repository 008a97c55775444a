package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"time"

	"github.com/go-logr/logr"
)

// debugPprofListen is --debug-pprof-listen: Go's profiles (CPU, heap, mutex, block,
// goroutines) over HTTP on a loopback address, for measuring the process under load
// (docs/performance.md). Off by default; registered here so main.go only calls
// startDebugPprof.
var debugPprofListen = flag.CommandLine.String("debug-pprof-listen", "",
	"loopback address (127.0.0.1:6060) to serve Go's profiles at /debug/pprof/ for performance work; also turns on mutex and block sampling. Empty: off")

// Sampling while the profiles are served: one contended lock in mutexFraction, and blocking
// events of blockRate nanoseconds or more (shorter ones sampled in proportion). Both cost
// little at these rates and nothing when the flag is off.
const (
	mutexFraction = 10
	blockRate     = int((10 * time.Microsecond) / time.Nanosecond)
)

// startDebugPprof serves the profiles when --debug-pprof-listen is set. Only a loopback
// address is accepted: a CPU profile holds function names and timings, a heap or goroutine
// dump may hold request data, so the endpoint is for someone on the machine.
func startDebugPprof(log logr.Logger) {
	if _, err := serveDebugPprof(*debugPprofListen, log); err != nil {
		fmt.Fprintln(flag.CommandLine.Output(), "latchkey: --debug-pprof-listen:", err)
		os.Exit(2)
	}
}

// serveDebugPprof starts the profiles' server on addr and returns its listener (nil when addr
// is empty); the server runs until the listener is closed or the process exits.
func serveDebugPprof(addr string, log logr.Logger) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, errors.New("must be a loopback address (127.0.0.1:PORT, [::1]:PORT or localhost:PORT)")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	runtime.SetMutexProfileFraction(mutexFraction)
	runtime.SetBlockProfileRate(blockRate)
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }() // serves until the listener closes
	log.Info("serving Go profiles on loopback (--debug-pprof-listen)", "address", ln.Addr().String())
	return ln, nil
}

package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// Stopping the manager must let a request already being served finish, and refuse new ones.
func TestHTTPServerDrainsInFlightRequests(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		io.WriteString(w, "finished")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	s := serverRunnable("test", ln, &http.Server{Handler: h}, time.Minute)
	if s.NeedLeaderElection() {
		t.Fatal("the HTTP server must run on every replica, not only the leader")
	}

	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), logr.Discard()))
	stopped := make(chan error, 1)
	go func() { stopped <- s.Start(ctx) }()

	type result struct {
		body string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			got <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		got <- result{string(b), err}
	}()
	<-entered
	cancel()

	// Shutdown closes the listener first; once a new connection is refused, draining has begun.
	for {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			break
		}
		c.Close()
		select {
		case err := <-stopped:
			t.Fatalf("Start returned %v while a request was in flight", err)
		default:
		}
	}
	close(release)
	r := <-got
	if r.err != nil || r.body != "finished" {
		t.Fatalf("in-flight request: body %q, err %v; want it to finish", r.body, r.err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Start returned %v after a clean drain", err)
	}
}

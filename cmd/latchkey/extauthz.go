//go:build !latchkey_local

package main

import (
	"context"
	"fmt"
	"net"

	"github.com/go-logr/logr"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/metrics"
	"latchkey.dev/latchkey/webhook"
	"latchkey.dev/latchkey/webhook/extauthz"
)

// addExtAuthz serves Envoy external authorization on addr (--ext-authz-listen), when set, on
// every replica, deciding through the HTTP server's token proxy.
func addExtAuthz(mgr host, addr string, h *config.Holder, server *webhook.Server, m *metrics.Metrics, log logr.Logger) error {
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--ext-authz-listen: %w", err)
	}
	log.Info("serving Envoy external authorization", "listen", ln.Addr().String())
	return mgr.Add(&extAuthzRunnable{srv: extauthz.New(h, server.Proxy(), m), ln: ln})
}

// extAuthzRunnable runs on every replica, like the HTTP server.
type extAuthzRunnable struct {
	srv *extauthz.Server
	ln  net.Listener
}

func (r *extAuthzRunnable) NeedLeaderElection() bool { return false }

func (r *extAuthzRunnable) Start(ctx context.Context) error { return r.srv.Serve(ctx, r.ln) }

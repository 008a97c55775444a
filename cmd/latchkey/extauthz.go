//go:build !latchkey_local

package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"

	"github.com/go-logr/logr"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/metrics"
	"latchkey.dev/latchkey/webhook"
	"latchkey.dev/latchkey/webhook/extauthz"
)

// extAuthzOptions are the ext_authz listener's flags.
type extAuthzOptions struct {
	listen                      string
	certFile, keyFile, clientCA string
	insecure                    bool
}

func (o *extAuthzOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.listen, "ext-authz-listen", "",
		"address of the Envoy external authorization service (ext_authz v3 gRPC; docs/token-proxy.md); it answers with people's upstream tokens, "+
			"so only the gateway may call it: mutual TLS (--ext-authz-tls-cert, --ext-authz-tls-key, --ext-authz-client-ca), or plaintext on loopback for a sidecar; empty: off")
	fs.StringVar(&o.certFile, "ext-authz-tls-cert", "", "the ext_authz listener's serving certificate (PEM), reloaded when the file changes")
	fs.StringVar(&o.keyFile, "ext-authz-tls-key", "", "the key of --ext-authz-tls-cert (PEM)")
	fs.StringVar(&o.clientCA, "ext-authz-client-ca", "",
		"CA certificates (PEM) that sign the gateway's client certificates; a caller without one is refused in the handshake")
	fs.BoolVar(&o.insecure, "ext-authz-insecure", false,
		"serve ext_authz in plaintext, without client authentication, on an address that is not loopback: whoever reaches the port reads people's tokens, so only behind a NetworkPolicy or mesh mTLS that admits the gateway alone")
}

// listener opens the ext_authz listener and its TLS configuration (nil: plaintext). Plaintext
// is refused on an address that is not loopback unless --ext-authz-insecure says so: an OK
// answer carries a person's upstream token.
func (o extAuthzOptions) listener(log logr.Logger) (net.Listener, *tls.Config, error) {
	tlsFlags := o.certFile != "" || o.keyFile != "" || o.clientCA != ""
	var cfg *tls.Config
	if tlsFlags {
		if o.insecure {
			return nil, nil, errors.New("--ext-authz-insecure excludes --ext-authz-tls-cert, --ext-authz-tls-key and --ext-authz-client-ca")
		}
		var err error
		cfg, err = (&extauthz.TLSFiles{CertFile: o.certFile, KeyFile: o.keyFile, ClientCAFile: o.clientCA, Log: log}).Config()
		if err != nil {
			return nil, nil, fmt.Errorf("--ext-authz-tls-cert, --ext-authz-tls-key, --ext-authz-client-ca: %w", err)
		}
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return nil, nil, fmt.Errorf("--ext-authz-listen: %w", err)
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); !tlsFlags && !o.insecure && (!ok || !tcp.IP.IsLoopback()) {
		ln.Close()
		return nil, nil, fmt.Errorf("--ext-authz-listen %s is not a loopback address: give --ext-authz-tls-cert, --ext-authz-tls-key and --ext-authz-client-ca "+
			"(mutual TLS with the gateway), or --ext-authz-insecure where a NetworkPolicy admits the gateway alone", o.listen)
	}
	return ln, cfg, nil
}

// addExtAuthz serves Envoy external authorization (--ext-authz-listen), when set, on every
// replica, deciding through the HTTP server's token proxy.
func addExtAuthz(mgr host, o extAuthzOptions, h *config.Holder, server *webhook.Server, m *metrics.Metrics, log logr.Logger) error {
	if o.listen == "" {
		return nil
	}
	ln, cfg, err := o.listener(log.WithName("ext-authz"))
	if err != nil {
		return err
	}
	log.Info("serving Envoy external authorization", "listen", ln.Addr().String(), "mutualTLS", cfg != nil)
	return mgr.Add(&extAuthzRunnable{srv: extauthz.New(h, server.Proxy(), m), ln: ln, tls: cfg})
}

// extAuthzRunnable runs on every replica, like the HTTP server.
type extAuthzRunnable struct {
	srv *extauthz.Server
	ln  net.Listener
	tls *tls.Config
}

func (r *extAuthzRunnable) NeedLeaderElection() bool { return false }

func (r *extAuthzRunnable) Start(ctx context.Context) error { return r.srv.Serve(ctx, r.ln, r.tls) }

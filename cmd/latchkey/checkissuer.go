package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"latchkey.dev/latchkey/internal/issuercheck"
	"latchkey.dev/latchkey/internal/trust"
)

// checkIssuer is `latchkey check-issuer`: the chart's `helm test` Pod runs it from the same
// image, so the test needs no other image. It returns the process's exit code: 0 when every
// check passed, 1 when one failed, 2 for a usage error.
func checkIssuer(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("latchkey check-issuer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: latchkey check-issuer --public-url URL [--via URL] [namespace/project ...]")
		fmt.Fprintln(stderr, "Checks that the server is ready and that each Project's issuer publishes its metadata and keys.")
		fs.PrintDefaults()
	}
	publicURL := fs.String("public-url", "", "the installation's public URL (the chart's publicURL); required")
	via := fs.String("via", "", "send the requests here (e.g. http://latchkey.latchkey-system.svc) instead of to the public URL's host")
	timeout := fs.Duration("timeout", 10*time.Second, "how long one request may take")
	wait := fs.Duration("wait", 0, "keep checking until every check passes or this much time has passed (a server that just started)")
	caBundle := fs.String("ca-bundle", "", "PEM file of CA certificates trusted in addition to the system's")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *publicURL == "" {
		fs.Usage()
		return 2
	}
	client := &http.Client{Timeout: *timeout}
	if *caBundle != "" {
		pool, err := trust.Load(*caBundle)
		if err != nil {
			fmt.Fprintln(stderr, "latchkey check-issuer: --ca-bundle:", err)
			return 2
		}
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	deadline := time.Now().Add(*wait)
	for {
		results, err := issuercheck.Run(ctx, issuercheck.Options{PublicURL: *publicURL, Via: *via, Projects: fs.Args(), Client: client})
		if err != nil {
			fmt.Fprintln(stderr, "latchkey check-issuer:", err)
			return 2
		}
		failed := 0
		for _, r := range results {
			if r.Err != nil {
				failed++
			}
		}
		if failed == 0 || !time.Now().Before(deadline) || ctx.Err() != nil {
			for _, r := range results {
				if r.Err != nil {
					fmt.Fprintf(stdout, "FAIL %s: %v\n", r.What, r.Err)
				} else {
					fmt.Fprintf(stdout, "ok   %s\n", r.What)
				}
			}
			if failed > 0 {
				return 1
			}
			return 0
		}
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
}

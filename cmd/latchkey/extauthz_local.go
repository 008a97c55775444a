//go:build latchkey_local

package main

import (
	"errors"

	"github.com/go-logr/logr"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/metrics"
	"latchkey.dev/latchkey/webhook"
)

// addExtAuthz, in the build `make run-local` makes, refuses --ext-authz-listen: that build
// leaves out the Envoy external authorization server, whose Envoy API and gRPC packages are
// a tenth of what a cold build compiles (docs/decisions/0084-local-build-links-what-it-serves.md).
func addExtAuthz(_ host, addr string, _ *config.Holder, _ *webhook.Server, _ *metrics.Metrics, _ logr.Logger) error {
	if addr == "" {
		return nil
	}
	return errors.New("--ext-authz-listen: this build of latchkey has no Envoy external authorization server " +
		"(it was built for `make run-local`); build with `make build`")
}

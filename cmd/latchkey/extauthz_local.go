//go:build latchkey_local

package main

import (
	"errors"
	"flag"

	"github.com/go-logr/logr"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/metrics"
	"latchkey.dev/latchkey/webhook"
)

// extAuthzOptions, in the build `make run-local` makes, takes the same flags as the full
// build's, so a command line written for one parses in the other and is refused with a reason.
type extAuthzOptions struct {
	listen                      string
	certFile, keyFile, clientCA string
	insecure                    bool
}

const notInThisBuild = "not in this build of latchkey (it was built for `make run-local`); build with `make build`"

func (o *extAuthzOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.listen, "ext-authz-listen", "", "Envoy external authorization: "+notInThisBuild)
	fs.StringVar(&o.certFile, "ext-authz-tls-cert", "", notInThisBuild)
	fs.StringVar(&o.keyFile, "ext-authz-tls-key", "", notInThisBuild)
	fs.StringVar(&o.clientCA, "ext-authz-client-ca", "", notInThisBuild)
	fs.BoolVar(&o.insecure, "ext-authz-insecure", false, notInThisBuild)
}

// addExtAuthz refuses --ext-authz-listen: this build leaves out the Envoy external
// authorization server, whose Envoy API and gRPC packages are a tenth of what a cold build
// compiles (docs/decisions/0084-local-build-links-what-it-serves.md).
func addExtAuthz(_ host, o extAuthzOptions, _ *config.Holder, _ *webhook.Server, _ *metrics.Metrics, _ logr.Logger) error {
	if o == (extAuthzOptions{}) {
		return nil
	}
	return errors.New("--ext-authz-listen: the Envoy external authorization server is " + notInThisBuild)
}

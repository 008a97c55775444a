//go:build latchkey_local

package main

import (
	"context"
	"errors"
)

// runCluster, in the launcher `make build-local` builds, says which build has the cluster demo:
// this one leaves out envtest and the Kubernetes clients `make run` needs
// (docs/decisions/0084-local-build-links-what-it-serves.md).
func runCluster(context.Context, options, string, string) error {
	return errors.New("this launcher was built by `make build-local` for `make run-local` and has no cluster demo; `make run` builds the one that has")
}

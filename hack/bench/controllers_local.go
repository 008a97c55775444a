//go:build latchkey_local

package main

import (
	"context"
	"errors"
)

// The latchkey_local build of the controllers package has no reconcilers (decision 0085), so
// the controllers benchmark needs the untagged build.
func runControllers(context.Context, options) error {
	return errors.New("-controllers measures the reconcilers on a cluster; build bench without -tags latchkey_local")
}

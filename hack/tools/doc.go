// Package tools is a separate module for the command-line tools CI uses that the operator does
// not import (Helm, for `make chart-lint`; the image builder in ./image, for `make image`, with
// go-containerregistry), so their dependencies stay out of the main go.mod. For the same reason it
// is not in the repository's go.work: the Makefile runs go with GOWORK=off, and so must go
// commands typed here.
package tools

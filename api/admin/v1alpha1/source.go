package v1alpha1

import "embed"

// Source is this package's Go source: the admin API's OpenAPI document takes every type's and
// field's description from the doc comments above, so `kubectl explain` says what this file
// says and cannot drift from it.
//
//go:embed types.go shared.go
var Source embed.FS

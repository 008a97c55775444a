// Package crd embeds the CustomResourceDefinitions controller-gen writes to bases/, so a program
// can apply the API server's own validation to Latchkey objects without an API server (the
// no-cluster mode, docs/no-cluster.md). The files are the ones `make manifests` generates and the
// chart copies; nothing here is edited by hand.
package crd

import "embed"

// Bases holds bases/*.yaml, one CustomResourceDefinition per file.
//
//go:embed bases/*.yaml
var Bases embed.FS

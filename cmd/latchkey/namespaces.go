package main

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// watchNamespaces parses --watch-namespaces: namespace names separated by commas, spaces
// around them ignored, duplicates dropped. Empty means every namespace.
func watchNamespaces(s string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		ns := strings.TrimSpace(f)
		if ns == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, fmt.Errorf("--watch-namespaces: %q is not a namespace name: %s", ns, strings.Join(errs, "; "))
		}
		if !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	return out, nil
}

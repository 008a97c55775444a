//go:build !latchkey_local

package main

import (
	"errors"
	"testing"

	"latchkey.dev/latchkey/internal/devcerts"
)

func TestParseFrontProxy(t *testing.T) {
	ca, err := devcerts.NewCA("front-proxy-ca")
	if err != nil {
		t.Fatal(err)
	}
	data := map[string]string{
		"requestheader-client-ca-file":   string(ca.PEM),
		"requestheader-allowed-names":    `["front-proxy-client"]`,
		"requestheader-username-headers": `["X-Remote-User"]`,
		"requestheader-group-headers":    `["X-Remote-Group"]`,
	}
	fp, err := parseFrontProxy(data, "")
	if err != nil || fp.ClientCA == nil || len(fp.AllowedNames) != 1 || fp.AllowedNames[0] != "front-proxy-client" ||
		fp.UsernameHeaders[0] != "X-Remote-User" || fp.GroupHeaders[0] != "X-Remote-Group" {
		t.Fatalf("parsed %+v, %v", fp, err)
	}
	fp, err = parseFrontProxy(data, "aggregator, other")
	if err != nil || len(fp.AllowedNames) != 2 || fp.AllowedNames[1] != "other" {
		t.Fatalf("allowed names from the flag: %+v, %v", fp.AllowedNames, err)
	}
	if _, err := parseFrontProxy(map[string]string{}, ""); !errors.Is(err, errNoFrontProxy) {
		t.Fatalf("no CA: %v", err)
	}
	data["requestheader-allowed-names"] = "front-proxy-client"
	if _, err := parseFrontProxy(data, ""); err == nil || errors.Is(err, errNoFrontProxy) {
		t.Fatalf("names that are not a JSON list: %v", err)
	}
}

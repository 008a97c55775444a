// Package testenv decides in one place what the fast tier leaves out. `make test-short` runs
// `go test -short`: unit tests, handler tests over httptest and the store tests on SQLite, with
// no kube-apiserver, browser, PostgreSQL or Node.js, and nothing that builds and runs a program.
// Every harness that needs one of those calls SkipShort (or, in a TestMain, ShortReason) before
// it looks for it. Without -short nothing here skips: `make test` and CI run everything, and
// under CI=true a missing dependency is still a failure.
package testenv

import "testing"

// SkipShort skips t under -short; needs says what the test needs that the fast tier has not.
func SkipShort(t testing.TB, needs string) {
	t.Helper()
	if testing.Short() {
		t.Skip(ShortReason(needs))
	}
}

// ShortReason is the skip message for a test that needs needs, for a TestMain that starts a
// control plane and keeps the reason for its tests. The caller must have parsed the flags
// (flag.Parse) before it asks testing.Short.
func ShortReason(needs string) string {
	return "-short: needs " + needs + "; make test runs it"
}

package controllers

import (
	"time"

	"latchkey.dev/latchkey/api/v1alpha1"
)

// What the tests on a cluster and the tests without one (Standalone, the resource checks)
// share; the latchkey_local build compiles only the latter.

const testPublicURL = "https://latchkey.test"

// testNow is the injected clock: condition transition times must come from it.
var testNow = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

// forProject and forConnector label a test Secret as its owner opts it in for a Project or for
// Connectors (v1alpha1.SecretUseLabel); Latchkey reads no other.
func forProject() map[string]string {
	return map[string]string{v1alpha1.SecretUseLabel: v1alpha1.SecretUseProject}
}

func forConnector() map[string]string {
	return map[string]string{v1alpha1.SecretUseLabel: v1alpha1.SecretUseConnector}
}

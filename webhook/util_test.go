package webhook_test

import (
	"testing"

	"latchkey.dev/latchkey/test/stack"
)

func mustJSON(t testing.TB, s string, v any) { t.Helper(); stack.MustJSON(t, s, v) }

func strs(v any) []string { return stack.Strings(v) }

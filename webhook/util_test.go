package webhook_test

import (
	"latchkey.dev/latchkey/test/stack"
)

func strs(v any) []string { return stack.Strings(v) }

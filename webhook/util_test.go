package webhook_test

import (
	"encoding/json"
	"testing"
)

func mustJSON(t testing.TB, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, s)
	}
}

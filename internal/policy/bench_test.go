package policy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"latchkey.dev/latchkey/internal/policy"
)

// BenchmarkDecide is one decision over a compiled set of a permit and 49 forbid policies that
// all miss: what an exchange pays for a 50-rule AccessPolicy, without the HTTP request around
// it (webhook/exchange BenchmarkExchangePolicy measures that).
func BenchmarkDecide(b *testing.B) {
	var text strings.Builder
	text.WriteString("permit(principal, action, resource);\n")
	for i := range 49 {
		fmt.Fprintf(&text, "@id(\"r%d\") forbid(principal, action == Action::\"exchange\", resource == Connector::\"svc-%d\") when { context.time.hour < 9 || principal.groups.contains(\"g%d\") };\n", i, i, i)
	}
	set := policy.Compile([]policy.Source{{Name: "ns/fifty", Text: text.String()}}, policy.Options{})
	e := policy.NewEngine(time.Now, logr.Discard(), 0, 0)
	req := exchangeRequest(set, time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if d := e.Decide(ctx, req); !d.Allow {
			b.Fatal(d)
		}
	}
}

package exchange_test

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/policy"
	"latchkey.dev/latchkey/test/stack"
)

// fiftyRules is a permit and 49 forbid policies of the shapes docs/policy.md shows (connector,
// agent, time, group and network conditions), none of which matches the benchmark's request,
// so every one is evaluated.
func fiftyRules() string {
	var b strings.Builder
	b.WriteString("permit(principal, action, resource);\n")
	for i := range 49 {
		switch i % 4 {
		case 0:
			fmt.Fprintf(&b, "@id(\"hours-%d\") forbid(principal, action == Action::\"exchange\", resource == Connector::\"svc-%d\") when { context.time.hour < 9 || context.time.hour >= 18 };\n", i, i)
		case 1:
			fmt.Fprintf(&b, "@id(\"agent-%d\") forbid(principal, action, resource == Connector::\"svc-%d\") unless { context.agent.declared };\n", i, i)
		case 2:
			fmt.Fprintf(&b, "@id(\"group-%d\") forbid(principal, action, resource) when { principal.groups.contains(\"group-%d\") };\n", i, i)
		default:
			fmt.Fprintf(&b, "@id(\"net-%d\") forbid(principal, action, resource == Connector::\"svc-%d\") when { context.network has address && context.network.address.isInRange(ip(\"10.%d.0.0/16\")) };\n", i, i, i)
		}
	}
	return b.String()
}

// BenchmarkExchangePolicy is one successful token exchange (the whole HTTP request: client
// authentication, subject token, connection read, audit record) without AccessPolicies and
// with a 50-rule policy set compiled once, as the compiler does per snapshot.
func BenchmarkExchangePolicy(b *testing.B) {
	for _, tc := range []struct {
		name string
		set  func() *policy.Set
	}{
		{"none", func() *policy.Set { return nil }},
		{"cedar-50", func() *policy.Set {
			return policy.Compile([]policy.Source{{Name: "latchkey-test/fifty", Text: fiftyRules()}}, policy.Options{})
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h := stack.New(b, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
			conn := h.ConnectDirectly(stack.AliceEmail, "2002", "alice-gh", "gho_alice")
			h.Allow(stack.AliceEmail, stack.Agent, conn)
			set := tc.set()
			if set != nil {
				if name, reason := set.Invalid(); name != "" {
					b.Fatal(reason)
				}
			}
			h.Project.AccessPolicy = set
			alice := h.AccessToken(stack.AliceEmail, stack.Agent)
			b.ReportAllocs()
			b.ResetTimer()
			start := cpuTime()
			for b.Loop() {
				if a := h.AgentExchange(alice); a.Status != 200 {
					b.Fatalf("%d %s", a.Status, a.Raw)
				}
			}
			// Wall time on a shared machine says little; the process's CPU time per request
			// (client and server are both in it) is what the policy adds.
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the process's user and system CPU time so far, in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

package register_test

import (
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook"
	"latchkey.dev/latchkey/webhook/register"
)

// behindProxy is a stack whose server trusts 127.0.0.1's X-Forwarded-For, as behind an ingress
// controller: each test request names the client address it plays.
func behindProxy(t *testing.T, trusted string) *stack.Stack {
	t.Helper()
	return stack.New(t, stack.Options{Server: func(o *webhook.Options) {
		o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix(trusted)}
	}})
}

// TestRegistrationLimitedPerAddress: one address registering clients as fast as it can is
// slowed down (429, Retry-After, an RFC 7591 error object); another address is not.
func TestRegistrationLimitedPerAddress(t *testing.T) {
	t.Parallel()
	s := behindProxy(t, "127.0.0.1/32")
	body := `{"redirect_uris":["http://127.0.0.1/cb"],"token_endpoint_auth_method":"none"}`
	reg := func(addr string) stack.Answer {
		req, _ := http.NewRequest(http.MethodPost, s.Issuer+"/register", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Forwarded-For", addr)
		return s.Send(req)
	}
	var last stack.Answer
	for i := 0; i <= register.AddressBurst; i++ {
		last = reg("198.51.100.66")
	}
	if last.Status != http.StatusTooManyRequests || last.Str("error") == "" || last.Str("error_description") == "" ||
		last.Header.Get("Retry-After") == "" || !strings.HasPrefix(last.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("registration %d from one address: %d %v %s", register.AddressBurst+1, last.Status, last.Header, last.Raw)
	}
	if r := reg("203.0.113.5"); r.Status != http.StatusCreated {
		t.Errorf("another address: %d %s", r.Status, r.Raw)
	}
	retry, _ := strconv.Atoi(last.Header.Get("Retry-After"))
	s.Clock.Advance(time.Duration(retry) * time.Second)
	if r := reg("198.51.100.66"); r.Status != http.StatusCreated {
		t.Errorf("after Retry-After: %d %s", r.Status, r.Raw)
	}
}

// TestRateLimitsCountIPv6ByPrefix plays an attacker who holds a whole IPv6 /64, as any host
// routinely does, and registers clients from a new address of it each time: the /64 has one
// budget. A neighbour in another /64 has its own, and IPv4 clients (also written IPv4-mapped)
// keep theirs.
func TestRateLimitsCountIPv6ByPrefix(t *testing.T) {
	t.Parallel()
	body := `{"redirect_uris":["http://127.0.0.1/cb"],"token_endpoint_auth_method":"none"}`
	reg := func(s *stack.Stack, addr string) stack.Answer {
		req, _ := http.NewRequest(http.MethodPost, s.Issuer+"/register", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Forwarded-For", addr)
		return s.Send(req)
	}
	for _, tc := range []struct {
		name string
		// attacker spends the budget from these addresses in turn; then other is asked.
		attacker  func(i int) string
		other     string
		otherGets int
	}{
		{"addresses of one /64 share a budget", func(i int) string { return fmt.Sprintf("2001:db8:1:2::%x", i+1) }, "2001:db8:1:2:ffff:ffff:ffff:ffff", http.StatusTooManyRequests},
		{"another /64 has its own", func(i int) string { return fmt.Sprintf("2001:db8:1:2::%x", i+1) }, "2001:db8:1:3::1", http.StatusCreated},
		{"an IPv4 address has its own", func(int) string { return "198.51.100.66" }, "198.51.100.67", http.StatusCreated},
		{"IPv4-mapped is the IPv4 address", func(int) string { return "198.51.100.66" }, "[::ffff:198.51.100.66]", http.StatusTooManyRequests},
		{"IPv4-mapped addresses do not share one /64", func(int) string { return "[::ffff:198.51.100.66]" }, "::ffff:203.0.113.5", http.StatusCreated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := behindProxy(t, "127.0.0.1/32")
			budget := register.AddressBurst
			var last stack.Answer
			for i := 0; i <= budget; i++ {
				last = reg(s, tc.attacker(i))
			}
			if last.Status != http.StatusTooManyRequests {
				t.Fatalf("registration %d from the attacker's addresses: %d %s", budget+1, last.Status, last.Raw)
			}
			if r := reg(s, tc.other); r.Status != tc.otherGets {
				t.Errorf("then %s: %d, want %d %s", tc.other, r.Status, tc.otherGets, r.Raw)
			}
		})
	}
}

package webhook_test

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/webhook"
	"latchkey.dev/latchkey/webhook/register"
	"latchkey.dev/latchkey/webhook/signin"
)

// newHarnessBehind is newHarness for a server that trusts the given proxies' X-Forwarded-For.
// Test requests come from 127.0.0.1, so trusting 127.0.0.1/32 plays a server behind an ingress
// controller, and trusting anything else plays a client that reaches the server directly.
func newHarnessBehind(t *testing.T, trusted ...string) *harness {
	t.Helper()
	var prefixes []netip.Prefix
	for _, s := range trusted {
		prefixes = append(prefixes, netip.MustParsePrefix(s))
	}
	return newHarnessServer(t, "sqlite:"+filepath.Join(t.TempDir(), "latchkey.db"), func(o *webhook.Options) {
		o.TrustedProxies = prefixes
	})
}

// from is a browser whose requests say, as a proxy in front would, that they come from addr.
func (h *harness) from(addr string) *browser {
	b := h.browser()
	b.c.Transport = forwardedFor{addr}
	return b
}

type forwardedFor struct{ addr string }

func (f forwardedFor) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Forwarded-For", f.addr)
	return http.DefaultTransport.RoundTrip(r)
}

func signedInOK(p page) bool {
	return p.status == http.StatusOK && p.continueURL() != "" && sessionCookieOrNil(p.header) != nil
}

// TestSignInLimitsDoNotLockPeopleOut plays mallory guessing at alice's password, and a company
// whose people all reach Latchkey through one ingress controller.
func TestSignInLimitsDoNotLockPeopleOut(t *testing.T) {
	t.Run("guessing from one address does not stop alice at hers", func(t *testing.T) {
		h := newHarnessBehind(t, "127.0.0.1/32")
		mallory := h.from("198.51.100.66")
		var last page
		for i := 0; i <= signin.AccountBurst; i++ {
			last = mallory.signIn("", "alice@example.com", "guess"+strconv.Itoa(i))
		}
		if last.status != http.StatusTooManyRequests {
			t.Fatalf("mallory was not slowed down: %d", last.status)
		}
		// And he keeps at it, spending every attempt as soon as it is allowed.
		h.clock.Advance(signin.AccountEvery)
		if p := mallory.signIn("", "alice@example.com", "again"); p.status != http.StatusOK {
			t.Fatalf("mallory's next allowed guess: %d", p.status)
		}
		if p := h.from("203.0.113.5").signIn("", "alice@example.com", alicePass); !signedInOK(p) {
			t.Fatalf("alice, at her own address, with her password: %d %s", p.status, p.body)
		}
	})

	t.Run("a person who mistypes is slowed down, then gets in", func(t *testing.T) {
		h := newHarnessBehind(t, "127.0.0.1/32")
		b := h.from("203.0.113.5")
		var last page
		for i := 0; i <= signin.AccountBurst; i++ {
			last = b.signIn("", "alice@example.com", "typo")
		}
		retry, _ := strconv.Atoi(last.header.Get("Retry-After"))
		if last.status != http.StatusTooManyRequests || retry < 1 || !strings.Contains(last.body, "Wait "+strconv.Itoa(retry)+" second") {
			t.Fatalf("over the limit: %d Retry-After %q %s", last.status, last.header.Get("Retry-After"), last.body)
		}
		if p := b.signIn("", "alice@example.com", alicePass); p.status != http.StatusTooManyRequests {
			t.Errorf("the right password before the wait: %d", p.status)
		}
		h.clock.Advance(time.Duration(retry) * time.Second)
		if p := b.signIn("", "alice@example.com", alicePass); !signedInOK(p) {
			t.Fatalf("the right password after Retry-After: %d %s", p.status, p.body)
		}
	})

	t.Run("many people behind one trusted proxy each sign in", func(t *testing.T) {
		h := newHarnessBehind(t, "127.0.0.1/32")
		// More people than one address's budget each mistype once, all through the proxy.
		for i := 0; i < signin.AddressBurst+10; i++ {
			p := h.from(fmt.Sprintf("203.0.113.%d", i+1)).signIn("", fmt.Sprintf("person%d@example.com", i), "typo")
			if p.status != http.StatusOK || !strings.Contains(p.body, "do not match") {
				t.Fatalf("person %d behind the proxy: %d", i, p.status)
			}
		}
		if p := h.from("192.0.2.200").signIn("", "bob@example.com", bobPass); !signedInOK(p) {
			t.Fatalf("bob behind the same proxy: %d %s", p.status, p.body)
		}
	})

	t.Run("an untrusted peer cannot name itself another address", func(t *testing.T) {
		h := newHarnessBehind(t, "10.0.0.0/8") // the test's 127.0.0.1 is not a trusted proxy
		var last page
		for i := 0; i <= signin.AccountBurst; i++ {
			last = h.from(fmt.Sprintf("198.51.100.%d", i+1)).signIn("", "bob@example.com", "guess")
		}
		if last.status != http.StatusTooManyRequests {
			t.Errorf("per account and address: a new X-Forwarded-For per guess escaped the limit: %d", last.status)
		}
		for i := 0; i <= signin.AddressBurst; i++ {
			last = h.from(fmt.Sprintf("198.51.100.%d", i+1)).signIn("", fmt.Sprintf("p%d@example.com", i), "guess")
		}
		if last.status != http.StatusTooManyRequests {
			t.Errorf("per address: a new X-Forwarded-For per guess escaped the limit: %d", last.status)
		}
	})
}

// TestRegistrationLimitedPerAddress: one address registering clients as fast as it can is
// slowed down (429, Retry-After, an RFC 7591 error object); another address is not.
func TestRegistrationLimitedPerAddress(t *testing.T) {
	h := newHarnessBehind(t, "127.0.0.1/32")
	body := `{"redirect_uris":["http://127.0.0.1/cb"],"token_endpoint_auth_method":"none"}`
	reg := func(addr string) tokenResult {
		req, _ := http.NewRequest(http.MethodPost, h.base+"/register", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Forwarded-For", addr)
		return h.send(req)
	}
	var last tokenResult
	for i := 0; i <= register.AddressBurst; i++ {
		last = reg("198.51.100.66")
	}
	if last.status != http.StatusTooManyRequests || last.str("error") == "" || last.str("error_description") == "" ||
		last.header.Get("Retry-After") == "" || !strings.HasPrefix(last.header.Get("Content-Type"), "application/json") {
		t.Fatalf("registration %d from one address: %d %v %s", register.AddressBurst+1, last.status, last.header, last.raw)
	}
	if r := reg("203.0.113.5"); r.status != http.StatusCreated {
		t.Errorf("another address: %d %s", r.status, r.raw)
	}
	retry, _ := strconv.Atoi(last.header.Get("Retry-After"))
	h.clock.Advance(time.Duration(retry) * time.Second)
	if r := reg("198.51.100.66"); r.status != http.StatusCreated {
		t.Errorf("after Retry-After: %d %s", r.status, r.raw)
	}
}

// TestRateLimitsCountIPv6ByPrefix plays an attacker who holds a whole IPv6 /64, as any host
// routinely does, and registers clients from a new address of it each time: the /64 has one
// budget. A neighbour in another /64 has its own, and IPv4 clients (also written IPv4-mapped)
// keep theirs.
func TestRateLimitsCountIPv6ByPrefix(t *testing.T) {
	body := `{"redirect_uris":["http://127.0.0.1/cb"],"token_endpoint_auth_method":"none"}`
	reg := func(h *harness, addr string) tokenResult {
		req, _ := http.NewRequest(http.MethodPost, h.base+"/register", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Forwarded-For", addr)
		return h.send(req)
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
			h := newHarnessBehind(t, "127.0.0.1/32")
			budget := register.AddressBurst
			var last tokenResult
			for i := 0; i <= budget; i++ {
				last = reg(h, tc.attacker(i))
			}
			if last.status != http.StatusTooManyRequests {
				t.Fatalf("registration %d from the attacker's addresses: %d %s", budget+1, last.status, last.raw)
			}
			if r := reg(h, tc.other); r.status != tc.otherGets {
				t.Errorf("then %s: %d, want %d %s", tc.other, r.status, tc.otherGets, r.raw)
			}
		})
	}
}

// TestBackchannelLogoutLimitedPerAddress plays someone who can reach the back-channel logout
// endpoint but holds no token of the provider's, and posts made-up ones (each may cost a
// signature check, or a fetch of the provider's keys): past the address's budget the answer is
// an OAuth 429 with Retry-After. The provider, at its own address, keeps ending sessions, and
// tokens that verify never spend the budget, so a provider ending many at once is not slowed.
func TestBackchannelLogoutLimitedPerAddress(t *testing.T) {
	h := newHarnessBehind(t, "127.0.0.1/32")
	idp := newFakeIDP(t, h.clock.Now)
	h.update(func(p *config.Project) {
		p.SignIn.OIDC = &config.OIDCProvider{Issuer: idp.srv.URL, ClientID: "latchkey", ClientSecret: "idp-secret", Label: "Corp SSO"}
	})
	logout := func(addr, token string) tokenResult {
		req, _ := http.NewRequest(http.MethodPost, h.base+"/sign-in/backchannel-logout",
			strings.NewReader(url.Values{"logout_token": {token}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Forwarded-For", addr)
		return h.send(req)
	}
	const attacker, provider = "198.51.100.66", "203.0.113.5"
	var last tokenResult
	for i := 0; i <= signin.LogoutBurst; i++ {
		last = logout(attacker, "not-a-jwt")
	}
	retry, _ := strconv.Atoi(last.header.Get("Retry-After"))
	if last.status != http.StatusTooManyRequests || retry < 1 || last.str("error") != "temporarily_unavailable" ||
		last.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("made-up logout token %d from one address: %d %v %s", signin.LogoutBurst+1, last.status, last.header, last.raw)
	}
	for i := 0; i <= signin.LogoutBurst+5; i++ {
		r := logout(provider, idp.sign(idp.key, "idp", "logout+jwt", idp.logoutClaims(fmt.Sprintf("person-%d", i))))
		if r.status != http.StatusOK {
			t.Fatalf("the provider's logout %d: %d %s", i, r.status, r.raw)
		}
	}
	h.clock.Advance(time.Duration(retry) * time.Second)
	if r := logout(attacker, idp.sign(idp.key, "idp", "logout+jwt", idp.logoutClaims("someone"))); r.status != http.StatusOK {
		t.Errorf("after Retry-After: %d %s", r.status, r.raw)
	}
}

package signin_test

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook"
	"latchkey.dev/latchkey/webhook/signin"
)

// behindProxy is a stack whose server trusts the given proxies' X-Forwarded-For. Test requests
// come from 127.0.0.1, so trusting 127.0.0.1/32 plays a server behind an ingress controller,
// and trusting anything else plays a client that reaches the server directly.
func behindProxy(t *testing.T, trusted ...string) *stack.Stack {
	t.Helper()
	var prefixes []netip.Prefix
	for _, p := range trusted {
		prefixes = append(prefixes, netip.MustParsePrefix(p))
	}
	return stack.New(t, stack.Options{Server: func(o *webhook.Options) { o.TrustedProxies = prefixes }})
}

// forwardedFrom is a browser whose requests say, as a proxy in front would, that they come from addr.
func forwardedFrom(s *stack.Stack, addr string) *stack.Browser {
	b := s.Browser()
	b.C.Transport = forwardedFor{addr}
	return b
}

type forwardedFor struct{ addr string }

func (f forwardedFor) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Forwarded-For", f.addr)
	return http.DefaultTransport.RoundTrip(r)
}

// TestSignInLimitsDoNotLockPeopleOut plays mallory guessing at alice's password, and a company
// whose people all reach Latchkey through one ingress controller.
func TestSignInLimitsDoNotLockPeopleOut(t *testing.T) {
	t.Parallel()
	t.Run("guessing from one address does not stop alice at hers", func(t *testing.T) {
		t.Parallel()
		s := behindProxy(t, "127.0.0.1/32")
		mallory := forwardedFrom(s, "198.51.100.66")
		var last stack.Page
		for i := 0; i <= signin.AccountBurst; i++ {
			last = mallory.SignInPage("", stack.AliceEmail, "guess"+strconv.Itoa(i))
		}
		if last.Status != http.StatusTooManyRequests {
			t.Fatalf("mallory was not slowed down: %d", last.Status)
		}
		// And he keeps at it, spending every attempt as soon as it is allowed.
		s.Clock.Advance(signin.AccountEvery)
		if p := mallory.SignInPage("", stack.AliceEmail, "again"); p.Status != http.StatusOK {
			t.Fatalf("mallory's next allowed guess: %d", p.Status)
		}
		if p := forwardedFrom(s, "203.0.113.5").SignInPage("", stack.AliceEmail, stack.AlicePassword); !stack.SignedIn(p) {
			t.Fatalf("alice, at her own address, with her password: %d %s", p.Status, p.Text())
		}
	})

	t.Run("a person who mistypes is slowed down, then gets in", func(t *testing.T) {
		t.Parallel()
		s := behindProxy(t, "127.0.0.1/32")
		b := forwardedFrom(s, "203.0.113.5")
		var last stack.Page
		for i := 0; i <= signin.AccountBurst; i++ {
			last = b.SignInPage("", stack.AliceEmail, "typo")
		}
		retry, _ := strconv.Atoi(last.Header.Get("Retry-After"))
		if last.Status != http.StatusTooManyRequests || retry < 1 || !strings.Contains(last.Text(), "Wait "+strconv.Itoa(retry)+" second") {
			t.Fatalf("over the limit: %d Retry-After %q %s", last.Status, last.Header.Get("Retry-After"), last.Text())
		}
		if p := b.SignInPage("", stack.AliceEmail, stack.AlicePassword); p.Status != http.StatusTooManyRequests {
			t.Errorf("the right password before the wait: %d", p.Status)
		}
		s.Clock.Advance(time.Duration(retry) * time.Second)
		if p := b.SignInPage("", stack.AliceEmail, stack.AlicePassword); !stack.SignedIn(p) {
			t.Fatalf("the right password after Retry-After: %d %s", p.Status, p.Text())
		}
	})

	t.Run("many people behind one trusted proxy each sign in", func(t *testing.T) {
		t.Parallel()
		s := behindProxy(t, "127.0.0.1/32")
		// More people than one address's budget each mistype once, all through the proxy.
		for i := 0; i < signin.AddressBurst+10; i++ {
			p := forwardedFrom(s, fmt.Sprintf("203.0.113.%d", i+1)).SignInPage("", fmt.Sprintf("person%d@example.com", i), "typo")
			if p.Status != http.StatusOK || !strings.Contains(p.Text(), "do not match") {
				t.Fatalf("person %d behind the proxy: %d", i, p.Status)
			}
		}
		if p := forwardedFrom(s, "192.0.2.200").SignInPage("", stack.BobEmail, stack.BobPassword); !stack.SignedIn(p) {
			t.Fatalf("bob behind the same proxy: %d %s", p.Status, p.Text())
		}
	})

	t.Run("an untrusted peer cannot name itself another address", func(t *testing.T) {
		t.Parallel()
		s := behindProxy(t, "10.0.0.0/8") // the test's 127.0.0.1 is not a trusted proxy
		var last stack.Page
		for i := 0; i <= signin.AccountBurst; i++ {
			last = forwardedFrom(s, fmt.Sprintf("198.51.100.%d", i+1)).SignInPage("", stack.BobEmail, "guess")
		}
		if last.Status != http.StatusTooManyRequests {
			t.Errorf("per account and address: a new X-Forwarded-For per guess escaped the limit: %d", last.Status)
		}
		for i := 0; i <= signin.AddressBurst; i++ {
			last = forwardedFrom(s, fmt.Sprintf("198.51.100.%d", i+1)).SignInPage("", fmt.Sprintf("p%d@example.com", i), "guess")
		}
		if last.Status != http.StatusTooManyRequests {
			t.Errorf("per address: a new X-Forwarded-For per guess escaped the limit: %d", last.Status)
		}
	})
}

// TestBackchannelLogoutLimitedPerAddress plays someone who can reach the back-channel logout
// endpoint but holds no token of the provider's, and posts made-up ones (each may cost a
// signature check, or a fetch of the provider's keys): past the address's budget the answer is
// an OAuth 429 with Retry-After. The provider, at its own address, keeps ending sessions, and
// tokens that verify never spend the budget, so a provider ending many at once is not slowed.
func TestBackchannelLogoutLimitedPerAddress(t *testing.T) {
	t.Parallel()
	s := behindProxy(t, "127.0.0.1/32")
	idp := s.UseIDP(0)
	logout := func(addr, token string) stack.Answer {
		req, _ := http.NewRequest(http.MethodPost, s.Issuer+"/sign-in/backchannel-logout",
			strings.NewReader(url.Values{"logout_token": {token}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Forwarded-For", addr)
		return s.Send(req)
	}
	const attacker, provider = "198.51.100.66", "203.0.113.5"
	var last stack.Answer
	for i := 0; i <= signin.LogoutBurst; i++ {
		last = logout(attacker, "not-a-jwt")
	}
	retry, _ := strconv.Atoi(last.Header.Get("Retry-After"))
	if last.Status != http.StatusTooManyRequests || retry < 1 || last.Str("error") != "temporarily_unavailable" ||
		last.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("made-up logout token %d from one address: %d %v %s", signin.LogoutBurst+1, last.Status, last.Header, last.Raw)
	}
	for i := 0; i <= signin.LogoutBurst+5; i++ {
		r := logout(provider, idp.Sign(idp.Key, "idp", "logout+jwt", idp.LogoutClaims(fmt.Sprintf("person-%d", i))))
		if r.Status != http.StatusOK {
			t.Fatalf("the provider's logout %d: %d %s", i, r.Status, r.Raw)
		}
	}
	s.Clock.Advance(time.Duration(retry) * time.Second)
	if r := logout(attacker, idp.Sign(idp.Key, "idp", "logout+jwt", idp.LogoutClaims("someone"))); r.Status != http.StatusOK {
		t.Errorf("after Retry-After: %d %s", r.Status, r.Raw)
	}
}

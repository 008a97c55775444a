package consent_test

import (
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/policy"
	"latchkey.dev/latchkey/test/stack"
)

func accessPolicy(t *testing.T, text string) *policy.Set {
	t.Helper()
	set := policy.Compile([]policy.Source{{Name: "latchkey-stack/agents", Text: text}}, policy.Options{})
	if name, reason := set.Invalid(); name != "" {
		t.Fatal(reason)
	}
	return set
}

// authorize runs alice's browser through the authorization request and, when the consent page
// appears, presses Allow; it returns the redirect back to the agent.
func authorize(t *testing.T, s *stack.Stack, b *stack.Browser) (*url.URL, string) {
	t.Helper()
	pkce := stack.NewPKCE()
	q := url.Values{"response_type": {"code"}, "client_id": {stack.Agent}, "redirect_uri": {stack.AgentRedir},
		"code_challenge": {pkce.Challenge}, "code_challenge_method": {"S256"}, "state": {"st"}, "scope": {"openid"}}
	page, err := b.Get(s.Issuer + "/authorize?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if action, fields, ok := page.Form("Allow"); ok {
		fields.Set("decision", "allow")
		if page, err = b.Post(action, fields); err != nil {
			t.Fatal(err)
		}
	}
	if page.Status < 300 || page.Status > 399 {
		t.Fatalf("authorize: %d %s", page.Status, page.Body)
	}
	u, err := url.Parse(page.Location())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(u.String(), stack.AgentRedir) {
		t.Fatalf("redirected to %s, not the agent's verified redirect URI", u)
	}
	return u, pkce.Verifier
}

// A Project's AccessPolicy that forbids consent to an agent refuses before the consent page:
// alice is never asked to approve what would be refused, and the agent learns which policy
// said no. Another agent's rule leaves this one alone.
func TestAccessPolicyRefusesConsent(t *testing.T) {
	s := stack.New(t, stack.Options{DSN: "sqlite:" + filepath.Join(t.TempDir(), "latchkey.db")})
	b := s.Browser()
	if err := b.SignIn(stack.AliceEmail, stack.AlicePassword); err != nil {
		t.Fatal(err)
	}
	s.Project.AccessPolicy = accessPolicy(t, `@id("not-that-agent") forbid(principal, action == Action::"consent", resource) when { context.agent == Agent::"someone-else" };`)
	if u, _ := authorize(t, s, b); u.Query().Get("code") == "" {
		t.Fatalf("a rule about another agent refused: %s", u)
	}

	s.Project.AccessPolicy = accessPolicy(t, `@id("no-repo-helper") forbid(principal, action == Action::"consent", resource) when { context.agent.name == "`+stack.AgentName+`" };`)
	u, _ := authorize(t, s, b)
	if u.Query().Get("error") != "access_denied" || !strings.Contains(u.Query().Get("error_description"), "latchkey-stack/agents/no-repo-helper") ||
		u.Query().Get("code") != "" || u.Query().Get("state") != "st" {
		t.Fatalf("refusal: %s", u)
	}
}

// A forbid on Action::"issue" refuses the redemption of a code the person approved before it:
// nothing is issued while it is in force.
func TestAccessPolicyRefusesIssue(t *testing.T) {
	s := stack.New(t, stack.Options{DSN: "sqlite:" + filepath.Join(t.TempDir(), "latchkey.db")})
	b := s.Browser()
	if err := b.SignIn(stack.AliceEmail, stack.AlicePassword); err != nil {
		t.Fatal(err)
	}
	u, verifier := authorize(t, s, b)
	code := u.Query().Get("code")
	if code == "" {
		t.Fatalf("no code: %s", u)
	}
	s.Project.AccessPolicy = accessPolicy(t, `@id("no-tokens") forbid(principal, action == Action::"issue", resource);`)
	a := s.MustPost("/token", url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {stack.AgentRedir}, "code_verifier": {verifier}}, stack.Agent, stack.AgentSecret)
	if a.Status != 403 || a.Str("error") != "access_denied" || !strings.Contains(a.Str("error_description"), "latchkey-stack/agents/no-tokens") || a.Str("access_token") != "" {
		t.Fatalf("token: %d %v", a.Status, a.Body)
	}
}

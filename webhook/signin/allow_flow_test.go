package signin_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
)

// TestSignInAllowedDomainsAndGroups plays people whom the company's provider signs in but whom
// the project does not admit (decision 0063): someone from another domain, someone who typed a
// colleague's domain into an unverified address, look-alike domains, someone outside the
// allowed groups, a provider that sends no groups. Each is refused with a page, an audit record
// and no session; the admitted person signs in.
func TestSignInAllowedDomainsAndGroups(t *testing.T) {
	t.Parallel()
	type claims = map[string]any
	domain := func(p *config.OIDCProvider) { p.AllowedEmailDomains = []string{"example.com"} }
	group := func(p *config.OIDCProvider) { p.AllowedGroups = []string{"latchkey-users"}; p.GroupsClaim = "groups" }
	both := func(p *config.OIDCProvider) { domain(p); group(p) }
	for _, tc := range []struct {
		name   string
		rule   func(*config.OIDCProvider)
		claims claims
		reason string // empty: admitted
	}{
		{"another domain", domain, claims{"email": "mallory@other.test", "email_verified": true}, "domain_not_allowed"},
		{"unverified email in the domain", domain, claims{"email": "mallory@example.com", "email_verified": false}, "domain_not_allowed"},
		{"email_verified missing", domain, claims{"email": "mallory@example.com"}, "domain_not_allowed"},
		{"domain as a prefix", domain, claims{"email": "mallory@example.com.evil.test", "email_verified": true}, "domain_not_allowed"},
		{"domain as a suffix", domain, claims{"email": "mallory@evilexample.com", "email_verified": true}, "domain_not_allowed"},
		{"subdomain", domain, claims{"email": "mallory@eu.example.com", "email_verified": true}, "domain_not_allowed"},
		{"second @", domain, claims{"email": "mallory@example.com@evil.test", "email_verified": true}, "domain_not_allowed"},
		{"no email", domain, claims{"email": "", "email_verified": true}, "domain_not_allowed"},
		{"not in the group", group, claims{"groups": []string{"everyone", "latchkey-users-old"}}, "group_not_allowed"},
		{"groups claim missing", group, claims{}, "group_not_allowed"},
		{"groups claim not a list", group, claims{"groups": map[string]any{"latchkey-users": true}}, "group_not_allowed"},
		{"right group, wrong domain", both, claims{"email": "mallory@other.test", "email_verified": true, "groups": []string{"latchkey-users"}}, "domain_not_allowed"},
		{"right domain, no group", both, claims{"email": "carol@example.com", "email_verified": true, "groups": []string{"everyone"}}, "group_not_allowed"},
		{"admitted by domain", domain, claims{"email": "carol@Example.COM", "email_verified": true}, ""},
		{"admitted by domain, verified as a string", domain, claims{"email": "carol@example.com", "email_verified": "true"}, ""},
		{"admitted by group", group, claims{"groups": []string{"everyone", "latchkey-users"}}, ""},
		{"admitted by a single-string group", group, claims{"groups": "latchkey-users"}, ""},
		{"admitted by both", both, claims{"email": "carol@example.com", "email_verified": true, "groups": []string{"latchkey-users"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := stack.New(t, stack.Options{})
			idp := s.UseIDP(0)
			s.Update(func(p *config.Project) { tc.rule(p.SignIn.OIDC) })
			idp.Lock()
			idp.Users["carol-123"].Claims = tc.claims
			idp.Unlock()
			b := s.Browser()
			p := b.MustGet(s.Issuer + "/sign-in/oidc?return_to=%2Fteam%2Fdemo%2Faccount")
			for range 5 {
				if p.Status != http.StatusFound && p.Status != http.StatusSeeOther {
					break
				}
				p = b.MustGet(p.Location())
			}
			acct := b.MustGet(s.Issuer + "/account")
			_, signOut := acct.Link("Sign out")
			signedIn := acct.Status == http.StatusOK && signOut
			failed := s.AuditOf(events.SignInFailed)
			if tc.reason == "" {
				if !signedIn || len(failed) != 0 {
					t.Fatalf("admitted person not signed in: %d %s; failures %+v", acct.Status, acct.Text(), failed)
				}
				return
			}
			if signedIn {
				t.Fatalf("refused person is signed in")
			}
			if p.Status != http.StatusForbidden || !strings.Contains(p.Text(), "You may not sign in to this project") {
				t.Errorf("refusal page: %d %s", p.Status, p.Text())
			}
			if len(failed) != 1 || failed[0].Reason != tc.reason || failed[0].Outcome != store.OutcomeRefused || failed[0].Details["method"] != "oidc" {
				t.Errorf("audit: %+v, want one %s", failed, tc.reason)
			}
			if n := len(s.AuditOf(events.SignInSucceeded)); n != 0 {
				t.Errorf("%d sign-ins recorded", n)
			}
		})
	}
}

// TestRecheckAppliesAllowedDomainsAndGroups: with recheckInterval set, the provider's refreshed
// ID token is held to the same rule as a sign-in. Alice is moved out of the allowed group and
// Bob's address moves to another domain: past the interval their agents' refreshes are refused
// and all their access ends. Carol's refreshed token leaves the claims out, which says nothing
// about her: her agent goes on.
func TestRecheckAppliesAllowedDomainsAndGroups(t *testing.T) {
	const n = 10 * time.Minute
	t.Parallel()
	s := stack.New(t, stack.Options{})
	idp := s.UseIDP(n)
	s.Update(func(p *config.Project) {
		p.SignIn.OIDC.AllowedEmailDomains = []string{"corp.example"}
		p.SignIn.OIDC.AllowedGroups = []string{"staff"}
		p.SignIn.OIDC.GroupsClaim = "groups"
	})
	idp.Lock()
	for _, sub := range []string{"alice-1", "bob-2", "carol-123"} {
		idp.Users[sub].Claims = map[string]any{"email_verified": true, "groups": []string{"staff"}}
	}
	idp.RefreshIDToken = true
	idp.Unlock()
	alice := s.SignInWith(idp, "alice-1", "alice@corp.example")
	aliceAgent := s.AgentFor(alice)
	bob := s.SignInWith(idp, "bob-2", "bob@corp.example")
	bobAgent := s.AgentFor(bob)
	carol := s.SignInWith(idp, "carol-123", "carol@corp.example")
	carolAgent := s.AgentFor(carol)

	idp.Lock()
	idp.Users["alice-1"].Claims = map[string]any{"email_verified": true, "groups": []string{"contractors"}}
	idp.Users["bob-2"].Claims = map[string]any{"email": "bob@corp.example.evil.test", "email_verified": true, "groups": []string{"staff"}}
	idp.Users["carol-123"].Claims = map[string]any{"email": nil, "groups": nil}
	idp.Unlock()
	// Inside the interval nothing is asked, so nothing changes.
	s.Clock.Advance(n - time.Minute)
	aliceAgent = s.ExpectStillIn("alice", alice, aliceAgent)

	s.Clock.Advance(2 * time.Minute)
	for _, who := range []struct {
		name  string
		b     *stack.Browser
		agent stack.Answer
	}{{"alice", alice, aliceAgent}, {"bob", bob, bobAgent}} {
		r := s.RefreshAs(stack.Web, stack.WebSecret, who.agent.Str("refresh_token"))
		if r.Status != http.StatusBadRequest || r.Str("error") != "invalid_grant" {
			t.Fatalf("%s's agent after leaving: %d %s", who.name, r.Status, r.Raw)
		}
		s.ExpectSignedOut(who.name, who.b, who.agent)
	}
	reasons := map[string]bool{}
	for _, r := range s.AuditOf(events.RecheckFailed) {
		reasons[r.Details["reason"]] = true
	}
	if len(reasons) != 2 || !reasons["group_not_allowed"] || !reasons["domain_not_allowed"] {
		t.Errorf("re-check reasons: %v", reasons)
	}
	s.ExpectStillIn("carol", carol, carolAgent)
}

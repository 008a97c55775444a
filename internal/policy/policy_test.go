package policy_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"latchkey.dev/latchkey/internal/policy"
	"latchkey.dev/latchkey/internal/testclock"
)

// workingHours forbids the registered agents github outside 09:00–17:59 on weekdays, and lets
// everything else through.
const workingHours = `
permit(principal, action, resource);

@id("github-working-hours")
forbid(principal, action == Action::"exchange", resource == Connector::"github")
when { context.time.hour < 9 || context.time.hour >= 18 ||
       context.time.weekday == "saturday" || context.time.weekday == "sunday" };
`

func exchangeRequest(set *policy.Set, now time.Time) policy.Request {
	return policy.Request{
		Policies: set,
		Action:   policy.ActionExchange,
		Person:   policy.Person{Subject: "alice", Email: "alice@example.com", Groups: []string{"engineering"}},
		Agent:    policy.Agent{ClientID: "repo-helper", Name: "Repo Helper"},
		Resource: policy.Resource{Kind: policy.KindConnector, ID: "github"},
		Address:  netip.MustParseAddr("192.0.2.10"),
		Time:     now,
	}
}

func compile(t *testing.T, opts policy.Options, texts ...string) *policy.Set {
	t.Helper()
	var srcs []policy.Source
	for i, text := range texts {
		srcs = append(srcs, policy.Source{Name: "team-a/policy-" + string(rune('a'+i)), Text: text})
	}
	set := policy.Compile(srcs, opts)
	if name, reason := set.Invalid(); name != "" {
		t.Fatalf("policy does not compile: %s", reason)
	}
	return set
}

// A policy denying an agent a connector outside working hours refuses the exchange and says
// which policy did; within working hours, and for another connector, it allows. The hours are
// the Project's time zone's.
func TestWorkingHoursInProjectTimeZone(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	set := compile(t, policy.Options{Location: berlin}, workingHours)
	// Wednesday 07:30 UTC is 08:30 in Berlin: before working hours there.
	clock := testclock.New(time.Date(2026, 12, 2, 7, 30, 0, 0, time.UTC))
	e := policy.NewEngine(clock.Now, logr.Discard(), 0, 0)

	d := e.Decide(context.Background(), exchangeRequest(set, clock.Now()))
	if d.Allow || d.Policy != "team-a/policy-a/github-working-hours" || !strings.Contains(d.Reason, "github-working-hours") {
		t.Fatalf("08:30 Berlin: %+v, want a denial naming team-a/policy-a/github-working-hours", d)
	}
	clock.Advance(time.Hour) // 09:30 Berlin
	if d := e.Decide(context.Background(), exchangeRequest(set, clock.Now())); !d.Allow {
		t.Fatalf("09:30 Berlin: %+v, want allow", d)
	}
	other := exchangeRequest(set, clock.Now().Add(-time.Hour))
	other.Resource.ID = "linear"
	if d := e.Decide(context.Background(), other); !d.Allow {
		t.Fatalf("linear at 08:30: %+v, want allow (the policy names github only)", d)
	}
	clock.Advance(3 * 24 * time.Hour) // Saturday 09:30
	if d := e.Decide(context.Background(), exchangeRequest(set, clock.Now())); d.Allow {
		t.Fatal("Saturday: allowed, want the working-hours denial")
	}
}

func TestModel(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		policy string
		change func(*policy.Request)
		deny   string // the policy a denial names; "" allows
	}{
		{name: "no permit policy: forbids alone decide", policy: `@id("x") forbid(principal, action, resource) when { false };`},
		{
			name:   "a forbid that cannot be evaluated denies",
			policy: `permit(principal, action, resource);` + "\n" + `@id("no-registered") forbid(principal, action, resource) when { context.agent_is_registered };`,
			deny:   "team-a/policy-a/no-registered",
		},
		{
			name:   "only declared agents: a declared one passes",
			policy: `permit(principal, action, resource); @id("declared-agents-only") forbid(principal, action, resource) unless { context.agent.declared };`,
		},
		{
			name: "only declared agents: a self-registered one is refused",
			policy: `permit(principal, action, resource);
@id("declared-agents-only") forbid(principal, action, resource) unless { context.agent.declared };`,
			change: func(r *policy.Request) { r.Agent.Registered = true },
			deny:   "team-a/policy-a/declared-agents-only",
		},
		{
			name: "deny a connector to a group",
			policy: `permit(principal, action, resource);
@id("no-github-for-contractors") forbid(principal, action, resource == Connector::"github") when { principal.groups.contains("contractors") };`,
			change: func(r *policy.Request) { r.Person.Groups = []string{"contractors"} },
			deny:   "team-a/policy-a/no-github-for-contractors",
		},
		{
			name: "the group rule leaves other groups alone",
			policy: `permit(principal, action, resource);
@id("no-github-for-contractors") forbid(principal, action, resource == Connector::"github") when { principal.groups.contains("contractors") };`,
		},
		{
			name:   "network",
			policy: `permit(principal, action, resource) when { context.network.address.isInRange(ip("10.0.0.0/8")) };`,
			deny:   policy.NoPermitID,
		},
		{
			name:   "authorization details",
			policy: `permit(principal, action, resource); @id("no-payments") forbid(principal, action, resource) when { context has authorization_details && context.authorization_details.contains({"type": "payment_initiation"}) };`,
			change: func(r *policy.Request) {
				r.AuthorizationDetails = []byte(`[{"type":"payment_initiation"}]`)
			},
			deny: "team-a/policy-a/no-payments",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := compile(t, policy.Options{}, tc.policy)
			req := exchangeRequest(set, now)
			if tc.change != nil {
				tc.change(&req)
			}
			d := policy.NewEngine(time.Now, logr.Discard(), 0, 0).Decide(context.Background(), req)
			if tc.deny == "" && !d.Allow {
				t.Fatalf("denied: %+v", d)
			}
			if tc.deny != "" && (d.Allow || d.Policy != tc.deny) {
				t.Fatalf("got %+v, want a denial by %s", d, tc.deny)
			}
		})
	}
}

// A policy that does not parse is never compiled in: the Project's Set denies every request,
// naming the AccessPolicy, and Parse says where the text is wrong.
func TestInvalidPolicyFailsClosed(t *testing.T) {
	bad := policy.Source{Name: "team-a/typo", Text: "permit(principal, action resource);"}
	if _, err := policy.Parse(bad); err == nil || !strings.Contains(err.Error(), "team-a/typo:1:") {
		t.Fatalf("Parse: %v, want an error at team-a/typo:1:…", err)
	}
	set := policy.Compile([]policy.Source{{Name: "team-a/good", Text: "permit(principal, action, resource);"}, bad}, policy.Options{})
	d := policy.NewEngine(time.Now, logr.Discard(), 0, 0).Decide(context.Background(), exchangeRequest(set, time.Now()))
	if d.Allow || d.Policy != "team-a/typo" {
		t.Fatalf("got %+v, want a denial naming team-a/typo", d)
	}
	dup := policy.Source{Name: "team-a/dup", Text: `@id("a") permit(principal, action, resource); @id("a") forbid(principal, action, resource);`}
	if _, err := policy.Parse(dup); err == nil || !strings.Contains(err.Error(), `@id("a") is used twice`) {
		t.Fatalf("duplicate @id: %v", err)
	}
}

// An AccessPolicy from another namespace the Project admits may only narrow: its permits are
// ignored, so it cannot let through what the Project's own policies do not.
func TestForeignPermitsIgnored(t *testing.T) {
	home := policy.Source{Name: "team-a/home", Text: `permit(principal, action, resource) when { principal.groups.contains("admins") };`}
	foreign := policy.Source{Name: "team-b/wide", Text: `@id("everyone") permit(principal, action, resource);`, NarrowOnly: true}
	parsed, err := policy.Parse(foreign)
	if err != nil || len(parsed.IgnoredPermits) != 1 || parsed.IgnoredPermits[0] != "everyone" {
		t.Fatalf("Parse: %+v, %v; want permit everyone ignored", parsed, err)
	}
	set := policy.Compile([]policy.Source{home, foreign}, policy.Options{})
	d := policy.NewEngine(time.Now, logr.Discard(), 0, 0).Decide(context.Background(), exchangeRequest(set, time.Now()))
	if d.Allow {
		t.Fatal("a foreign permit widened the Project's policies")
	}
	narrowing := policy.Source{Name: "team-b/narrow", Text: `@id("no-github") forbid(principal, action, resource == Connector::"github");`, NarrowOnly: true}
	set = policy.Compile([]policy.Source{narrowing}, policy.Options{})
	if d := policy.NewEngine(time.Now, logr.Discard(), 0, 0).Decide(context.Background(), exchangeRequest(set, time.Now())); d.Allow || d.Policy != "team-b/narrow/no-github" {
		t.Fatalf("foreign forbid: %+v, want a denial by team-b/narrow/no-github", d)
	}
}

func TestNoSetAllows(t *testing.T) {
	if policy.Compile(nil, policy.Options{}) != nil {
		t.Fatal("a Project without AccessPolicies or decision point has a Set")
	}
	if d := policy.Decide(context.Background(), nil, exchangeRequest(nil, time.Now())); !d.Allow {
		t.Fatal("no Decider denied")
	}
}

// Every Cedar example in docs/policy.md compiles, so the page never shows a policy that would
// make a Project refuse everything.
func TestDocExamplesParse(t *testing.T) {
	b, err := os.ReadFile("../../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(string(b), "```cedar\n")
	if len(parts) < 4 {
		t.Fatalf("found %d Cedar examples, want at least 3", len(parts)-1)
	}
	for i, part := range parts[1:] {
		text, _, _ := strings.Cut(part, "```")
		if _, err := policy.Parse(policy.Source{Name: fmt.Sprintf("docs/example-%d", i), Text: text}); err != nil {
			t.Errorf("example %d: %v", i, err)
		}
	}
}

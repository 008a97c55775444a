package exchange_test

import (
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/policy"
	"latchkey.dev/latchkey/test/stack"
)

// workingHours lets everything through but the agent's exchanges for GitHub outside
// 09:00–17:59 on weekdays, in the Project's time zone (UTC here).
const workingHours = `
permit(principal, action, resource);

@id("github-in-working-hours")
forbid(principal, action == Action::"exchange", resource == Connector::"github")
when { context.time.hour < 9 || context.time.hour >= 18 ||
       context.time.weekday == "saturday" || context.time.weekday == "sunday" };
`

// A policy denying an agent a connector outside working hours refuses the exchange and says
// which policy did, in the refusal and in the audit log; the same request within working
// hours gets the person's token. The clock is the test's, moved instead of waited for.
func TestAccessPolicyRefusesExchangeOutsideWorkingHours(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	conn := h.ConnectDirectly(stack.AliceEmail, "2002", "alice-gh", "gho_alice")
	h.Allow(stack.AliceEmail, stack.Agent, conn)
	h.Project.AccessPolicy = policy.Compile([]policy.Source{{Name: "latchkey-test/hours", Text: workingHours}}, policy.Options{})

	// Move the clock to the next weekday 20:00 UTC.
	now := h.Clock.Now().UTC()
	evening := time.Date(now.Year(), now.Month(), now.Day(), 20, 0, 0, 0, time.UTC)
	for evening.Before(now) || evening.Weekday() == time.Saturday || evening.Weekday() == time.Sunday {
		evening = evening.Add(24 * time.Hour)
	}
	h.Clock.Advance(evening.Sub(now))
	alice := h.AccessToken(stack.AliceEmail, stack.Agent)

	a := h.AgentExchange(alice)
	if a.Status != 403 || a.Str("error") != "access_denied" ||
		!strings.Contains(a.Str("error_description"), "latchkey-test/hours/github-in-working-hours") {
		t.Fatalf("at 20:00: %d %s, want 403 access_denied naming latchkey-test/hours/github-in-working-hours", a.Status, a.Raw)
	}
	if a.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control %q", a.Header.Get("Cache-Control"))
	}
	if _, ok := a.Body["access_token"]; ok {
		t.Fatal("the refusal carries a token")
	}
	rec, ok := h.Trail(events.AccessDeniedByPolicy)[events.AccessDeniedByPolicy]
	if !ok {
		t.Fatalf("no %s record; audit: %v", events.AccessDeniedByPolicy, h.AuditActions())
	}
	if rec.Details["policy"] != "latchkey-test/hours/github-in-working-hours" || rec.Details["action"] != "exchange" ||
		rec.ClientID != stack.Agent || rec.Target != h.PersonID(stack.AliceEmail) {
		t.Fatalf("audit record: %+v", rec)
	}

	// Next morning at 09:00 the same agent gets the token.
	h.Clock.Advance(13 * time.Hour)
	alice = h.AccessToken(stack.AliceEmail, stack.Agent)
	if a := h.AgentExchange(alice); a.Status != 200 || a.Str("access_token") != "gho_alice" {
		t.Fatalf("at 09:00: %d %s", a.Status, a.Raw)
	}
}

// An AccessPolicy decides who gets the token, not whether the requester is who it says: a
// client the exchange rules refuse is refused as before, with no policy asked.
func TestAccessPolicyOnlyTakesAway(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	h.Project.AccessPolicy = policy.Compile([]policy.Source{{Name: "latchkey-test/open", Text: `permit(principal, action, resource);`}}, policy.Options{})
	copycatOwn := h.AccessToken(stack.AliceEmail, stack.Copycat)
	if a := h.ExchangeAs(stack.Copycat, stack.CopycatSecret, copycatOwn, stack.Audience); a.Str("error") != "unauthorized_client" {
		t.Fatalf("a permit-all policy let a client exchange that may not: %d %s", a.Status, a.Raw)
	}
}

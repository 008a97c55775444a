package links_test

import (
	"net/http"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
)

// The audit trail of a connection, from the agent's first refusal to Alice removing it, read
// back from the audit log and from the project's event sink: who did what, for whom, with which
// client and Connector, and the outcome.
func TestAuditTrailOfAConnection(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	gh := h.Connector.Key
	subject := h.AccessToken(stack.AliceEmail, stack.Agent)
	alice := h.PersonID(stack.AliceEmail)

	// Refused with a connect link, which Alice opens and uses; the agent then gets her token.
	a := refusal(t, h, h.AgentExchange(subject), "connect_required", connectDesc, connectMsg)
	b := signedIn(h, stack.AliceEmail, stack.AlicePassword)
	b.SignInGitHub(stack.AliceLogin)
	h.GitHub.Approve(stack.AliceLogin, stack.GitHubClientID)
	p := b.MustGet(h.LinkPath(a.Str("connect_uri")))
	if res := b.MustFollow(press(t, b, p, "Connect GitHub", nil)); res.Status != http.StatusOK {
		t.Fatalf("connect: %d %s", res.Status, res.Text())
	}
	token(t, h.AgentExchange(subject))
	// A client that may not exchange for GitHub presents Alice's token.
	if r := h.ExchangeAs(stack.Copycat, stack.CopycatSecret, h.AccessToken(stack.AliceEmail, stack.Copycat), stack.Audience); r.Status != http.StatusBadRequest {
		t.Fatalf("copycat: %d %s", r.Status, r.Raw)
	}

	recs := h.Trail(events.TokenExchangeRefused, "link.created", events.LinkOpened, "connection.started",
		"connection.saved", "agent.allowed", events.TokenExchanged)
	agent := "client:" + stack.Agent
	exp := func(r store.AuditRecord, actor, subject, client, connector, outcome, reason string) {
		t.Helper()
		if r.Actor != actor || r.Target != subject || r.ClientID != client || r.Connector != connector || r.Outcome != outcome || r.Reason != reason {
			t.Errorf("%s: actor %q subject %q client %q connector %q outcome %q reason %q; want %q %q %q %q %q %q", r.Action,
				r.Actor, r.Target, r.ClientID, r.Connector, r.Outcome, r.Reason, actor, subject, client, connector, outcome, reason)
		}
	}
	exp(recs[events.TokenExchangeRefused], "client:"+stack.Copycat, alice, stack.Copycat, gh, store.OutcomeRefused, "client_not_permitted")
	exp(recs["link.created"], agent, alice, stack.Agent, gh, store.OutcomeSuccess, "")
	exp(recs[events.LinkOpened], alice, alice, stack.Agent, gh, store.OutcomeSuccess, "")
	exp(recs["agent.allowed"], alice, "client:"+stack.Agent, stack.Agent, gh, store.OutcomeSuccess, "")
	exp(recs[events.TokenExchanged], agent, alice, stack.Agent, gh, store.OutcomeSuccess, "")
	if recs[events.TokenExchanged].Details["account"] != stack.AliceLogin {
		t.Errorf("token.exchanged details %v", recs[events.TokenExchanged].Details)
	}
	var connectRequired bool
	for _, r := range h.Audit() {
		if r.Action == events.TokenExchangeRefused && r.Reason == "connect_required" && r.Actor == agent && r.Target == alice && r.Connector == gh {
			connectRequired = true
		}
	}
	if !connectRequired {
		t.Error("no token.exchange_refused record with reason connect_required")
	}

	// Alice removes the agent's access, then disconnects GitHub.
	if r := b.MustPost(formOf(t, b.Account(), "Remove access")); r.Status != http.StatusSeeOther {
		t.Fatalf("remove access: %d %s", r.Status, r.Text())
	}
	if r := b.MustPost(formOf(t, b.Account(), "Disconnect")); r.Status != http.StatusSeeOther {
		t.Fatalf("disconnect: %d %s", r.Status, r.Text())
	}
	recs = h.Trail("permission.removed", "connection.disconnected")
	exp(recs["permission.removed"], alice, "client:"+stack.Agent, stack.Agent, gh, store.OutcomeSuccess, "")
	exp(recs["connection.disconnected"], alice, recs["connection.disconnected"].Target, "", gh, store.OutcomeSuccess, "")
}

// A link opened by another person, and one declined by its own.
func TestAuditTrailOfRefusedLinks(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	a := refusal(t, h, h.AgentExchange(h.AccessToken(stack.MalloryEmail, stack.Agent)), "connect_required", connectDesc, connectMsg)
	link := h.LinkPath(a.Str("connect_uri"))
	alice := signedIn(h, stack.AliceEmail, stack.AlicePassword)
	if p := alice.MustGet(link); p.Status != http.StatusForbidden {
		t.Fatalf("Alice on Mallory's link: %d", p.Status)
	}
	mallory := signedIn(h, stack.MalloryEmail, stack.MalloryPassword)
	if r := press(t, mallory, mallory.MustGet(link), "Decline", nil); r.Status != http.StatusOK {
		t.Fatalf("decline: %d", r.Status)
	}
	recs := h.Trail(events.LinkWrongPerson, "link.declined")
	if r := recs[events.LinkWrongPerson]; r.Actor != h.PersonID(stack.AliceEmail) || r.Target != h.PersonID(stack.MalloryEmail) ||
		r.Outcome != store.OutcomeRefused || r.Reason != "wrong_person" || r.ClientID != stack.Agent || r.Connector != h.Connector.Key {
		t.Errorf("link.wrong_person %+v", r)
	}
	if r := recs["link.declined"]; r.Actor != h.PersonID(stack.MalloryEmail) || r.Outcome != store.OutcomeRefused || r.Reason != "declined_by_person" {
		t.Errorf("link.declined %+v", r)
	}
}

// formOf returns the action and fields of the form whose button says label.
func formOf(t *testing.T, p stack.Page, label string) (string, map[string][]string) {
	t.Helper()
	action, fields, ok := p.Form(label)
	if !ok {
		t.Fatalf("no %q button: %s", label, p.Text())
	}
	return action, fields
}

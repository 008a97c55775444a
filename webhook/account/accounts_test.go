package account_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
)

// Alice has two GitHub accounts: the account page lists both by their names, marks the
// default, lets her move it, take an agent off one account only, disconnect one without
// touching the other, and connect a further account with the service's account picker.
// Mallory, signed in as herself, changes nothing of Alice's by posting Alice's ids.
func TestSeveralAccounts(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	ctx := context.Background()
	b := connect(t, h, stack.AliceEmail, stack.AlicePassword, stack.AliceLogin)
	alice := h.Person(stack.AliceEmail)
	first := h.Connections(stack.AliceEmail)[0]
	if !first.Default {
		t.Fatal("the first account is not the default")
	}
	now := h.Clock.Now()
	work, err := h.Store().SaveConnection(ctx, store.Connection{
		ID: "conn-alice-work", Project: stack.ProjectKey, Subject: alice.ID, Connector: h.Connector.Key, AccountID: "999",
		AccountName: "alice-work", TokenType: "bearer", Status: store.ConnectionActive, CreatedAt: now, UpdatedAt: now,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []store.Connection{first, work} {
		if err := h.Store().AllowAgent(ctx, store.AgentPermission{Project: stack.ProjectKey, Subject: alice.ID,
			Connector: h.Connector.Key, ClientID: "repo-helper", ConnectionID: c.ID, CreatedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	permitted := func() []string {
		t.Helper()
		perms, err := h.Store().ListPermissions(ctx, stack.ProjectKey, alice.ID)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range perms {
			out = append(out, p.ClientID+"@"+p.ConnectionID)
		}
		return out
	}
	defaultOf := func() string {
		t.Helper()
		for _, c := range h.Connections(stack.AliceEmail) {
			if c.Default {
				return c.AccountName
			}
		}
		return ""
	}

	page := b.Account()
	text := page.Text()
	for _, want := range []string{stack.AliceLogin, "alice-work", "default", "Make default", "Connect another GitHub account"} {
		if !strings.Contains(text, want) {
			t.Fatalf("account page lacks %q: %s", want, text)
		}
	}
	_, fields, ok := page.Form("Make default")
	if !ok || fields.Get("connection_id") != work.ID {
		t.Fatalf("Make default is not offered for alice-work only: %v", fields)
	}
	csrf := fields.Get("csrf_token")

	// Mallory posts Alice's ids from her own session: nothing of Alice's changes.
	m := h.Browser()
	m.MustSignIn(stack.MalloryEmail, stack.MalloryPassword)
	mcsrf := func() string {
		_, f, ok := m.Account().Form("Connect GitHub")
		if !ok {
			t.Fatal("no form on Mallory's account page")
		}
		return f.Get("csrf_token")
	}()
	m.MustPost(h.Issuer+"/account/default", url.Values{"csrf_token": {mcsrf}, "connection_id": {work.ID}})
	m.MustPost(h.Issuer+"/account/agents/remove", url.Values{"csrf_token": {mcsrf}, "connector": {h.Connector.Key},
		"connection_id": {work.ID}, "client_id": {"repo-helper"}})
	if got := defaultOf(); got != stack.AliceLogin {
		t.Fatalf("Mallory moved Alice's default to %q", got)
	}
	if got := permitted(); len(got) != 2 {
		t.Fatalf("Mallory removed Alice's permission: %v", got)
	}

	// Alice moves her default.
	if res := b.MustPost(h.Issuer+"/account/default", url.Values{"csrf_token": {csrf}, "connection_id": {work.ID}}); res.Status != http.StatusSeeOther {
		t.Fatalf("make default: %d %s", res.Status, res.Text())
	}
	if got := defaultOf(); got != "alice-work" {
		t.Fatalf("default after moving: %q", got)
	}
	rec, ok := h.Trail(events.ConnectionDefaultSet)[events.ConnectionDefaultSet]
	if !ok || rec.Actor != alice.ID || rec.Details["account"] != "alice-work" {
		t.Fatalf("audit record of the move: %+v", rec)
	}

	// Repo Helper off the work account only.
	if res := b.MustPost(h.Issuer+"/account/agents/remove", url.Values{"csrf_token": {csrf}, "connector": {h.Connector.Key},
		"connection_id": {work.ID}, "client_id": {"repo-helper"}}); res.Status != http.StatusSeeOther {
		t.Fatalf("remove: %d %s", res.Status, res.Text())
	}
	if got := strings.Join(permitted(), ","); got != "repo-helper@"+first.ID {
		t.Fatalf("permissions after removing one account: %s", got)
	}

	// Disconnecting the default leaves the other account, and no default until Alice picks one.
	if res := b.MustPost(h.Issuer+"/account/disconnect", url.Values{"csrf_token": {csrf}, "connection_id": {work.ID}}); res.Status != http.StatusSeeOther {
		t.Fatalf("disconnect: %d %s", res.Status, res.Text())
	}
	conns := h.Connections(stack.AliceEmail)
	if len(conns) != 1 || conns[0].ID != first.ID || conns[0].Default {
		t.Fatalf("after disconnecting the default: %+v", conns)
	}
	if got := strings.Join(permitted(), ","); got != "repo-helper@"+first.ID {
		t.Fatalf("the other account's permission went with it: %s", got)
	}
	if _, f, ok := b.Account().Form("Make default"); !ok || f.Get("connection_id") != first.ID {
		t.Fatal("with no default left, the remaining account is not offered as the default")
	}

	// Connecting a further account asks the service for its account picker.
	h.Connector.SelectAccountParams = map[string]string{"prompt": "select_account"}
	h.Connector.AccountHintParam = "login"
	res := b.PressOnAccount("Connect another GitHub account")
	loc, err := url.Parse(res.Location())
	if res.Status != http.StatusSeeOther || err != nil || loc.Query().Get("prompt") != "select_account" || loc.Query().Has("login") {
		t.Fatalf("connect another: %d %q", res.Status, res.Location())
	}
}

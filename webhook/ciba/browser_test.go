package ciba_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/testbrowser"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/ciba"
)

// TestApprovalInChromium tells the story in real browsers: Ops Bot asks alice; mallory, signed
// in in her own browser, sees nothing waiting; alice opens her approvals page, signs in, sees
// the agent and its message as text, and approves; the agent's poll returns her token. A second
// request alice denies ends with access_denied.
func TestApprovalInChromium(t *testing.T) {
	testbrowser.Chromium(t)
	s := newStack(t, stack.Options{})
	const message = "<b>Deploy</b> v2 to production"
	id := mustAsk(t, s, url.Values{"login_hint": {stack.AliceEmail}, "binding_message": {message}})

	mallory := testbrowser.New(t, t.Context(), "mallory")
	signInAt(mallory, s.Issuer+ciba.PagePath, stack.MalloryEmail, stack.MalloryPassword)
	text := mallory.WaitFor("Waiting for you")
	if !strings.Contains(text, "No agent is waiting for your answer.") || strings.Contains(text, "Deploy") {
		t.Fatalf("mallory's page shows alice's request:\n%s", text)
	}

	alice := testbrowser.New(t, t.Context(), "alice")
	signInAt(alice, s.Issuer+ciba.PagePath, stack.AliceEmail, stack.AlicePassword)
	text = alice.WaitFor(opsBotName)
	for _, want := range []string{"Where access goes", message, "Permissions: openid, deploy"} {
		if !strings.Contains(text, want) {
			t.Fatalf("alice's page lacks %q:\n%s", want, text)
		}
	}
	// The markup is text: no <b> element was made from it.
	if n := testbrowser.Eval[int](alice, `document.querySelectorAll(".binding-message b").length`); n != 0 {
		t.Fatal("the binding message was rendered as markup")
	}
	alice.Press("Approve")
	alice.WaitFor("You approved the request.")
	tok := poll(t, s, id, opsBot, opsBotSecret)
	if tok.Status != http.StatusOK || tok.Str("access_token") == "" {
		t.Fatalf("token after approval: %d %s", tok.Status, tok.Raw)
	}

	id = mustAsk(t, s, url.Values{"login_hint": {stack.AliceEmail}, "binding_message": {"Drop the database"}})
	mallory.Open(s.Issuer + ciba.PagePath)
	if text := mallory.WaitFor("Waiting for you"); strings.Contains(text, "Drop the database") {
		t.Fatalf("mallory's page shows alice's second request:\n%s", text)
	}
	alice.Open(s.Issuer + ciba.PagePath)
	alice.WaitFor("Drop the database")
	alice.Press("Deny")
	alice.WaitFor("You denied the request.")
	wantError(t, poll(t, s, id, opsBot, opsBotSecret), 400, "access_denied")
}

// signInAt opens a page that needs a recent sign-in and signs in on the page it sends to.
func signInAt(b *testbrowser.Profile, page, email, password string) {
	b.T.Helper()
	b.Open(page)
	b.WaitFor("Sign in")
	b.Fill("username", email)
	b.Fill("password", password)
	b.Press("Sign in")
}

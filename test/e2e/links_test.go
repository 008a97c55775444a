package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"latchkey.dev/latchkey/internal/testbrowser"
	"latchkey.dev/latchkey/test/stack"
)

// The forwarded connect link, in two real Chromium profiles: Mallory's agent gets a connect link;
// Mallory sends it to Alice, who is signed in to Latchkey and to GitHub and approved the app
// before; the link stops her and nothing is connected. Then Mallory opens her own link, signs
// in, connects at GitHub (another site, 127.0.0.2), and the agent's next exchange returns her
// token.
func TestLinkForwardedInRealBrowsers(t *testing.T) {
	testbrowser.Chromium(t)
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour, FrontHost: "127.0.0.1", GitHubHost: "127.0.0.2"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	subject := h.AccessToken(stack.MalloryEmail, stack.Agent)
	refusal := h.AgentExchange(subject)
	if refusal.Status != http.StatusBadRequest || refusal.Str("reason") != "connect_required" {
		t.Fatalf("first exchange: %d %s", refusal.Status, refusal.Raw)
	}
	link := refusal.Str("connect_uri")

	alice := testbrowser.New(t, ctx, "alice's browser")
	mallory := testbrowser.New(t, ctx, "mallory's browser")

	// Alice: signed in to Latchkey and to GitHub, the app approved before.
	alice.Open(h.Issuer + "/sign-in")
	alice.Fill("username", stack.AliceEmail)
	alice.Fill("password", stack.AlicePassword)
	alice.Press("Sign in")
	alice.WaitFor("Your account")
	alice.Open(h.GitHubURL + "/login")
	alice.Fill("login", stack.AliceLogin)
	alice.Fill("password", stack.AlicePassword)
	alice.Press("Sign in")
	alice.WaitFor("404 page not found")
	h.GitHub.Approve(stack.AliceLogin, stack.GitHubClientID)

	// She opens the link Mallory forwarded.
	alice.Open(link)
	text := alice.WaitFor("This link was made for another account")
	for _, leak := range []string{"mallory", "Mallory", "Connect GitHub"} {
		if strings.Contains(text, leak) {
			t.Errorf("Alice's page says %q:\n%s", leak, text)
		}
	}
	if n := lkButtons(t, alice, "Connect GitHub"); n != 0 {
		t.Fatalf("Alice is offered %d Connect buttons", n)
	}
	if n := h.CountRows("connections") + h.CountRows("callback_states") + h.CountRows("agent_permissions"); n != 0 {
		t.Fatalf("%d rows of connections, callback states or permissions after Alice opened the link", n)
	}
	if h.GitHub.ExchangeCalls() != 0 {
		t.Fatal("GitHub was asked for a code")
	}
	if got := h.SecurityEvents("link.wrong_person"); got != 1 {
		t.Errorf("link.wrong_person counted %v times, want 1", got)
	}
	if a := h.AgentExchange(subject); a.Str("connect_id") != refusal.Str("connect_id") {
		t.Fatalf("the link changed after Alice opened it: %s", a.Raw)
	}

	// Mallory opens her own link: sign in first, then back to the link.
	mallory.Open(link)
	mallory.WaitFor("Sign in to")
	mallory.Fill("username", stack.MalloryEmail)
	mallory.Fill("password", stack.MalloryPassword)
	mallory.Press("Sign in")
	mallory.WaitFor("Connect your GitHub account and let Repo Helper use it.")
	if loc := mallory.Location(); loc != link {
		t.Errorf("after sign-in Mallory is at %s, want the link", loc)
	}
	// At GitHub (another site) she signs in and approves the app in a tab of her own first:
	// the fake GitHub's own pages allow form submissions only to itself ('self'), so a
	// redirect from its forms back to Latchkey would be blocked by the browser.
	mallory.Open(h.GitHubURL + "/login")
	mallory.Fill("login", stack.MalloryLogin)
	mallory.Fill("password", stack.MalloryPassword)
	mallory.Press("Sign in")
	mallory.WaitFor("404 page not found")
	h.GitHub.Approve(stack.MalloryLogin, stack.GitHubClientID)
	mallory.Open(link)
	mallory.WaitFor("Connect your GitHub account and let Repo Helper use it.")
	mallory.Press("Connect GitHub")
	text = mallory.WaitFor("is now connected.")
	if !strings.Contains(text, "Go back to your agent") {
		t.Errorf("result page:\n%s", text)
	}
	if loc := mallory.Location(); !strings.HasPrefix(loc, h.CallbackURL) {
		t.Errorf("finishing went on to %s; it must stay on the result page", loc)
	}

	// The agent learns the outcome by asking again.
	ok := h.AgentExchange(subject)
	if ok.Status != http.StatusOK {
		t.Fatalf("exchange after connecting: %d %s", ok.Status, ok.Raw)
	}
	if login := lkGitHubLogin(t, h, ok.Str("access_token")); login != stack.MalloryLogin {
		t.Fatalf("the agent got a token for %q, want %q", login, stack.MalloryLogin)
	}
	if n := len(h.Connections(stack.AliceEmail)); n != 0 {
		t.Fatalf("Alice has %d connections", n)
	}
	// The finished link is gone for everyone.
	alice.Open(link)
	alice.WaitFor("There is nothing at this address")
}

// lkButtons counts the buttons whose visible text is label.
func lkButtons(t *testing.T, p *testbrowser.Profile, label string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(p.Ctx, 10*time.Second)
	defer cancel()
	js := `Array.from(document.querySelectorAll("button")).filter(b => b.textContent.trim() === ` + strconv.Quote(label) + `).length`
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](js))
	if err != nil {
		t.Fatalf("%s: counting buttons: %v", p.Name, err)
	}
	return n
}

// lkGitHubLogin asks the fake GitHub whose token tok is.
func lkGitHubLogin(t *testing.T, h *stack.Stack, tok string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, h.GitHubURL+"/user", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var u struct {
		Login string `json:"login"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &u) != nil {
		t.Fatalf("GitHub /user: %d %s", resp.StatusCode, body)
	}
	return u.Login
}

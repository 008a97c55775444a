package exchange_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/test/stack"
)

// exchangeAccount is Repo Helper exchanging subject for GitHub, naming account ("" names none).
func exchangeAccount(h *stack.Stack, subject, account string) stack.Answer {
	h.T.Helper()
	return h.ExchangeForm(stack.Agent, stack.AgentSecret, form(subject, func(f url.Values) {
		if account != "" {
			f.Set("account", account)
		}
	}))
}

// Alice has a work and a personal GitHub account, and allowed Repo Helper the work one only.
// The agent may name an account (by name or id); it gets only an account Alice allowed it, and
// another person's account never matches.
func TestExchangeNamesAnAccount(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	work := h.ConnectDirectly(stack.AliceEmail, "101", "alice-work", "gho_work")
	h.ConnectDirectly(stack.AliceEmail, "102", "alice-personal", "gho_personal")
	h.ConnectDirectly(stack.MalloryEmail, "201", "mallory-gh", "gho_mallory")
	h.Allow(stack.AliceEmail, stack.Agent, work)
	subject := h.AccessToken(stack.AliceEmail, stack.Agent)

	for _, tc := range []struct{ name, account string }{
		{"no account named", ""},
		{"by name", "alice-work"},
		{"by name in another case", "Alice-Work"},
		{"by id", "101"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := exchangeAccount(h, subject, tc.account)
			if a.Status != http.StatusOK || a.Str("access_token") != "gho_work" {
				t.Fatalf("got %d %s, want the work account's token", a.Status, a.Raw)
			}
		})
	}

	// The attack: the agent names the account Alice did not allow it.
	for _, tc := range []struct{ name, account, reason string }{
		{"her other account by name", "alice-personal", "allow_required"},
		{"her other account by id", "102", "allow_required"},
		{"another person's account by name", "mallory-gh", "connect_required"},
		{"another person's account by id", "201", "connect_required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := exchangeAccount(h, subject, tc.account)
			if a.Status != http.StatusBadRequest || a.Str("error") != "invalid_grant" || a.Str("reason") != tc.reason {
				t.Fatalf("got %d %s, want invalid_grant with reason %s", a.Status, a.Raw, tc.reason)
			}
			if strings.Contains(string(a.Raw), "gho_") {
				t.Fatalf("a refusal carries a token: %s", a.Raw)
			}
			if a.Str("account") != tc.account || a.Str("connect_uri") == "" {
				t.Fatalf("the refusal does not name the account %q with a link: %s", tc.account, a.Raw)
			}
		})
	}

	// The allow link is for exactly that account: the page names it and offers no other.
	a := exchangeAccount(h, subject, "alice-personal")
	b := h.Browser()
	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	p := b.MustGet(h.LinkPath(a.Str("connect_uri")))
	if p.Status != http.StatusOK || !strings.Contains(p.Text(), "alice-personal") || strings.Contains(p.Text(), "alice-work") {
		t.Fatalf("allow page for alice-personal: %d %s", p.Status, p.Text())
	}
	action, fields, ok := p.Form("Allow")
	if !ok {
		t.Fatalf("no Allow button: %s", p.Text())
	}
	// Swapping the form's account for the other one is refused: the link is for one account.
	swapped := url.Values{}
	for k, v := range fields {
		swapped[k] = v
	}
	swapped.Set("connection_id", work.ID)
	if bad := b.MustPost(action, swapped); bad.Status != http.StatusBadRequest {
		t.Fatalf("allow with another account than the link's: %d %s", bad.Status, bad.Text())
	}
	if done := b.MustPost(action, fields); done.Status != http.StatusOK {
		t.Fatalf("allow: %d %s", done.Status, done.Text())
	}
	// Now both; without naming one the agent still gets the default (the first connected).
	if got := exchangeAccount(h, subject, "alice-personal"); got.Str("access_token") != "gho_personal" {
		t.Fatalf("named personal account after allowing: %d %s", got.Status, got.Raw)
	}
	if got := exchangeAccount(h, subject, ""); got.Str("access_token") != "gho_work" {
		t.Fatalf("no account named after allowing a second: %d %s", got.Status, got.Raw)
	}
	// Mallory's account still never matches.
	if got := exchangeAccount(h, subject, "mallory-gh"); got.Str("reason") != "connect_required" {
		t.Fatalf("another person's account: %d %s", got.Status, got.Raw)
	}
}

// A malformed account parameter is the client's mistake, answered in RFC 6749's shape.
func TestExchangeAccountBadInput(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	subject := h.AccessToken(stack.AliceEmail, stack.Agent)
	for _, tc := range []struct {
		name string
		form url.Values
	}{
		{"too long", form(subject, func(f url.Values) { f.Set("account", strings.Repeat("a", 300)) })},
		{"control character", form(subject, func(f url.Values) { f.Set("account", "alice\nwork") })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := h.ExchangeForm(stack.Agent, stack.AgentSecret, tc.form)
			if a.Status != http.StatusBadRequest || a.Str("error") != "invalid_request" {
				t.Fatalf("got %d %s, want invalid_request", a.Status, a.Raw)
			}
		})
	}
	if n := h.CountRows("links"); n != 0 {
		t.Fatalf("%d links made by bad requests", n)
	}
}

// A connect link made for a named account asks the service for that account, and only that
// account finishes it: Alice signed in at GitHub as another account connects that one, but
// the agent is not let use it through a link that named another.
func TestConnectLinkForANamedAccount(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	h.Connector.SelectAccountParams = map[string]string{"prompt": "select_account"}
	h.Connector.AccountHintParam = "login"
	subject := h.AccessToken(stack.AliceEmail, stack.Agent)

	a := exchangeAccount(h, subject, "alice-other")
	if a.Str("reason") != "connect_required" || a.Str("account") != "alice-other" ||
		!strings.Contains(a.Str("connect_message"), "alice-other") || !strings.Contains(a.Str("error_description"), "alice-other") {
		t.Fatalf("refusal for a named account: %s", a.Raw)
	}
	b := h.Browser()
	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	p := b.MustGet(h.LinkPath(a.Str("connect_uri")))
	if p.Status != http.StatusOK || !strings.Contains(p.Text(), "Connect your GitHub account alice-other") {
		t.Fatalf("connect page: %d %s", p.Status, p.Text())
	}
	action, fields, ok := p.Form("Connect GitHub")
	if !ok {
		t.Fatalf("no Connect button: %s", p.Text())
	}
	b.SignInGitHub(stack.AliceLogin)
	h.GitHub.Approve(stack.AliceLogin, stack.GitHubClientID)
	toGitHub := b.MustPost(action, fields)
	loc, err := url.Parse(toGitHub.Location())
	if err != nil || loc.Query().Get("prompt") != "select_account" || loc.Query().Get("login") != "alice-other" {
		t.Fatalf("authorization request does not ask for the account: %q", toGitHub.Location())
	}
	// The fake GitHub, like GitHub, shows its sign-in on prompt=select_account: Alice picks
	// the account she is signed in to there, not the one the agent named.
	picker := b.MustFollow(toGitHub)
	ghAction, ghFields, ok := picker.Form("Sign in")
	if !ok || !strings.Contains(picker.Text(), "Sign in to GitHub") {
		t.Fatalf("GitHub did not offer to pick the account: %d %s", picker.Status, picker.Text())
	}
	ghFields.Set("login", stack.AliceLogin)
	ghFields.Set("password", stack.AlicePassword)
	if res := b.MustFollow(b.MustPost(h.GitHubURL+ghAction, ghFields)); res.Status != http.StatusOK {
		t.Fatalf("callback: %d %s", res.Status, res.Text())
	}
	if n := len(h.Connections(stack.AliceEmail)); n != 1 {
		t.Fatalf("%d connections after the callback, want alice-gh's", n)
	}
	// alice-gh was connected, and Repo Helper may not use it: the link named another account,
	// and stays open.
	again := exchangeAccount(h, subject, "alice-other")
	if again.Str("reason") != "connect_required" || again.Str("connect_id") != a.Str("connect_id") {
		t.Fatalf("the named account is still not connected, and its link still open: %s", again.Raw)
	}
	if got := exchangeAccount(h, subject, ""); got.Str("reason") != "allow_required" {
		t.Fatalf("after connecting another account than the named one: %d %s", got.Status, got.Raw)
	}

	// Named as it is: the allow link, then the token.
	named := exchangeAccount(h, subject, stack.AliceLogin)
	if named.Str("reason") != "allow_required" || named.Str("account") != stack.AliceLogin {
		t.Fatalf("allow for the connected account: %s", named.Raw)
	}
	p = b.MustGet(h.LinkPath(named.Str("connect_uri")))
	if !strings.Contains(p.Text(), "Let Repo Helper use your GitHub account "+stack.AliceLogin+"?") {
		t.Fatalf("allow page: %s", p.Text())
	}
	action, fields, _ = p.Form("Allow")
	if res := b.MustPost(action, fields); res.Status != http.StatusOK {
		t.Fatalf("allow: %d %s", res.Status, res.Text())
	}
	if got := exchangeAccount(h, subject, stack.AliceLogin); got.Status != http.StatusOK || got.Str("access_token") == "" {
		t.Fatalf("named account after allowing: %d %s", got.Status, got.Raw)
	}
}

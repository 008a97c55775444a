package exchange_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	ct "latchkey.dev/latchkey/webhook/callback/callbacktest"
	lt "latchkey.dev/latchkey/webhook/links/linktest"
)

// exchangeAccount is Repo Helper exchanging subject for GitHub, naming account ("" names none).
func exchangeAccount(h *lt.Harness, subject, account string) lt.Answer {
	h.T.Helper()
	return h.ExchangeForm(lt.Agent, lt.AgentSecret, form(subject, func(f url.Values) {
		if account != "" {
			f.Set("account", account)
		}
	}))
}

// Alice has a work and a personal GitHub account, and allowed Repo Helper the work one only.
// The agent may name an account (by name or id); it gets only an account Alice allowed it, and
// another person's account never matches.
func TestExchangeNamesAnAccount(t *testing.T) {
	h := lt.New(t, lt.Options{})
	work := h.ConnectDirectly(ct.AliceEmail, "101", "alice-work", "gho_work")
	h.ConnectDirectly(ct.AliceEmail, "102", "alice-personal", "gho_personal")
	h.ConnectDirectly(ct.MalloryEmail, "201", "mallory-gh", "gho_mallory")
	h.Allow(ct.AliceEmail, lt.Agent, work)
	subject := h.AccessToken(ct.AliceEmail, lt.Agent)

	for _, tc := range []struct{ name, account string }{
		{"no account named", ""},
		{"by name", "alice-work"},
		{"by name in another case", "Alice-Work"},
		{"by id", "101"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := exchangeAccount(h, subject, tc.account)
			if a.Status != http.StatusOK || a.String("access_token") != "gho_work" {
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
			if a.Status != http.StatusBadRequest || a.String("error") != "invalid_grant" || a.String("reason") != tc.reason {
				t.Fatalf("got %d %s, want invalid_grant with reason %s", a.Status, a.Raw, tc.reason)
			}
			if strings.Contains(string(a.Raw), "gho_") {
				t.Fatalf("a refusal carries a token: %s", a.Raw)
			}
			if a.String("account") != tc.account || a.String("connect_uri") == "" {
				t.Fatalf("the refusal does not name the account %q with a link: %s", tc.account, a.Raw)
			}
		})
	}

	// The allow link is for exactly that account: the page names it and offers no other.
	a := exchangeAccount(h, subject, "alice-personal")
	b := h.Browser()
	b.SignIn(ct.AliceEmail, ct.AlicePassword)
	p := b.Get(h.LinkPath(a.String("connect_uri")))
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
	if bad := b.Post(action, swapped); bad.Status != http.StatusBadRequest {
		t.Fatalf("allow with another account than the link's: %d %s", bad.Status, bad.Text())
	}
	if done := b.Post(action, fields); done.Status != http.StatusOK {
		t.Fatalf("allow: %d %s", done.Status, done.Text())
	}
	// Now both; without naming one the agent still gets the default (the first connected).
	if got := exchangeAccount(h, subject, "alice-personal"); got.String("access_token") != "gho_personal" {
		t.Fatalf("named personal account after allowing: %d %s", got.Status, got.Raw)
	}
	if got := exchangeAccount(h, subject, ""); got.String("access_token") != "gho_work" {
		t.Fatalf("no account named after allowing a second: %d %s", got.Status, got.Raw)
	}
	// Mallory's account still never matches.
	if got := exchangeAccount(h, subject, "mallory-gh"); got.String("reason") != "connect_required" {
		t.Fatalf("another person's account: %d %s", got.Status, got.Raw)
	}
}

// A malformed account parameter is the client's mistake, answered in RFC 6749's shape.
func TestExchangeAccountBadInput(t *testing.T) {
	h := lt.New(t, lt.Options{})
	subject := h.AccessToken(ct.AliceEmail, lt.Agent)
	for _, tc := range []struct {
		name string
		form url.Values
	}{
		{"too long", form(subject, func(f url.Values) { f.Set("account", strings.Repeat("a", 300)) })},
		{"control character", form(subject, func(f url.Values) { f.Set("account", "alice\nwork") })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := h.ExchangeForm(lt.Agent, lt.AgentSecret, tc.form)
			if a.Status != http.StatusBadRequest || a.String("error") != "invalid_request" {
				t.Fatalf("got %d %s, want invalid_request", a.Status, a.Raw)
			}
		})
	}
	if n := h.CountRows("links"); n != 0 {
		t.Fatalf("%d links made by bad requests", n)
	}
}

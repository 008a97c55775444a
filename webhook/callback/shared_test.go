package callback_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/callback"
)

// sharedStart makes GitHub an Organisation connector and stores a start URL as the admin API's
// create does, valid for ten minutes; it returns the URL's path.
func sharedStart(t *testing.T, h *stack.Stack) string {
	t.Helper()
	h.Connector.Shared = true
	code := secret.New("")
	now := h.Clock.Now()
	if err := h.Store().CreateSharedStart(context.Background(), store.SharedStart{
		CodeHash: secret.Hash(code), ID: secret.NewID(), Project: stack.ProjectKey, Connector: h.Connector.Key,
		Actor: "kubernetes:ada", CreatedAt: now, ExpiresAt: now.Add(10 * time.Minute),
	}); err != nil {
		t.Fatal(err)
	}
	return h.Issuer + "/shared-connections/start/" + code
}

// openStart opens the start URL in b and presses its button; it returns the answer.
func openStart(t *testing.T, b *stack.Browser, start string) stack.Page {
	t.Helper()
	page := b.MustGet(start)
	action, fields, ok := page.Form("Connect the shared account")
	if page.Status != http.StatusOK || !ok {
		t.Fatalf("start page: %d %s", page.Status, page.Text())
	}
	return b.MustPost(action, fields)
}

func sharedConnections(t *testing.T, h *stack.Stack) []store.Connection {
	t.Helper()
	conns, err := h.Store().ListSharedConnections(context.Background(), stack.ProjectKey)
	if err != nil {
		t.Fatal(err)
	}
	return conns
}

// The administrator's browser opens the start URL, signs in at GitHub as the account to share,
// and the callback saves it as the shared account: not as anyone's own, and without any sign-in
// to the project. The start URL works once; loading its page (as a link preview does) spends
// nothing.
func TestSharedConnectionStory(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	start := sharedStart(t, h)
	admin := h.Browser()
	admin.MustGet(start) // a preview
	res := openStart(t, admin, start)
	if res.Status != http.StatusSeeOther || !strings.HasPrefix(res.Location(), h.GitHubURL) {
		t.Fatalf("start answered %d, Location %q: %s", res.Status, res.Location(), res.Text())
	}
	admin.SignInGitHub(stack.MalloryLogin)
	h.GitHub.Approve(stack.MalloryLogin, stack.GitHubClientID)
	back := admin.MustGet(res.Location())
	done := admin.MustGet(back.Location())
	if done.Status != http.StatusOK || !strings.Contains(done.Text(), "The shared GitHub account "+stack.MalloryLogin+" is now connected") {
		t.Fatalf("callback: %d %s", done.Status, done.Text())
	}
	conns := sharedConnections(t, h)
	if len(conns) != 1 || conns[0].AccountName != stack.MalloryLogin || conns[0].Subject != store.SharedSubject(h.Connector.Key) {
		t.Fatalf("shared connections %+v", conns)
	}
	if n := h.CountRows("connections"); n != 1 {
		t.Fatalf("%d connections stored, want only the shared one", n)
	}
	rec := h.Trail(events.SharedConnectionOpened, events.SharedConnectionSaved)
	if rec[events.SharedConnectionOpened].Actor != "kubernetes:ada" || rec[events.SharedConnectionSaved].Details["account"] != stack.MalloryLogin ||
		h.GitHub.ActiveTokens(stack.MalloryLogin) != 1 {
		t.Fatalf("records %+v", rec)
	}

	// Used once: the same URL, in any browser, starts nothing.
	for _, b := range []*stack.Browser{admin, h.Browser()} {
		again := openStart(t, b, start)
		if again.Status != http.StatusBadRequest || !strings.Contains(again.Text(), "expired or has already been used") {
			t.Fatalf("second use: %d %s", again.Status, again.Text())
		}
	}
	if n := h.CountRows("callback_states"); n != 0 {
		t.Fatalf("%d attempts started by a spent URL", n)
	}

	// Connecting again with another account replaces the first (one shared account).
	res = openStart(t, admin, sharedStart(t, h))
	admin.SignInGitHub(stack.AliceLogin)
	h.GitHub.Approve(stack.AliceLogin, stack.GitHubClientID)
	done = admin.MustGet(admin.MustGet(res.Location()).Location())
	if conns := sharedConnections(t, h); done.Status != http.StatusOK || len(conns) != 1 || conns[0].AccountName != stack.AliceLogin {
		t.Fatalf("reconnect: %d %s; %+v", done.Status, done.Text(), conns)
	}
	// The replaced account is revoked at GitHub (the grant withdrawn), and the record says so.
	if n := h.GitHub.ActiveTokens(stack.MalloryLogin); n != 0 || h.GitHub.Approved(stack.MalloryLogin, stack.GitHubClientID) {
		t.Fatalf("the replaced account still holds %d tokens at GitHub", n)
	}
	if rec := h.Trail(events.SharedConnectionSaved)[events.SharedConnectionSaved]; rec.Details["replaced"] != stack.MalloryLogin || rec.Details["replaced_revoked"] != "yes" {
		t.Fatalf("record of the replacement %+v", rec)
	}
}

// A start URL works only within its lifetime.
func TestSharedStartExpires(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	start := sharedStart(t, h)
	h.Clock.Advance(10 * time.Minute)
	res := openStart(t, h.Browser(), start)
	if res.Status != http.StatusBadRequest || h.CountRows("callback_states") != 0 {
		t.Fatalf("expired start: %d %s", res.Status, res.Text())
	}
	if rec := h.Trail(events.SharedConnectionRefused)[events.SharedConnectionRefused]; rec.Reason != "start_unusable" {
		t.Fatalf("record %+v", rec)
	}
}

// A person who gets hold of the callback address (the service's redirect back) cannot finish
// the shared connection in their own browser, signed in to the project or not, nor through the
// confirmation POST; nothing is saved, and the administrator's own browser still finishes it.
func TestSharedCallbackInAnotherBrowser(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	admin := h.Browser()
	res := openStart(t, admin, sharedStart(t, h))
	admin.SignInGitHub(stack.MalloryLogin)
	h.GitHub.Approve(stack.MalloryLogin, stack.GitHubClientID)
	back := admin.MustGet(res.Location())
	cb := back.Location()

	mallory := h.Browser()
	mallory.MustSignIn(stack.MalloryEmail, stack.MalloryPassword)
	stranger := h.Browser()
	for name, b := range map[string]*stack.Browser{"signed-in person": mallory, "stranger": stranger} {
		page := b.MustGet(cb)
		if page.Status != http.StatusForbidden || !strings.Contains(page.Text(), "started in another browser") {
			t.Fatalf("%s: %d %s", name, page.Status, page.Text())
		}
		u := strings.SplitN(cb, "?", 2)
		q, _ := url.ParseQuery(u[1])
		q.Set("confirm_token", "guess")
		if post := b.MustPost(u[0], q); post.Status != http.StatusForbidden {
			t.Fatalf("%s's confirmation POST: %d %s", name, post.Status, post.Text())
		}
	}
	if conns := sharedConnections(t, h); len(conns) != 0 {
		t.Fatalf("saved from another browser: %+v", conns)
	}
	if n := len(h.Connections(stack.MalloryEmail)); n != 0 {
		t.Fatalf("mallory got a connection: %d", n)
	}
	done := admin.MustGet(cb)
	if done.Status != http.StatusOK || len(sharedConnections(t, h)) != 1 {
		t.Fatalf("the administrator's browser: %d %s", done.Status, done.Text())
	}
}

// Nobody connects an Organisation connector as a person, and nobody connects a Personal one as
// its shared account: Begin refuses both, whoever calls it.
func TestBeginKeepsSharedAndPersonalApart(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	b := h.Browser()
	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	alice := h.Person(stack.AliceEmail).ID
	for _, tc := range []struct {
		name    string
		shared  bool
		subject string
	}{
		{"a person on an Organisation connector", true, alice},
		{"another connector's shared subject", true, store.SharedSubject("default/other")},
		{"the shared subject on a Personal connector", false, store.SharedSubject(h.Connector.Key)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.Connector.Shared = tc.shared
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPost, h.Issuer+"/account", nil)
			if _, err := callback.Begin(w, r, h.Server().Env(), h.Store(), h.Project, h.Connector, tc.subject, callback.PurposeConnect, ""); err == nil {
				t.Fatal("Begin started it")
			}
			if n := h.CountRows("callback_states"); n != 0 {
				t.Fatalf("%d attempts stored", n)
			}
		})
	}
}

// The account page offers no Connect for an Organisation connector, and a Connect posted for
// one anyway (a form kept from before the Connector changed) starts nothing.
func TestAccountPageOffersNoSharedConnect(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	b := h.Browser()
	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	action, fields, ok := b.Account().Form("Connect GitHub")
	if !ok {
		t.Fatal("no Connect GitHub while the connector is Personal")
	}
	h.Connector.Shared = true
	if _, _, ok := b.Account().Form("Connect GitHub"); ok {
		t.Fatal("Connect GitHub offered for an Organisation connector")
	}
	res := b.MustPost(action, fields)
	if res.Status != http.StatusBadRequest || h.CountRows("callback_states") != 0 {
		t.Fatalf("Connect posted anyway: %d %s", res.Status, res.Text())
	}
}

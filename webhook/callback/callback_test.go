package callback_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/callback"
)

const confirmText = "Finish this connection? This connects your GitHub account to the account %s. If you did not start this connection or that account is not yours, close this window."

// assertPrivate checks the headers every callback page carries (Cache-Control: no-store and the other private-page headers).
func assertPrivate(t *testing.T, p stack.Page) {
	t.Helper()
	if got := p.Header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control = %q, want no-store", got)
	}
	if got := p.Header.Get("Content-Security-Policy"); !strings.Contains(got, "frame-ancestors 'none'") {
		t.Errorf("Content-Security-Policy = %q, want frame-ancestors 'none'", got)
	}
	if got := p.Header.Get("Referrer-Policy"); got != "no-referrer" {
		t.Errorf("Referrer-Policy = %q, want no-referrer", got)
	}
	if loc := p.Header.Get("Location"); loc != "" {
		t.Errorf("callback page redirects to %q; it must never send the browser anywhere", loc)
	}
}

// start signs email in to Latchkey in a new browser, presses Connect and returns that browser
// with the authorization URL it was sent to (not followed).
func start(t *testing.T, h *stack.Stack, email, password string) (*stack.Browser, string) {
	t.Helper()
	b := h.Browser()
	b.MustSignIn(email, password)
	res := b.PressOnAccount("Connect GitHub")
	if res.Status != http.StatusSeeOther {
		t.Fatalf("Connect answered %d: %s", res.Status, res.Text())
	}
	authURL := res.Location()
	if !strings.HasPrefix(authURL, h.GitHubURL+"/login/oauth/authorize?") {
		t.Fatalf("Connect sent the browser to %q", authURL)
	}
	return b, authURL
}

// atGitHub opens the authorization URL in b, which is signed in at GitHub as login and has
// approved the app before, and returns the callback address GitHub sends it back to.
func atGitHub(t *testing.T, h *stack.Stack, b *stack.Browser, login, authURL string) string {
	t.Helper()
	b.SignInGitHub(login)
	h.GitHub.Approve(login, stack.GitHubClientID)
	res := b.MustGet(authURL)
	if res.Status != http.StatusFound || !strings.HasPrefix(res.Location(), h.CallbackURL+"?") {
		t.Fatalf("GitHub answered %d, Location %q: %s", res.Status, res.Location(), res.Text())
	}
	return res.Location()
}

func count(t *testing.T, h *stack.Stack, table string) int {
	t.Helper()
	return h.CountRows(table)
}

// lastAudit returns the newest record of action, after checking that it also reached the
// project's event sink as a verified delivery (Harness.Trail).
func lastAudit(t *testing.T, h *stack.Stack, action string) store.AuditRecord {
	t.Helper()
	h.Trail(action)
	for _, r := range h.Audit() {
		if r.Action == action {
			return r
		}
	}
	t.Fatalf("no %q audit record; have %v", action, h.AuditActions())
	return store.AuditRecord{}
}

func TestSameBrowserFinishesAtOnce(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	b := h.Browser()
	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	res := b.PressOnAccount("Connect GitHub")
	if res.Status != http.StatusSeeOther {
		t.Fatalf("Connect answered %d", res.Status)
	}

	// The binding cookie: one-time, HttpOnly, SameSite=Lax, only for the callback path.
	ck := res.Cookie(callback.CookieName(h.Server().Env()))
	if ck == nil {
		t.Fatalf("no binding cookie in %v", res.Header["Set-Cookie"])
	}
	if !ck.HttpOnly || ck.SameSite != http.SameSiteLaxMode || ck.Path != "/team/demo/connectors/default/github/callback" || ck.MaxAge != 600 || ck.Secure {
		t.Errorf("binding cookie = %+v; want HttpOnly, SameSite=Lax, Path=/team/demo/connectors/default/github/callback, Max-Age=600, not Secure over http", ck)
	}
	if len(ck.Value) < 43 {
		t.Errorf("binding cookie value %q is too short to be 256 random bits", ck.Value)
	}
	if bytes.Contains(h.FileBytes(), []byte(ck.Value)) {
		t.Error("the binding cookie's value is stored in the database; only its hash may be")
	}

	// The authorization URL carries the fixed callback and PKCE.
	au, _ := url.Parse(res.Location())
	q := au.Query()
	if q.Get("redirect_uri") != h.CallbackURL || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("state") == "" || q.Get("client_id") != stack.GitHubClientID {
		t.Errorf("authorization URL = %s", au)
	}
	if bytes.Contains(h.FileBytes(), []byte(q.Get("state"))) {
		t.Error("the state is stored in the clear")
	}

	cb := atGitHub(t, h, b, stack.AliceLogin, res.Location())
	done := b.MustGet(cb)
	if done.Status != http.StatusOK || !strings.Contains(done.Text(), "Connected") || !strings.Contains(done.Text(), stack.AliceLogin) {
		t.Fatalf("callback answered %d: %s", done.Status, done.Text())
	}
	if !strings.Contains(done.Text(), "Go back to the app — you can close this window.") {
		t.Errorf("result page does not send the person back by words: %s", done.Text())
	}
	assertPrivate(t, done)

	// The cookie is deleted with the result page.
	if del := done.Cookie(callback.CookieName(h.Server().Env())); del == nil || del.MaxAge >= 0 {
		t.Errorf("result page does not delete the binding cookie: %v", done.Header["Set-Cookie"])
	}
	if b.BindingCookie() != nil {
		t.Error("browser still holds the binding cookie")
	}

	alice := h.Person(stack.AliceEmail)
	conns := h.Connections(stack.AliceEmail)
	if len(conns) != 1 {
		t.Fatalf("alice has %d connections, want 1", len(conns))
	}
	c := conns[0]
	if c.Subject != alice.ID || c.AccountName != stack.AliceLogin || c.AccountID != "2002" || c.Connector != h.Connector.Key || c.Status != store.ConnectionActive {
		t.Errorf("connection = %+v", c)
	}
	if n := count(t, h, "callback_states"); n != 0 {
		t.Errorf("%d callback state rows left; the callback must delete the row it reads", n)
	}

	// Tokens are sealed: the vault opens them, the database holds no trace of them.
	vault := &upstream.Vault{Store: h.Store(), Keyring: h.Server().Env().Keyring, Now: h.Clock.Now}
	tok, err := vault.Token(context.Background(), h.Connector, stack.ProjectKey, c.ID)
	if err != nil || !strings.HasPrefix(tok.AccessToken, "gho_") {
		t.Fatalf("vault token = %v, %v", tok, err)
	}
	if bytes.Contains(h.ConnectionBytes(), []byte(tok.AccessToken)) || bytes.Contains(h.FileBytes(), []byte(tok.AccessToken)) {
		t.Error("the upstream access token is stored in the clear")
	}

	rec := lastAudit(t, h, "connection.saved")
	if rec.Actor != alice.ID || rec.Details["owner"] != alice.ID || rec.Details["account"] != stack.AliceLogin || rec.Details["browser"] != "same" {
		t.Errorf("audit record = %+v; the person who started is actor and owner", rec)
	}
}

// The forwarded authorization URL: Mallory starts a connection and sends the authorization URL to Alice, who
// has approved the app at GitHub before, so GitHub sends her straight back to the callback.
// Alice is not signed in to Latchkey here (the victim need not even be a user): the
// page names Mallory's account, masked, and finishing needs a sign-in as that account. Signing
// in as herself gets Alice refused and ends the attempt; signed in already, she is refused
// outright (TestSignedInAsAnotherPersonIsRefused).
func TestAnotherBrowserStopsAtConfirmation(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	_, authURL := start(t, h, stack.MalloryEmail, stack.MalloryPassword)

	alice := h.Browser()
	cb := atGitHub(t, h, alice, stack.AliceLogin, authURL)
	res := alice.MustGet(cb)
	if res.Status != http.StatusOK {
		t.Fatalf("callback answered %d: %s", res.Status, res.Text())
	}
	want := strings.ReplaceAll(confirmText, "%s", "m***@example.com")
	if !strings.Contains(res.Text(), want) {
		t.Errorf("confirmation page text:\n%s\nwant it to contain:\n%s", res.Text(), want)
	}
	if _, _, ok := res.Form("Finish connecting"); ok || strings.Contains(res.Body, "confirm_token") {
		t.Error("a browser signed in as nobody is offered Finish connecting")
	}
	if !strings.Contains(res.Text(), "To finish, sign in as m***@example.com.") {
		t.Errorf("the page does not ask for a sign-in as the receiving account: %s", res.Text())
	}
	if strings.Contains(res.Body, stack.MalloryEmail) {
		t.Error("the confirmation page shows the full address of the person who started")
	}
	assertPrivate(t, res)

	if n := count(t, h, "connections"); n != 0 {
		t.Errorf("%d connections saved; nothing may be saved without the cookie", n)
	}
	if n := h.GitHub.ExchangeCalls(); n != 0 {
		t.Errorf("%d code exchanges; the code may not be exchanged without the cookie", n)
	}
	rec := lastAudit(t, h, "connection.confirmation_shown")
	if rec.Actor != h.Person(stack.MalloryEmail).ID || rec.Details["reason"] != "no_cookie" || rec.Details["sign_in"] != "required" {
		t.Errorf("audit record = %+v", rec)
	}

	// Alice follows the page's sign-in with her own account: she comes back to the callback and
	// is refused, and Mallory's attempt is over.
	assertNotYours(t, h, signInToFinish(t, alice, res, stack.AliceEmail, stack.AlicePassword))
}

// signInToFinish presses "Sign in to finish" on page, signs in as email on the project's
// sign-in page, and returns the page sign-in continues to.
func signInToFinish(t *testing.T, b *stack.Browser, page stack.Page, email, password string) stack.Page {
	t.Helper()
	action, fields, ok := page.Form("Sign in to finish")
	if !ok {
		t.Fatalf("no Sign in to finish: %d %s", page.Status, page.Text())
	}
	back := fields.Get("return_to")
	cb, _ := url.Parse(b.S.CallbackURL)
	if u, err := url.Parse(back); err != nil || u.Path != cb.Path || u.Host != "" {
		t.Fatalf("sign-in would come back to %q, want the callback", back)
	}
	form := b.MustGet(action + "?" + fields.Encode())
	if _, fields, ok = form.Form("Sign in"); !ok {
		t.Fatalf("no sign-in form: %d %s", form.Status, form.Text())
	}
	if fields.Get("return_to") != back {
		t.Fatalf("the sign-in form returns to %q, want %q", fields.Get("return_to"), back)
	}
	done := b.MustFillSignIn(form, email, password)
	if done.Status != http.StatusOK || done.Continue() == "" {
		t.Fatalf("sign-in answered %d: %s", done.Status, done.Text())
	}
	if got := done.Continue(); got != back {
		t.Fatalf("sign-in continues to %q, want %q", got, back)
	}
	return b.MustGet(back)
}

// The app path: the person starts in the app (one browser) and finishes in the system browser,
// which has no cookie; confirming there connects the account of the person who started.
func TestConfirmFinishesForThePersonWhoStarted(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	_, authURL := start(t, h, stack.AliceEmail, stack.AlicePassword)

	system := h.Browser()
	cb := atGitHub(t, h, system, stack.AliceLogin, authURL)
	first := system.MustGet(cb)
	if !strings.Contains(first.Text(), strings.ReplaceAll(confirmText, "%s", "a***@example.com")) {
		t.Fatalf("confirmation page: %s", first.Text())
	}
	// The system browser is signed in as nobody: Alice signs in there first, and nothing is
	// exchanged until she has.
	if h.GitHub.ExchangeCalls() != 0 {
		t.Fatal("exchanged before sign-in")
	}
	page := signInToFinish(t, system, first, stack.AliceEmail, stack.AlicePassword)
	if !strings.Contains(page.Text(), strings.ReplaceAll(confirmText, "%s", "a***@example.com")) || h.GitHub.ExchangeCalls() != 0 {
		t.Fatalf("confirmation page after sign-in: %s", page.Text())
	}
	action, fields, ok := page.Form("Finish connecting")
	if !ok {
		t.Fatal("no Finish connecting form")
	}
	if got, _ := url.Parse(action); got.Path != "/team/demo/connectors/default/github/callback" {
		t.Errorf("form posts to %q, want the callback", action)
	}
	done := system.MustPost(action, fields)
	if done.Status != http.StatusOK || !strings.Contains(done.Text(), "Connected") {
		t.Fatalf("confirm answered %d: %s", done.Status, done.Text())
	}
	assertPrivate(t, done)
	conns := h.Connections(stack.AliceEmail)
	if len(conns) != 1 || conns[0].AccountName != stack.AliceLogin {
		t.Fatalf("connections = %+v", conns)
	}
	rec := lastAudit(t, h, "connection.confirmed")
	if rec.Actor != h.Person(stack.AliceEmail).ID || rec.Details["browser"] != "confirmed" {
		t.Errorf("audit record = %+v", rec)
	}
	// The same confirmation cannot be used twice.
	again := system.MustPost(action, fields)
	if again.Status != http.StatusBadRequest || len(h.Connections(stack.AliceEmail)) != 1 || h.GitHub.ExchangeCalls() != 1 {
		t.Errorf("second confirm answered %d; exchanges %d", again.Status, h.GitHub.ExchangeCalls())
	}
}

const notYoursText = "This GitHub connection was started by the account m***@example.com, not by the account you are signed in with. It is not yours to finish. Nothing was saved, and this connection attempt has ended."

// assertNotYours checks the refusal a browser signed in as another person gets instead of the
// confirmation page, and that the attempt is over with nothing exchanged or saved.
func assertNotYours(t *testing.T, h *stack.Stack, res stack.Page) {
	t.Helper()
	if res.Status != http.StatusForbidden || !strings.Contains(res.Text(), notYoursText) {
		t.Errorf("answered %d: %s\nwant 403 and:\n%s", res.Status, res.Text(), notYoursText)
	}
	if _, _, ok := res.Form("Finish connecting"); ok || strings.Contains(res.Body, "confirm_token") {
		t.Error("the refusal offers a way to confirm")
	}
	if strings.Contains(res.Body, stack.MalloryEmail) {
		t.Error("the refusal shows the full address of the person who started")
	}
	assertPrivate(t, res)
	if n, x := count(t, h, "connections"), h.GitHub.ExchangeCalls(); n != 0 || x != 0 {
		t.Errorf("%d connections saved, %d code exchanges; want none", n, x)
	}
	if n := count(t, h, "callback_states"); n != 0 {
		t.Errorf("%d state rows left; the refusal must end the attempt", n)
	}
	rec := lastAudit(t, h, callback.ActionWrongPerson)
	if m := h.Person(stack.MalloryEmail).ID; rec.Actor != m || rec.Details["owner"] != m || rec.Details["signed_in"] != h.Person(stack.AliceEmail).ID {
		t.Errorf("audit record = %+v", rec)
	}
	if typ, ok := events.TypeOf(rec.Action); !ok || typ != events.CallbackOtherPerson {
		t.Errorf("%s is not reported as the security event %s", rec.Action, events.CallbackOtherPerson)
	}
}

// A variant of the forwarded authorization URL: Mallory forwards her authorization URL to Alice, who is signed in to the same
// project as herself. That browser cannot be Mallory's app path, so it is refused rather than
// offered Connect, and the attempt ends so its code finishes nowhere else.
func TestSignedInAsAnotherPersonIsRefused(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	_, authURL := start(t, h, stack.MalloryEmail, stack.MalloryPassword)
	alice := h.Browser()
	alice.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	cb := atGitHub(t, h, alice, stack.AliceLogin, authURL)

	assertNotYours(t, h, alice.MustGet(cb))
	if slices.Contains(h.AuditActions(), "connection.confirmation_shown") {
		t.Error("recorded a confirmation page that was not shown")
	}
	// The same address answers as any used state does, in her browser and in one signed in as
	// nobody (where it would otherwise offer Connect).
	for name, b := range map[string]*stack.Browser{"alice": alice, "no session": h.Browser()} {
		res := b.MustGet(cb)
		if res.Status != http.StatusBadRequest || !strings.Contains(res.Text(), "expired or has already been used") {
			t.Errorf("%s, again: %d %s", name, res.Status, res.Text())
		}
	}
	if n, x := count(t, h, "connections"), h.GitHub.ExchangeCalls(); n != 0 || x != 0 {
		t.Errorf("%d connections saved, %d code exchanges after the replays", n, x)
	}
}

// A genuine confirmation page, rendered for Mallory in her own signed-in browser or in a browser
// where Alice has since signed in over Mallory's session, does not let a browser signed in as
// Alice finish Mallory's connection: it is refused and the attempt ends.
func TestSignedInAsAnotherPersonCannotConfirm(t *testing.T) {
	for _, where := range []string{"rendered in the same browser", "rendered elsewhere"} {
		t.Run(where, func(t *testing.T) {
			h := stack.New(t, stack.Options{Audit: true})
			_, authURL := start(t, h, stack.MalloryEmail, stack.MalloryPassword)
			renderer := h.Browser()
			renderer.MustSignIn(stack.MalloryEmail, stack.MalloryPassword)
			cb := atGitHub(t, h, renderer, stack.AliceLogin, authURL)
			action, fields, ok := renderer.MustGet(cb).Form("Finish connecting")
			if !ok {
				t.Fatal("no confirmation page for the person who started")
			}
			alice := renderer
			if where == "rendered elsewhere" {
				alice = h.Browser()
			}
			alice.MustSignIn(stack.AliceEmail, stack.AlicePassword)
			assertNotYours(t, h, alice.MustPost(action, fields))
			// The token was genuine: without the refusal it would finish. The attempt is over.
			if res := renderer.MustPost(action, fields); res.Status != http.StatusBadRequest || count(t, h, "connections") != 0 || h.GitHub.ExchangeCalls() != 0 {
				t.Errorf("the same confirmation afterwards: %d %s", res.Status, res.Text())
			}
		})
	}
}

// The confirmation form is offered only to a browser signed in recently as the person who
// started (an app's system browser where they are signed in too). A browser signed in only to
// another project, or as the person but not recently, is asked to sign in (again) first and
// then finishes.
func TestConfirmationNeedsTheOwnerSignedInRecently(t *testing.T) {
	for _, session := range []string{"the person who started", "another project", "the person who started, not recently"} {
		t.Run(session, func(t *testing.T) {
			h := stack.New(t, stack.Options{Audit: true})
			other := *h.Project
			other.Key, other.Name, other.Issuer = "team/other", "other", h.Front.URL+"/team/other"
			h.Holder().Store(&config.Snapshot{Projects: map[string]*config.Project{h.Project.Key: h.Project, other.Key: &other}, Version: 2})

			system := h.Browser()
			switch session {
			case "another project":
				signInAt(t, system, other.Issuer, stack.MalloryEmail, stack.MalloryPassword)
			case "the person who started, not recently":
				system.MustSignIn(stack.AliceEmail, stack.AlicePassword)
				h.Clock.Advance(h.Project.Lifetimes.RecentSignIn + time.Minute)
			default:
				system.MustSignIn(stack.AliceEmail, stack.AlicePassword)
			}
			_, authURL := start(t, h, stack.AliceEmail, stack.AlicePassword)
			page := system.MustGet(atGitHub(t, h, system, stack.AliceLogin, authURL))
			if page.Status != http.StatusOK || !strings.Contains(page.Text(), strings.ReplaceAll(confirmText, "%s", "a***@example.com")) {
				t.Fatalf("answered %d: %s", page.Status, page.Text())
			}
			if session != "the person who started" {
				if _, _, ok := page.Form("Finish connecting"); ok {
					t.Fatal("offered Finish connecting without a recent sign-in as the person")
				}
				_, f, _ := page.Form("Sign in to finish")
				if again := f.Get("prompt") == "login"; again != (session != "another project") {
					t.Errorf("sign-in fields %v", f)
				}
				page = signInToFinish(t, system, page, stack.AliceEmail, stack.AlicePassword)
			}
			action, fields, ok := page.Form("Finish connecting")
			if !ok {
				t.Fatalf("no Finish connecting: %d %s", page.Status, page.Text())
			}
			if res := system.MustPost(action, fields); res.Status != http.StatusOK || !strings.Contains(res.Text(), "Connected") {
				t.Fatalf("confirm answered %d: %s", res.Status, res.Text())
			}
			if conns := h.Connections(stack.AliceEmail); len(conns) != 1 || conns[0].AccountName != stack.AliceLogin {
				t.Errorf("connections = %+v", conns)
			}
		})
	}
}

// signInAt signs b in to the project at issuer through its sign-in page.
func signInAt(t *testing.T, b *stack.Browser, issuer, email, password string) {
	t.Helper()
	action, fields, ok := b.MustGet(issuer + "/sign-in").Form("Sign in")
	if !ok {
		t.Fatalf("no sign-in form at %s", issuer)
	}
	fields.Set("username", email)
	fields.Set("password", password)
	if res := b.MustPost(action, fields); res.Status != http.StatusOK || !strings.Contains(res.Body, "You are signed in") {
		t.Fatalf("sign-in at %s: %d %s", issuer, res.Status, res.Text())
	}
}

// sessionsDown is the store with sessions unreadable while down is set.
type sessionsDown struct {
	store.Store
	down *atomic.Bool
}

func (s sessionsDown) GetSession(ctx context.Context, idHash []byte, now time.Time) (store.Session, error) {
	if s.down.Load() {
		return store.Session{}, errors.New("connection refused")
	}
	return s.Store.GetSession(ctx, idHash, now)
}

// When the store cannot say who is signed in, the callback neither offers nor accepts
// confirmation: it answers the pages' 503 and changes nothing, and works again afterwards.
func TestSessionStoreOutageIsNotAConfirmation(t *testing.T) {
	down := &atomic.Bool{}
	h := stack.New(t, stack.Options{Audit: true, Store: func(st store.Store) store.Store { return sessionsDown{Store: st, down: down} }})

	_, authURL := start(t, h, stack.MalloryEmail, stack.MalloryPassword)
	mallory := h.Browser()
	mallory.MustSignIn(stack.MalloryEmail, stack.MalloryPassword)
	alice := h.Browser()
	cb := atGitHub(t, h, alice, stack.AliceLogin, authURL)
	action, fields, ok := mallory.MustGet(cb).Form("Finish connecting")
	if !ok {
		t.Fatal("no confirmation page before the outage")
	}
	alice.MustSignIn(stack.AliceEmail, stack.AlicePassword)

	down.Store(true)
	for name, res := range map[string]stack.Page{
		"GET": alice.MustGet(cb), "POST": alice.MustPost(action, fields), "POST by the person who started": mallory.MustPost(action, fields),
	} {
		if res.Status != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" || !strings.Contains(res.Text(), "Try again in a moment") {
			t.Errorf("%s during the outage: %d %s", name, res.Status, res.Text())
		}
		if _, _, ok := res.Form("Finish connecting"); ok {
			t.Errorf("%s during the outage offers Connect", name)
		}
		assertPrivate(t, res)
	}
	if n, x := count(t, h, "connections"), h.GitHub.ExchangeCalls(); n != 0 || x != 0 {
		t.Fatalf("%d connections saved, %d code exchanges during the outage", n, x)
	}
	if n := count(t, h, "callback_states"); n != 1 {
		t.Fatalf("%d state rows during the outage; it must change nothing", n)
	}
	down.Store(false)
	assertNotYours(t, h, alice.MustGet(cb))
}

func TestStaleConfirmationTokenIsRefused(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	_, authURL := start(t, h, stack.AliceEmail, stack.AlicePassword)
	system := h.Browser()
	system.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	cb := atGitHub(t, h, system, stack.AliceLogin, authURL)

	_, first, _ := system.MustGet(cb).Form("Finish connecting")
	_, second, _ := system.MustGet(cb).Form("Finish connecting")
	if first.Get("confirm_token") == second.Get("confirm_token") {
		t.Fatal("rendering again did not issue a new token")
	}
	res := system.MustPost(h.CallbackURL, first)
	if res.Status != http.StatusForbidden || !strings.Contains(res.Text(), "Nothing was connected") {
		t.Errorf("stale token answered %d: %s", res.Status, res.Text())
	}
	assertPrivate(t, res)
	if n := count(t, h, "connections"); n != 0 || h.GitHub.ExchangeCalls() != 0 {
		t.Fatalf("stale token saved %d connections, %d exchanges", n, h.GitHub.ExchangeCalls())
	}
	if rec := lastAudit(t, h, "connection.confirmation_refused"); rec.Details["reason"] != "bad_token" {
		t.Errorf("audit record = %+v", rec)
	}
	// The refusal does not burn the attempt: the current page still finishes it.
	if res := system.MustPost(h.CallbackURL, second); res.Status != http.StatusOK || len(h.Connections(stack.AliceEmail)) != 1 {
		t.Errorf("current token answered %d: %s", res.Status, res.Text())
	}
}

// The attacker knows the state and the callback address and can make their own site submit the
// confirmation POST; without the token from the page rendered in the victim's browser it fails.
func TestCrossSitePostIsRefused(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	_, authURL := start(t, h, stack.MalloryEmail, stack.MalloryPassword)
	victim := h.Browser()
	cb := atGitHub(t, h, victim, stack.AliceLogin, authURL)
	victim.MustGet(cb)
	// A genuine token for the victim's code, as only a browser signed in as Mallory gets it.
	mallory := h.Browser()
	mallory.MustSignIn(stack.MalloryEmail, stack.MalloryPassword)
	_, fields, ok := mallory.MustGet(cb).Form("Finish connecting")
	if !ok {
		t.Fatal("no confirmation page")
	}
	u, _ := url.Parse(cb)
	forged := url.Values{"code": {u.Query().Get("code")}, "state": {u.Query().Get("state")}}

	cases := []struct {
		name   string
		form   url.Values
		origin string
		says   string
	}{
		// Refused by cross-origin protection before the handler runs.
		{"auto-submitted from another site", forged, "http://attacker.example", "came from another site"},
		{"another site, even with the token", fields, "http://attacker.example", "came from another site"},
		// Same-origin (or a client sending no Origin): refused for want of the token.
		{"no token", forged, "", "did not come from the page we showed"},
		{"empty token", withToken(forged, ""), "", "did not come from the page we showed"},
		{"made-up token", withToken(forged, "lk_guess"), "", "did not come from the page we showed"},
		{"token for another code", withCode(fields, "other-code"), "", "did not come from the page we showed"},
		// The genuine token in a browser signed in as nobody: a sign-in as Mallory first.
		{"the genuine token, signed in as nobody", fields, "", "To finish, sign in as m***@example.com."},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := victim.MustPostFrom(h.CallbackURL, tc.form, tc.origin)
			if res.Status != http.StatusForbidden || !strings.Contains(res.Text(), tc.says) {
				t.Errorf("answered %d: %s", res.Status, res.Text())
			}
			if n := count(t, h, "connections"); n != 0 || h.GitHub.ExchangeCalls() != 0 {
				t.Fatalf("saved %d connections, %d exchanges", n, h.GitHub.ExchangeCalls())
			}
			if n := count(t, h, "callback_states"); n != 1 {
				t.Fatalf("%d state rows; a refused POST must leave the attempt alone", n)
			}
		})
	}
}

func withToken(v url.Values, tok string) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = vs
	}
	out.Set("confirm_token", tok)
	return out
}

func withCode(v url.Values, code string) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = vs
	}
	out.Set("code", code)
	return out
}

func TestExpiredStateIsRefused(t *testing.T) {
	t.Run("same browser", func(t *testing.T) {
		h := stack.New(t, stack.Options{Audit: true})
		b, authURL := start(t, h, stack.AliceEmail, stack.AlicePassword)
		cb := atGitHub(t, h, b, stack.AliceLogin, authURL)
		h.Clock.Advance(11 * time.Minute)
		res := b.MustGet(cb)
		if res.Status != http.StatusBadRequest || !strings.Contains(res.Text(), "expired or has already been used") {
			t.Errorf("answered %d: %s", res.Status, res.Text())
		}
		assertPrivate(t, res)
		if count(t, h, "connections") != 0 || h.GitHub.ExchangeCalls() != 0 {
			t.Error("an expired state saved something")
		}
	})
	t.Run("confirmation", func(t *testing.T) {
		h := stack.New(t, stack.Options{Audit: true})
		_, authURL := start(t, h, stack.AliceEmail, stack.AlicePassword)
		system := h.Browser()
		system.MustSignIn(stack.AliceEmail, stack.AlicePassword)
		cb := atGitHub(t, h, system, stack.AliceLogin, authURL)
		action, fields, _ := system.MustGet(cb).Form("Finish connecting")
		h.Clock.Advance(10*time.Minute + time.Second)
		res := system.MustPost(action, fields)
		if res.Status != http.StatusBadRequest || count(t, h, "connections") != 0 || h.GitHub.ExchangeCalls() != 0 {
			t.Errorf("answered %d: %s", res.Status, res.Text())
		}
	})
	t.Run("just inside ten minutes", func(t *testing.T) {
		h := stack.New(t, stack.Options{Audit: true})
		b, authURL := start(t, h, stack.AliceEmail, stack.AlicePassword)
		cb := atGitHub(t, h, b, stack.AliceLogin, authURL)
		h.Clock.Advance(9*time.Minute + 59*time.Second)
		if res := b.MustGet(cb); res.Status != http.StatusOK || len(h.Connections(stack.AliceEmail)) != 1 {
			t.Errorf("answered %d: %s", res.Status, res.Text())
		}
	})
}

func TestReplayedCallbackIsRefused(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	b, authURL := start(t, h, stack.AliceEmail, stack.AlicePassword)
	binding := *b.BindingCookie()
	cb := atGitHub(t, h, b, stack.AliceLogin, authURL)
	if res := b.MustGet(cb); res.Status != http.StatusOK {
		t.Fatalf("first callback answered %d", res.Status)
	}
	// The same browser, with the cookie put back, and a different browser.
	cbURL, _ := url.Parse(h.CallbackURL)
	b.Jar.SetCookies(cbURL, []*http.Cookie{&binding})
	for name, br := range map[string]*stack.Browser{"same browser": b, "other browser": h.Browser()} {
		res := br.MustGet(cb)
		if res.Status != http.StatusBadRequest || strings.Contains(res.Text(), "Finish connecting") {
			t.Errorf("%s: replay answered %d: %s", name, res.Status, res.Text())
		}
	}
	if n := count(t, h, "connections"); n != 1 || h.GitHub.ExchangeCalls() != 1 {
		t.Errorf("after replays: %d connections, %d exchanges; want 1 and 1", n, h.GitHub.ExchangeCalls())
	}
}

// A redirect_uri in the callback (or in the Connect form) changes nothing: the code is
// exchanged for the fixed callback, which the fake GitHub checks exactly, as GitHub does.
func TestForeignRedirectURIChangesNothing(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})

	// Control: the fake GitHub does refuse a code exchanged for another redirect_uri.
	{
		b, authURL := start(t, h, stack.MalloryEmail, stack.MalloryPassword)
		cb, _ := url.Parse(atGitHub(t, h, b, stack.MalloryLogin, authURL))
		moved := *h.Connector
		moved.CallbackURL = "http://attacker.example/steal"
		_, _, err := upstream.Exchange(context.Background(), nil, &moved, cb.Query().Get("code"), "")
		if err == nil || !strings.Contains(err.Error(), "redirect_uri_mismatch") {
			t.Fatalf("the fake GitHub accepted another redirect_uri (err %v); this test would prove nothing", err)
		}
	}

	b := h.Browser()
	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	acct := b.Account()
	action, fields, _ := acct.Form("Connect GitHub")
	fields.Set("redirect_uri", "http://attacker.example/steal")
	res := b.MustPost(action, fields)
	au, _ := url.Parse(res.Location())
	if got := au.Query().Get("redirect_uri"); got != h.CallbackURL {
		t.Fatalf("authorization URL redirect_uri = %q, want the fixed callback", got)
	}
	cb := atGitHub(t, h, b, stack.AliceLogin, res.Location())
	done := b.MustGet(cb + "&redirect_uri=" + url.QueryEscape("http://attacker.example/steal"))
	if done.Status != http.StatusOK || !strings.Contains(done.Text(), "Connected") {
		t.Fatalf("callback answered %d: %s", done.Status, done.Text())
	}
	assertPrivate(t, done)
	if strings.Contains(done.Body, "attacker.example") {
		t.Error("the result page mentions the foreign address")
	}
	if conns := h.Connections(stack.AliceEmail); len(conns) != 1 || conns[0].AccountName != stack.AliceLogin {
		t.Errorf("connections = %+v", conns)
	}
}

func TestServiceErrorEndsTheAttempt(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	b, authURL := start(t, h, stack.AliceEmail, stack.AlicePassword)
	// Alice has not approved the app: GitHub shows its page and she presses Cancel.
	b.SignInGitHub(stack.AliceLogin)
	approve := b.MustGet(authURL)
	action, fields, ok := approve.Form("Cancel")
	if !ok {
		t.Fatalf("no approval page at GitHub: %s", approve.Text())
	}
	fields.Set("authorize", "0")
	back := b.MustPost(h.GitHubURL+action, fields)
	if back.Status != http.StatusFound || !strings.Contains(back.Location(), "error=access_denied") {
		t.Fatalf("GitHub answered %d %q", back.Status, back.Location())
	}
	res := b.MustGet(back.Location())
	if res.Status != http.StatusOK || !strings.Contains(res.Text(), "Nothing was connected") || !strings.Contains(res.Text(), "GitHub says the connection was not allowed") {
		t.Errorf("answered %d: %s", res.Status, res.Text())
	}
	if strings.Contains(res.Text(), "denied your application") {
		t.Error("the page shows the service's error_description")
	}
	assertPrivate(t, res)
	if count(t, h, "callback_states") != 0 || count(t, h, "connections") != 0 {
		t.Error("the attempt did not end cleanly")
	}
	if rec := lastAudit(t, h, "connection.cancelled"); rec.Details["error"] != "access_denied" || rec.Actor != h.Person(stack.AliceEmail).ID {
		t.Errorf("audit record = %+v", rec)
	}
	// An error for a state nobody knows says the same and changes nothing.
	odd := b.MustGet(h.CallbackURL + "?error=access_denied&state=unknown&error_description=" + url.QueryEscape("Call +1 555 0100 to restore access"))
	if odd.Status != http.StatusOK || strings.Contains(odd.Text(), "555") {
		t.Errorf("unknown-state error answered %d: %s", odd.Status, odd.Text())
	}
}

func TestBadCallbacksGetAClearPage(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	b, authURL := start(t, h, stack.AliceEmail, stack.AlicePassword)
	cb, _ := url.Parse(atGitHub(t, h, b, stack.AliceLogin, authURL))
	state, code := cb.Query().Get("state"), cb.Query().Get("code")
	cases := map[string]string{
		"unknown state":  "?state=nope&code=" + code,
		"missing code":   "?state=" + url.QueryEscape(state),
		"missing state":  "?code=" + code,
		"repeated state": "?state=" + url.QueryEscape(state) + "&state=x&code=" + code,
		"nothing":        "",
	}
	for name, q := range cases {
		t.Run(name, func(t *testing.T) {
			res := b.MustGet(h.CallbackURL + q)
			if res.Status != http.StatusBadRequest || !strings.Contains(res.Text(), "This connection cannot be finished") {
				t.Errorf("answered %d: %s", res.Status, res.Text())
			}
			assertPrivate(t, res)
		})
	}
	if count(t, h, "connections") != 0 || count(t, h, "callback_states") != 1 || h.GitHub.ExchangeCalls() != 0 {
		t.Error("a bad callback changed something")
	}
	// A code GitHub does not know ends the attempt with the service's refusal, not a 500.
	res := b.MustGet(h.CallbackURL + "?state=" + url.QueryEscape(state) + "&code=made-up")
	if res.Status != http.StatusBadRequest || !strings.Contains(res.Text(), "GitHub did not complete the connection") {
		t.Errorf("bad code answered %d: %s", res.Status, res.Text())
	}
}

// The binding cookie holds one authorization at a time: if you start two connections back to
// back in the same browser, the earlier one finishes through the confirmation page (decision
// 0010).
func TestTwoConnectionsBackToBack(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	b := h.Browser()
	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	first := b.PressOnAccount("Connect GitHub").Location()
	second := b.PressOnAccount("Connect GitHub").Location()
	cb1 := atGitHub(t, h, b, stack.AliceLogin, first)
	cb2 := atGitHub(t, h, b, stack.AliceLogin, second)

	p1 := b.MustGet(cb1)
	if !strings.Contains(p1.Text(), "Finish this connection?") || count(t, h, "connections") != 0 {
		t.Fatalf("earlier connection: %d %s", p1.Status, p1.Text())
	}
	if rec := lastAudit(t, h, "connection.confirmation_shown"); rec.Details["reason"] != "other_cookie" {
		t.Errorf("audit record = %+v", rec)
	}
	if p2 := b.MustGet(cb2); !strings.Contains(p2.Text(), "Connected") {
		t.Fatalf("later connection: %d %s", p2.Status, p2.Text())
	}
	action, fields, _ := p1.Form("Finish connecting")
	if res := b.MustPost(action, fields); res.Status != http.StatusOK {
		t.Fatalf("confirming the earlier one answered %d: %s", res.Status, res.Text())
	}
	// Same GitHub account twice: one connection, updated in place.
	if conns := h.Connections(stack.AliceEmail); len(conns) != 1 {
		t.Errorf("connections = %+v", conns)
	}
}

func TestHooksRunWithTheStateRow(t *testing.T) {
	type call struct {
		st   store.CallbackState
		conn store.Connection
	}
	var calls []call
	hook := func(ctx context.Context, p *config.Project, st store.CallbackState, conn store.Connection) error {
		calls = append(calls, call{st, conn})
		return nil
	}
	h := stack.New(t, stack.Options{Audit: true, Hooks: []callback.Hook{hook}})
	b := h.Browser()
	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	alice := h.Person(stack.AliceEmail)

	// A connect link starts the connection with its link id (as webhook/links does).
	rec := httptest.NewRecorder()
	authURL, err := callback.Begin(rec, httptest.NewRequest(http.MethodPost, h.Issuer+"/account/services/link/x", nil),
		h.Server().Env(), h.Store(), h.Project, h.Connector, alice.ID, callback.PurposeConnect, "link-123")
	if err != nil {
		t.Fatal(err)
	}
	cbURL, _ := url.Parse(h.CallbackURL)
	b.Jar.SetCookies(cbURL, rec.Result().Cookies())
	res := b.MustGet(atGitHub(t, h, b, stack.AliceLogin, authURL))
	if res.Status != http.StatusOK || !strings.Contains(res.Text(), "Go back to your agent") {
		t.Fatalf("callback answered %d: %s", res.Status, res.Text())
	}
	if len(calls) != 1 {
		t.Fatalf("hook ran %d times", len(calls))
	}
	c := calls[0]
	if c.st.LinkID != "link-123" || c.st.Purpose != callback.PurposeConnect || c.st.Subject != alice.ID || c.conn.AccountName != stack.AliceLogin || c.conn.ID == "" {
		t.Errorf("hook got %+v", c)
	}
	if rec := lastAudit(t, h, "connection.saved"); rec.Details["link_id"] != "link-123" {
		t.Errorf("audit record = %+v", rec)
	}
}

func TestBindingCookieIsSecureOverHTTPS(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	env := *h.Server().Env()
	pub := *env.PublicURL
	pub.Scheme = "https"
	env.PublicURL = &pub
	b := h.Browser()
	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	rec := httptest.NewRecorder()
	if _, err := callback.Begin(rec, httptest.NewRequest(http.MethodPost, "/", nil), &env, h.Store(), h.Project, h.Connector, h.Person(stack.AliceEmail).ID, callback.PurposeConnect, ""); err != nil {
		t.Fatal(err)
	}
	cookies := rec.Result().Cookies()
	if len(cookies) != 1 {
		t.Fatalf("cookies = %v", cookies)
	}
	c := cookies[0]
	// __Host-: no sibling subdomain can plant a binding value (test/attacks).
	if c.Name != "__Host-latchkey_connect" || !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.Path != "/" || c.Domain != "" {
		t.Errorf("cookie over https = %+v", c)
	}
}

func TestRefreshableTokensAreSealed(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true, AccessTokenTTL: 8 * time.Hour})
	b, authURL := start(t, h, stack.AliceEmail, stack.AlicePassword)
	if res := b.MustGet(atGitHub(t, h, b, stack.AliceLogin, authURL)); res.Status != http.StatusOK {
		t.Fatalf("callback answered %d", res.Status)
	}
	conns := h.Connections(stack.AliceEmail)
	if len(conns) != 1 || len(conns[0].RefreshToken) == 0 || conns[0].Expiry == nil {
		t.Fatalf("connections = %+v", conns)
	}
	// GitHub's token prefixes never appear in what is stored.
	for _, prefix := range []string{"ghu_", "ghr_", "gho_"} {
		if bytes.Contains(h.ConnectionBytes(), []byte(prefix)) || bytes.Contains(h.FileBytes(), []byte(prefix)) {
			t.Errorf("a %s token is stored in the clear", prefix)
		}
	}
}

func TestMask(t *testing.T) {
	for in, want := range map[string]string{
		"alice@example.com":   "a***@example.com",
		"Ünal@example.org":    "Ü***@example.org",
		"m@x.io":              "m***@x.io",
		"Mallory":             "M***",
		"":                    "***",
		"odd@":                "o***",
		"first.last@sub.a.bc": "f***@sub.a.bc",
	} {
		if got := callback.Mask(in); got != want {
			t.Errorf("Mask(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAuditTrail(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	_, authURL := start(t, h, stack.MalloryEmail, stack.MalloryPassword)
	victim := h.Browser()
	cb := atGitHub(t, h, victim, stack.AliceLogin, authURL)
	victim.MustGet(cb)
	u, _ := url.Parse(cb)
	victim.MustPost(h.CallbackURL, url.Values{"code": {u.Query().Get("code")}, "state": {u.Query().Get("state")}, "confirm_token": {"wrong"}})
	// In the audit log and at the project's event sink.
	h.Trail("connection.started", "connection.confirmation_shown", "connection.confirmation_refused")
	mallory := h.Person(stack.MalloryEmail).ID
	for _, r := range h.Audit() {
		if strings.HasPrefix(r.Action, "connection.") && r.Actor != mallory {
			t.Errorf("%s has actor %q; the person who started is the actor", r.Action, r.Actor)
		}
	}
}

// Link checkers and previews send HEAD; it must neither finish nor use up the attempt.
func TestHeadChangesNothing(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	b, authURL := start(t, h, stack.AliceEmail, stack.AlicePassword)
	cb := atGitHub(t, h, b, stack.AliceLogin, authURL)
	req, _ := http.NewRequest(http.MethodHead, cb, nil)
	if res := b.MustDo(req); res.Status != http.StatusOK {
		t.Errorf("HEAD answered %d", res.Status)
	}
	if count(t, h, "callback_states") != 1 || count(t, h, "connections") != 0 || h.GitHub.ExchangeCalls() != 0 {
		t.Fatal("HEAD changed something")
	}
	if res := b.MustGet(cb); res.Status != http.StatusOK || len(h.Connections(stack.AliceEmail)) != 1 {
		t.Errorf("GET after HEAD answered %d: %s", res.Status, res.Text())
	}
}

// Where the project requires a phishing-resistant sign-in, finishing a connection in a browser
// that did not start it needs a passkey sign-in there, as starting one does. The attacker has
// Alice's password (phished) and the callback address of an attempt Alice started with her
// passkey: signed in with the password, the browser is shown no form, and a confirmation
// posted with a token that browser was given under a passkey sign-in is refused too. Nothing
// is exchanged or saved until a passkey sign-in.
func TestConfirmationNeedsAPasskeyWhereRequired(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true, PublicHost: "localhost"})
	h.Project.SignIn.RequirePhishingResistant = true
	alice := h.Browser()
	alice.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	alice.SignInWithPasskey(stack.AliceEmail)
	res := alice.PressOnAccount("Connect GitHub")
	if res.Status != http.StatusSeeOther || !strings.HasPrefix(res.Location(), h.GitHubURL+"/login/oauth/authorize?") {
		t.Fatalf("Connect answered %d %q", res.Status, res.Location())
	}
	other := h.Browser()
	cb := atGitHub(t, h, other, stack.AliceLogin, res.Location())

	other.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	page := other.MustGet(cb)
	if _, _, ok := page.Form("Finish connecting"); ok || strings.Contains(page.Body, "confirm_token") {
		t.Fatalf("a password sign-in was offered the confirmation: %s", page.Text())
	}
	_, f, ok := page.Form("Sign in with a passkey")
	if !ok || f.Get("passkey") != "1" || f.Get("prompt") != "login" || f.Get("return_to") == "" {
		t.Fatalf("no passkey sign-in offered (%v): %s", f, page.Text())
	}
	if rec := lastAudit(t, h, "connection.confirmation_shown"); rec.Details["sign_in"] != "passkey_required" {
		t.Errorf("audit record = %+v", rec)
	}

	// A token the browser got under a passkey sign-in, posted after a password sign-in.
	other.SignInWithPasskey(stack.AliceEmail)
	action, fields, ok := other.MustGet(cb).Form("Finish connecting")
	if !ok {
		t.Fatal("no Finish connecting after a passkey sign-in")
	}
	other.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	refused := other.MustPost(action, fields)
	if refused.Status != http.StatusForbidden || strings.Contains(refused.Text(), "Connected") {
		t.Fatalf("confirmation on a password sign-in answered %d: %s", refused.Status, refused.Text())
	}
	if _, _, ok := refused.Form("Sign in with a passkey"); !ok {
		t.Errorf("the refusal offers no passkey sign-in: %s", refused.Text())
	}
	if n, x := count(t, h, "connections"), h.GitHub.ExchangeCalls(); n != 0 || x != 0 {
		t.Fatalf("%d connections saved, %d code exchanges on a password sign-in; want none", n, x)
	}

	// With a passkey sign-in the same token finishes it.
	other.SignInWithPasskey(stack.AliceEmail)
	if done := other.MustPost(action, fields); done.Status != http.StatusOK || !strings.Contains(done.Text(), "Connected") {
		t.Fatalf("confirmation on a passkey sign-in answered %d: %s", done.Status, done.Text())
	}
	if conns := h.Connections(stack.AliceEmail); len(conns) != 1 || conns[0].AccountName != stack.AliceLogin {
		t.Fatalf("connections = %+v", conns)
	}
}

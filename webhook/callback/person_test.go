package callback_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/callback"
	"latchkey.dev/latchkey/webhook/signin"
)

// dropSession forgets b's sign-in to the project without signing out, as a session that ended
// on its own (expired, or its cookie cleared) does: the attempt and the binding cookie stay.
func dropSession(t *testing.T, h *stack.Stack, b *stack.Browser) {
	t.Helper()
	u, _ := url.Parse(h.Issuer + "/")
	name := signin.CookieName(h.Server().Env(), h.Project, "session")
	b.Jar.SetCookies(u, []*http.Cookie{{Name: name, Path: "/team/demo/", MaxAge: -1}})
	if res := b.MustGet(h.Issuer + "/sign-out"); strings.Contains(res.Text(), "Sign out of") {
		t.Fatal("still signed in")
	}
}

func assertNothingSaved(t *testing.T, h *stack.Stack, states int) {
	t.Helper()
	if n, x := count(t, h, "connections"), h.GitHub.ExchangeCalls(); n != 0 || x != 0 {
		t.Fatalf("%d connections saved, %d code exchanges; want none", n, x)
	}
	if n := count(t, h, "callback_states"); n != states {
		t.Fatalf("%d state rows, want %d", n, states)
	}
}

// Every way a connection is saved checks, as it is saved, that the browser is signed in as the
// person the attempt was started for: the starting browser with its binding cookie, and the
// confirmation POST from another browser. Signed in as nobody, nothing is exchanged and the
// page asks for a sign-in as that person; signed in as someone else, the attempt ends with a
// refusal and a connection.wrong_person record naming both; signed in as that person, it
// finishes.
func TestEveryPathChecksThePerson(t *testing.T) {
	for _, path := range []string{"binding cookie", "confirmation POST"} {
		for _, who := range []string{"signed in as nobody", "signed in as another person", "signed in as the person"} {
			t.Run(path+"/"+who, func(t *testing.T) {
				h := stack.New(t, stack.Options{Audit: true})
				b, authURL := start(t, h, stack.AliceEmail, stack.AlicePassword)
				if path == "confirmation POST" {
					// The app path: another browser, signed in as Alice, gets the form.
					b = h.Browser()
					b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
				}
				// Whoever approves at GitHub: the account the browser is signed in to there.
				login := stack.AliceLogin
				if who == "signed in as another person" {
					login = stack.MalloryLogin
				}
				cb := atGitHub(t, h, b, login, authURL)
				var action string
				var fields url.Values
				if path == "confirmation POST" {
					var ok bool
					if action, fields, ok = b.MustGet(cb).Form("Finish connecting"); !ok {
						t.Fatal("no confirmation page for the person who started")
					}
				}
				switch who {
				case "signed in as nobody":
					dropSession(t, h, b)
				case "signed in as another person":
					// Over Alice's session, without signing out ("Sign in with another account").
					b.MustSignIn(stack.MalloryEmail, stack.MalloryPassword)
				}
				answer := func() stack.Page {
					if path == "confirmation POST" {
						return b.MustPost(action, fields)
					}
					return b.MustGet(cb)
				}
				res := answer()
				assertPrivate(t, res)

				switch who {
				case "signed in as nobody":
					want := http.StatusOK
					if path == "confirmation POST" {
						want = http.StatusForbidden
					}
					if res.Status != want || !strings.Contains(res.Text(), "To finish, sign in as a***@example.com.") || strings.Contains(res.Body, "confirm_token") {
						t.Fatalf("answered %d: %s", res.Status, res.Text())
					}
					assertNothingSaved(t, h, 1)
					// Signing in as Alice comes back and finishes (the cookie at once, the app
					// path through the confirmation page with a new token).
					page := signInToFinish(t, b, res, stack.AliceEmail, stack.AlicePassword)
					if path == "confirmation POST" {
						a, f, ok := page.Form("Finish connecting")
						if !ok {
							t.Fatalf("no confirmation after sign-in: %s", page.Text())
						}
						page = b.MustPost(a, f)
					}
					if page.Status != http.StatusOK || !strings.Contains(page.Text(), "Your GitHub account "+stack.AliceLogin+" is now connected.") {
						t.Fatalf("after signing in: %d %s", page.Status, page.Text())
					}
				case "signed in as another person":
					want := "This GitHub connection was started by the account a***@example.com, not by the account you are signed in with. It is not yours to finish. Nothing was saved, and this connection attempt has ended."
					if res.Status != http.StatusForbidden || !strings.Contains(res.Text(), want) {
						t.Fatalf("answered %d: %s", res.Status, res.Text())
					}
					assertNothingSaved(t, h, 0)
					rec := lastAudit(t, h, callback.ActionWrongPerson)
					alice, mallory := h.Person(stack.AliceEmail).ID, h.Person(stack.MalloryEmail).ID
					browser := "same"
					if path == "confirmation POST" {
						browser = "other"
					}
					if rec.Actor != alice || rec.Details["owner"] != alice || rec.Details["signed_in"] != mallory || rec.Details["browser"] != browser {
						t.Errorf("audit record = %+v", rec)
					}
					if path == "binding cookie" && b.BindingCookie() != nil {
						t.Error("the refusal left the binding cookie")
					}
					if again := answer(); again.Status != http.StatusBadRequest {
						t.Errorf("again: %d %s", again.Status, again.Text())
					}
					assertNothingSaved(t, h, 0)
				default:
					if res.Status != http.StatusOK || !strings.Contains(res.Text(), "Your GitHub account "+stack.AliceLogin+" is now connected.") {
						t.Fatalf("answered %d: %s", res.Status, res.Text())
					}
				}
				conns := h.Connections(stack.AliceEmail)
				if who == "signed in as another person" {
					if len(conns) != 0 {
						t.Fatalf("Alice has connections: %+v", conns)
					}
					return
				}
				if len(conns) != 1 || conns[0].AccountName != stack.AliceLogin {
					t.Fatalf("Alice's connections: %+v", conns)
				}
			})
		}
	}
}

// Signing out ends the person's pending attempts in the project and clears the binding cookie:
// whoever signs in next in that browser finds the attempt gone, even approving at GitHub with
// their own account. Other people's attempts stay.
func TestSignOutEndsPendingAttempts(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	b, authURL := start(t, h, stack.AliceEmail, stack.AlicePassword)
	_, second := start(t, h, stack.AliceEmail, stack.AlicePassword)
	_, mallorys := start(t, h, stack.MalloryEmail, stack.MalloryPassword)
	if n := count(t, h, "callback_states"); n != 3 {
		t.Fatalf("%d state rows", n)
	}
	action, fields, ok := b.MustGet(h.Issuer + "/sign-out").Form("Sign out")
	if !ok {
		t.Fatal("no Sign out")
	}
	out := b.MustPost(action, fields)
	if out.Status != http.StatusOK || !strings.Contains(out.Text(), "You are signed out") {
		t.Fatalf("sign-out answered %d: %s", out.Status, out.Text())
	}
	if del := out.Cookie(callback.CookieName(h.Server().Env())); del == nil || del.MaxAge >= 0 || del.Path != callback.CookiePath(h.Project, h.Connector) {
		t.Errorf("sign-out does not clear the binding cookie: %v", out.Header["Set-Cookie"])
	}
	if b.BindingCookie() != nil {
		t.Error("the browser still holds the binding cookie")
	}
	if n := count(t, h, "callback_states"); n != 1 {
		t.Fatalf("%d state rows after Alice signed out, want Mallory's one", n)
	}
	rec := lastAudit(t, h, callback.ActionEndedBySignOut)
	if rec.Actor != h.Person(stack.AliceEmail).ID || rec.Details["attempts"] != "2" {
		t.Errorf("audit record = %+v", rec)
	}

	// Mallory signs in in Alice's browser and approves with her own GitHub account.
	b.MustSignIn(stack.MalloryEmail, stack.MalloryPassword)
	for _, u := range []string{authURL, second} {
		res := b.MustGet(atGitHub(t, h, b, stack.MalloryLogin, u))
		if res.Status != http.StatusBadRequest || !strings.Contains(res.Text(), "expired or has already been used") {
			t.Errorf("callback after sign-out: %d %s", res.Status, res.Text())
		}
	}
	if n, x := count(t, h, "connections"), h.GitHub.ExchangeCalls(); n != 0 || x != 0 {
		t.Fatalf("%d connections, %d exchanges", n, x)
	}
	// Mallory's own attempt was not Alice's to end.
	if res := b.MustGet(atGitHub(t, h, b, stack.MalloryLogin, mallorys)); res.Status != http.StatusOK || !strings.Contains(res.Text(), "Finish this connection?") {
		t.Errorf("Mallory's own attempt: %d %s", res.Status, res.Text())
	}
}

// endFails is the store with EndCallbackStates failing while fail is set.
type endFails struct {
	store.Store
	fail *atomic.Bool
}

func (s endFails) EndCallbackStates(ctx context.Context, project, subject string) (int64, error) {
	if s.fail.Load() {
		return 0, errors.New("connection refused")
	}
	return s.Store.EndCallbackStates(ctx, project, subject)
}

// A sign-out that cannot end the person's attempts fails as a whole: the person stays signed in
// (and can try again), so no attempt outlives a sign-out that succeeded.
func TestSignOutFailsWhenAttemptsCannotEnd(t *testing.T) {
	fail := &atomic.Bool{}
	h := stack.New(t, stack.Options{Audit: true, Store: func(st store.Store) store.Store { return endFails{Store: st, fail: fail} }})
	b, _ := start(t, h, stack.AliceEmail, stack.AlicePassword)
	fail.Store(true)
	action, fields, _ := b.MustGet(h.Issuer + "/sign-out").Form("Sign out")
	res := b.MustPost(action, fields)
	fail.Store(false)
	if res.Status != http.StatusInternalServerError || strings.Contains(res.Text(), "You are signed out") {
		t.Fatalf("sign-out answered %d: %s", res.Status, res.Text())
	}
	if _, _, ok := b.MustGet(h.Issuer + "/sign-out").Form("Sign out"); !ok {
		t.Fatal("signed out although the attempts did not end")
	}
	if n := count(t, h, "callback_states"); n != 1 {
		t.Fatalf("%d state rows", n)
	}
	// Trying again works.
	action, fields, _ = b.MustGet(h.Issuer + "/sign-out").Form("Sign out")
	if res := b.MustPost(action, fields); res.Status != http.StatusOK || count(t, h, "callback_states") != 0 {
		t.Fatalf("second sign-out answered %d: %s", res.Status, res.Text())
	}
}

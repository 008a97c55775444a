package signin_test

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
)

func TestUpstreamSignIn(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{})
	idp := stack.NewIDP(t, h.Clock.Now)
	h.Update(func(p *config.Project) {
		p.SignIn.OIDC = idp.Config("Sign in with Corp SSO")
	})

	// signInUpstream follows the browser through the provider and back.
	signInUpstream := func(b *stack.Browser, start string) stack.Page {
		p := b.MustGet(start)
		for range 5 {
			if p.Status != http.StatusFound && p.Status != http.StatusSeeOther {
				return p
			}
			loc := p.Header.Get("Location")
			if strings.HasPrefix(loc, "/team/demo/account") {
				return p
			}
			p = b.MustGet(loc)
		}
		return p
	}

	t.Run("sign-in page offers both", func(t *testing.T) {
		p := h.Browser().MustGet(h.Issuer + "/sign-in")
		if _, ok := p.Link("Sign in with Corp SSO"); !ok || !p.HasField("Password") {
			t.Errorf("the sign-in page must offer the provider's link and the password form: %s", p.Text())
		}
	})

	t.Run("signs in and comes back", func(t *testing.T) {
		b := h.Browser()
		p := signInUpstream(b, h.Issuer+"/sign-in/oidc?return_to="+url.QueryEscape("/team/demo/account"))
		if p.Status != http.StatusSeeOther || p.Header.Get("Location") != "/team/demo/account" {
			t.Fatalf("%d %q %s", p.Status, p.Header.Get("Location"), p.Body)
		}
		acct := b.MustGet(h.Issuer + "/account")
		if !strings.Contains(acct.Body, "carol@corp.example") {
			t.Errorf("account page: %s", acct.Body)
		}
		// The same upstream subject is the same person next time.
		b2 := h.Browser()
		signInUpstream(b2, h.Issuer+"/sign-in/oidc")
		if !strings.Contains(b2.MustGet(h.Issuer+"/account").Body, "carol@corp.example") {
			t.Error("second sign-in failed")
		}
	})

	t.Run("prompt=login is passed upstream", func(t *testing.T) {
		signInUpstream(h.Browser(), h.Issuer+"/sign-in/oidc?prompt=login")
		if last := idp.LastPrompt(); last != "login" {
			t.Errorf("prompt upstream = %q", last)
		}
	})

	t.Run("callback in another browser", func(t *testing.T) {
		starter := h.Browser()
		p := starter.MustGet(h.Issuer + "/sign-in/oidc")
		p = starter.MustGet(p.Header.Get("Location")) // at the provider; it redirects back with a code
		victim := h.Browser()
		cb := victim.MustGet(p.Header.Get("Location"))
		if cb.Status != http.StatusBadRequest || startsSession(cb) {
			t.Errorf("callback without the state cookie: %d", cb.Status)
		}
	})

	t.Run("tampered state", func(t *testing.T) {
		b := h.Browser()
		p := b.MustGet(h.Issuer + "/sign-in/oidc")
		p = b.MustGet(p.Header.Get("Location"))
		u, _ := url.Parse(p.Header.Get("Location"))
		q := u.Query()
		q.Set("state", "other")
		u.RawQuery = q.Encode()
		if cb := b.MustGet(u.String()); cb.Status != http.StatusBadRequest || startsSession(cb) {
			t.Errorf("%d", cb.Status)
		}
	})

	t.Run("provider error", func(t *testing.T) {
		b := h.Browser()
		p := b.MustGet(h.Issuer + "/sign-in/oidc")
		au, _ := url.Parse(p.Header.Get("Location"))
		st := au.Query().Get("state")
		cb := b.MustGet(h.Issuer + "/sign-in/callback?error=access_denied&state=" + url.QueryEscape(st))
		if cb.Status != http.StatusOK || !strings.Contains(cb.Body, "did not complete") {
			t.Errorf("%d %s", cb.Status, cb.Body)
		}
	})

	t.Run("expired start", func(t *testing.T) {
		b := h.Browser()
		p := b.MustGet(h.Issuer + "/sign-in/oidc")
		p = b.MustGet(p.Header.Get("Location"))
		h.Clock.Advance(11 * time.Minute)
		if cb := b.MustGet(p.Header.Get("Location")); cb.Status != http.StatusBadRequest {
			t.Errorf("%d", cb.Status)
		}
	})
}

// TestUpstreamSignInMustBeRecent plays a browser that is still signed in at the company's
// identity provider, which answers without asking for a password: a connect link needs a sign-in
// within the project's recent sign-in window, and such an answer must not count as one. The
// provider is asked for one (max_age), and its ID token's auth_time decides (OpenID Connect Core
// §3.1.2.1, §3.1.3.7).
func TestUpstreamSignInMustBeRecent(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{})
	idp := stack.NewIDP(t, h.Clock.Now)
	gh := &config.Connector{Key: "team/github", Namespace: "team", Name: "github", DisplayName: "GitHub"}
	h.Update(func(p *config.Project) {
		p.SignIn.OIDC = idp.Config("Sign in with Corp SSO")
		p.Connectors = map[string]*config.Connector{gh.Key: gh}
	})
	window := h.Project.Lifetimes.RecentSignIn
	setAuthTime := idp.SetAuthTime
	signedInAgo := func(d time.Duration) func() (time.Time, bool) {
		return func() (time.Time, bool) { return h.Clock.Now().Add(-d), true }
	}
	lastMaxAge := idp.LastMaxAge
	// through follows b from a page on this server through the provider and back, and
	// returns the first answer that is not a redirect to the sign-in page or the provider.
	through := func(b *stack.Browser, start string) stack.Page {
		t.Helper()
		p := b.MustGet(start)
		for range 8 {
			loc := p.Header.Get("Location")
			if p.Status != http.StatusFound && p.Status != http.StatusSeeOther {
				break
			}
			if strings.HasPrefix(loc, h.Issuer[len(h.Front.URL):]+"/sign-in?") {
				// The sign-in page: choose the organisation's sign-in.
				form := b.MustGet(loc)
				href, ok := form.Link("Sign in with")
				if !ok {
					t.Fatalf("no organisation sign-in on %s:\n%s", loc, form.Body)
				}
				p = b.MustGet(href)
				continue
			}
			if !strings.HasPrefix(loc, idp.URL) && !strings.Contains(loc, "/sign-in/") {
				break
			}
			p = b.MustGet(loc)
		}
		return p
	}

	// Carol exists (she signed in before); a connect link is made for her.
	setAuthTime(signedInAgo(2 * time.Hour))
	through(h.Browser(), h.Issuer+"/sign-in/oidc")
	carol, err := h.Store().UpsertPerson(t.Context(), store.Person{Project: stack.ProjectKey, ID: "unused", Source: "oidc",
		SourceSubject: idp.URL + "|carol-123"})
	if err != nil || carol.ID == "unused" {
		t.Fatalf("carol: %+v %v", carol, err)
	}
	code := "link-code-for-carol"
	if _, _, err := h.Store().OpenLink(t.Context(), store.Link{
		ID: "l1", CodeHash: secret.Hash(code), Project: stack.ProjectKey, Subject: carol.ID, ClientID: "web", Connector: gh.Key,
		Kind: store.LinkConnect, State: store.LinkOpen, ExpiresAt: h.Clock.Now().Add(time.Hour), CreatedAt: h.Clock.Now(),
	}, h.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	link := h.Issuer + "/account/services/link/" + code
	isOffer := func(p stack.Page) bool {
		return p.Status == http.StatusOK && strings.Contains(p.Body, "GitHub")
	}
	maxAge := strconv.Itoa(int(window / time.Second))

	for name, tc := range map[string]struct {
		authTime func() (time.Time, bool)
		ok       bool
	}{
		"the provider's sign-in is old":   {signedInAgo(2 * time.Hour), false},
		"just outside the window":         {signedInAgo(window + time.Second), false},
		"the provider sends no auth_time": {func() (time.Time, bool) { return time.Time{}, false }, false},
		"a recent sign-in":                {signedInAgo(time.Minute), true},
	} {
		t.Run(name, func(t *testing.T) {
			setAuthTime(tc.authTime)
			b := h.Browser()
			p := through(b, link)
			if got := lastMaxAge(); got != maxAge {
				t.Errorf("max_age sent to the provider = %q, want %q", got, maxAge)
			}
			if tc.ok {
				if p.Status != http.StatusSeeOther || !strings.HasSuffix(p.Header.Get("Location"), "/link/"+code) {
					t.Fatalf("callback: %d %q %s", p.Status, p.Header.Get("Location"), p.Body)
				}
				if !isOffer(b.MustGet(p.Header.Get("Location"))) {
					t.Error("a recent sign-in does not open the link")
				}
				return
			}
			if p.Status != http.StatusForbidden || !strings.Contains(p.Body, "did not confirm a recent sign-in") ||
				startsSession(p) {
				t.Fatalf("callback: %d %v %s", p.Status, p.Header, p.Body)
			}
			if again := b.MustGet(link); isOffer(again) {
				t.Error("the link opened without a recent sign-in")
			}
		})
	}

	t.Run("an ordinary sign-in records the provider's auth_time", func(t *testing.T) {
		// Signed in at the provider two hours ago: signing in to the account page works, but it
		// is not a recent sign-in, so the link asks for another (prompt=login, max_age=0).
		setAuthTime(signedInAgo(2 * time.Hour))
		b := h.Browser()
		p := through(b, h.Issuer+"/sign-in/oidc?return_to="+url.QueryEscape("/team/demo/account"))
		if p.Status != http.StatusSeeOther || p.Header.Get("Location") != "/team/demo/account" {
			t.Fatalf("%d %q %s", p.Status, p.Header.Get("Location"), p.Body)
		}
		if lastMaxAge() != "" {
			t.Errorf("an ordinary sign-in asked for max_age=%s", lastMaxAge())
		}
		l := b.MustGet(link)
		if isOffer(l) || l.Status != http.StatusSeeOther || !strings.Contains(l.Header.Get("Location"), "prompt=login") {
			t.Fatalf("a sign-in two hours old at the provider opened the link: %d %q", l.Status, l.Header.Get("Location"))
		}
		// The provider ignores prompt=login and answers with the old sign-in: refused.
		if p := through(b, link); p.Status != http.StatusForbidden || lastMaxAge() != "0" {
			t.Fatalf("prompt=login answered with an old sign-in: %d max_age=%q %s", p.Status, lastMaxAge(), p.Body)
		}
		// Inside the window but from before this request: still not a sign-in again.
		setAuthTime(signedInAgo(5 * time.Minute))
		if p := through(b, link); p.Status != http.StatusForbidden {
			t.Fatalf("prompt=login answered with a sign-in from before it: %d %s", p.Status, p.Body)
		}
		// The provider asks for the password again: the link opens.
		setAuthTime(signedInAgo(0))
		p = through(b, link)
		if p.Status != http.StatusSeeOther || !isOffer(b.MustGet(p.Header.Get("Location"))) {
			t.Fatalf("a sign-in again: %d %q %s", p.Status, p.Header.Get("Location"), p.Body)
		}
	})
}

// startsSession says whether the answer sets a session cookie.
func startsSession(p stack.Page) bool {
	for _, c := range p.SetCookies {
		if strings.Contains(c.Name, "latchkey_session_") && c.Value != "" {
			return true
		}
	}
	return false
}

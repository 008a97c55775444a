package attacks

import (
	"context"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/testbrowser"
	"latchkey.dev/latchkey/test/stack"
)

// profile is one person's real browser, with the attack tests' own steps on top.
type profile struct{ *testbrowser.Profile }

func newProfile(t *testing.T, name string) *profile {
	t.Helper()
	return &profile{testbrowser.New(t, context.Background(), name,
		// Frames of other sites in the page's own frame tree (framesOf); framing rules,
		// cookies and form submissions do not depend on the process model.
		chromedp.Flag("disable-site-isolation-trials", true),
		chromedp.Flag("disable-features", "IsolateOrigins,site-per-process"),
	)}
}

func (p *profile) signIn(issuer, email, pw string) {
	p.T.Helper()
	p.Open(issuer + "/sign-in")
	p.Fill("username", email)
	p.Fill("password", pw)
	p.Press("Sign in")
	p.WaitFor("Your account")
}

// sent is one request (or one hop of a redirect chain) as the browser put it on the wire.
type sent struct {
	url     string
	referer string
}

// recordRequests records what the page sends until stop is called, with the Referer header as
// sent over the wire.
func (p *profile) recordRequests() (stop func() []sent) {
	p.T.Helper()
	ctx, cancel := context.WithCancel(p.Ctx)
	var mu sync.Mutex
	var hops []sent
	byID := map[network.RequestID][]int{}
	extra := map[network.RequestID][]network.Headers{}
	attach := func(id network.RequestID) {
		for _, i := range byID[id] {
			if len(extra[id]) == 0 {
				return
			}
			if hops[i].referer == "\x00" {
				h := extra[id][0]
				extra[id] = extra[id][1:]
				hops[i].referer = ""
				for k, v := range h {
					if strings.EqualFold(k, "Referer") {
						hops[i].referer, _ = v.(string)
					}
				}
			}
		}
	}
	err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			byID[e.RequestID] = append(byID[e.RequestID], len(hops))
			hops = append(hops, sent{url: e.Request.URL, referer: "\x00"})
			attach(e.RequestID)
		case *network.EventRequestWillBeSentExtraInfo:
			extra[e.RequestID] = append(extra[e.RequestID], e.Headers)
			attach(e.RequestID)
		}
	})
	if err != nil {
		p.T.Fatal(err)
	}
	return func() []sent {
		cancel()
		mu.Lock()
		defer mu.Unlock()
		return append([]sent(nil), hops...)
	}
}

// attacker is a site that serves pages which submit forms to Latchkey by themselves, and a page
// that frames Latchkey's pages.
type attacker struct {
	URL   string
	mu    sync.Mutex
	forms []attackForm
	frame []string
}

type attackForm struct {
	Action string
	Fields map[string]string
}

var attackPage = template.Must(template.New("").Parse(`<!doctype html><title>Free stickers</title>
<form method="post" action="{{.Action}}">{{range $k, $v := .Fields}}<input type="hidden" name="{{$k}}" value="{{$v}}">{{end}}</form>
<script>document.forms[0].submit()</script>`))

var framePage = template.Must(template.New("").Parse(`<!doctype html><title>Win a prize</title>
<p>Prizes below</p>{{range .}}<iframe src="{{.}}" width="400" height="300"></iframe>{{end}}`))

func newAttacker(t *testing.T, host string) *attacker {
	t.Helper()
	a := &attacker{}
	ln, err := net.Listen("tcp", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if r.URL.Path == "/frames" {
			framePage.Execute(w, a.frame)
			return
		}
		n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/attack/"))
		if err != nil || n < 0 || n >= len(a.forms) {
			http.NotFound(w, r)
			return
		}
		attackPage.Execute(w, a.forms[n])
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	a.URL = srv.URL
	return a
}

// add registers a form and returns the address of the page that submits it.
func (a *attacker) add(action string, fields url.Values) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	f := attackForm{Action: action, Fields: map[string]string{}}
	for k := range fields {
		f.Fields[k] = fields.Get(k)
	}
	a.forms = append(a.forms, f)
	return fmt.Sprintf("%s/attack/%d", a.URL, len(a.forms)-1)
}

// TestCrossOriginFormsInChromium: pages on another site (127.0.0.3) and on the same site but
// another origin (127.0.0.1, another port: SameSite=Lax cookies do ride along there) submit every
// state-changing form of Latchkey in Alice's real browser — even with her real form token, as if
// it had leaked. Every one is refused and nothing changes; no Latchkey page can be framed.
func TestCrossOriginFormsInChromium(t *testing.T) {
	testbrowser.Chromium(t)
	e := newEnvOn(t, "127.0.0.1", "127.0.0.2")
	conn := e.ConnectDirectly(stack.AliceEmail, "2002", stack.AliceLogin, "gho_alice")
	link, refusal, _ := e.linkFor(stack.AliceEmail)
	const evil = "https://evil.example/cb"
	app := e.registerPublic("Claude", evil)
	aliceID := e.PersonID(stack.AliceEmail)
	if err := e.Store().UpsertGrant(t.Context(), store.Grant{Project: stack.ProjectKey, Subject: aliceID, ClientID: stack.Agent, Scopes: []string{"openid"}, CreatedAt: e.Clock.Now(), UpdatedAt: e.Clock.Now()}); err != nil {
		t.Fatal(err)
	}
	// Mallory's own pending connection, and a confirmation token she rendered for a code she
	// made up, signed in as herself in another browser: the token is genuine for that code.
	_, _, authURL := e.connectFromLink(stack.MalloryEmail)
	state := mustURL(authURL).Query().Get("state")
	_, mf, ok := e.signedIn(stack.MalloryEmail).MustGet(e.CallbackURL + "?" + url.Values{"state": {state}, "code": {"made-up"}}.Encode()).Form("Finish connecting")
	if !ok {
		t.Fatal("Mallory is not offered her own confirmation")
	}

	alice := newProfile(t, "alice's browser")
	alice.signIn(e.Issuer, stack.AliceEmail, stack.AlicePassword)
	alice.Open(e.Front.URL + link)
	alice.WaitFor("Let Repo Helper use your GitHub account?")
	csrf := testbrowser.Eval[string](alice.Profile, `document.querySelector('input[name="csrf_token"]').value`)
	if len(csrf) < 20 {
		t.Fatalf("no form token on the link page: %q", csrf)
	}
	pk := newPKCE()
	consent := url.Values{
		"client_id": {app.ID}, "redirect_uri": {evil}, "response_type": {"code"}, "scope": {"openid"}, "state": {"s"},
		"code_challenge": {pk.challenge}, "code_challenge_method": {"S256"}, "csrf_token": {csrf},
		"decision": {"allow"}, "confirm_destination": {evil},
	}
	forms := []struct {
		name   string
		action string
		fields url.Values
	}{
		{"link decline", link + "/decline", url.Values{"csrf_token": {csrf}}},
		{"link allow", link + "/allow", url.Values{"csrf_token": {csrf}, "connection_id": {conn.ID}}},
		{"link connect", link + "/connect", url.Values{"csrf_token": {csrf}}},
		{"consent", "/team/demo/authorize", consent},
		{"disconnect", "/team/demo/account/disconnect", url.Values{"csrf_token": {csrf}, "connection_id": {conn.ID}}},
		{"revoke app", "/team/demo/account/apps/revoke", url.Values{"csrf_token": {csrf}, "client_id": {stack.Agent}}},
		{"remove agent", "/team/demo/account/agents/remove", url.Values{"csrf_token": {csrf}, "connector": {e.Connector.Key}, "client_id": {stack.Agent}}},
		{"account connect", "/team/demo/account/connect", url.Values{"csrf_token": {csrf}, "connector": {e.Connector.Key}}},
		{"sign in as Mallory", "/team/demo/sign-in", url.Values{"username": {stack.MalloryEmail}, "password": {stack.MalloryPassword}, "csrf_token": {csrf}, "return_to": {link}}},
		{"sign out", "/team/demo/sign-out", url.Values{"csrf_token": {csrf}}},
		{"confirm Mallory's connection", "/team/demo/connectors/default/github/callback", url.Values{"code": {"made-up"}, "state": {state}, "confirm_token": {mf.Get("confirm_token")}}},
	}
	sites := map[string]*attacker{
		"another site (127.0.0.3)":            newAttacker(t, "127.0.0.3"),
		"same site, another port (127.0.0.1)": newAttacker(t, "127.0.0.1"),
	}
	states := e.CountRows("callback_states")
	for siteName, site := range sites {
		for _, f := range forms {
			alice.Open(site.add(e.Front.URL+f.action, f.fields))
			text := alice.WaitFor(crossSiteText)
			if strings.Contains(text, "Free stickers") {
				t.Errorf("%s, %s: the form did not leave the attacker's page", siteName, f.name)
			}
		}
	}
	// Nothing changed.
	if st := e.linkState(refusal.Str("connect_id")); st != store.LinkOpen {
		t.Errorf("Alice's link is %s", st)
	}
	if n := e.CountRows("agent_permissions"); n != 0 {
		t.Errorf("%d agent permissions", n)
	}
	if cs := e.Connections(stack.AliceEmail); len(cs) != 1 {
		t.Errorf("Alice has %d connections", len(cs))
	}
	if _, err := e.Store().GetGrant(t.Context(), stack.ProjectKey, aliceID, stack.Agent); err != nil {
		t.Errorf("Alice's grant: %v", err)
	}
	if n := e.CountRows("auth_codes"); n != 0 {
		t.Errorf("%d authorization codes issued", n)
	}
	if n := e.CountRows("callback_states"); n != states {
		t.Errorf("callback states %d → %d", states, n)
	}
	if e.GitHub.ExchangeCalls() != 0 {
		t.Error("a code was exchanged at GitHub")
	}
	alice.Open(e.Issuer + "/account")
	if text := alice.WaitFor("Your account"); !strings.Contains(text, stack.AliceEmail) || strings.Contains(text, stack.MalloryEmail) {
		t.Errorf("Alice's session changed:\n%s", text)
	}

	// Framing: every page refuses to load inside another site's page.
	framed := []string{e.Front.URL + link, e.Issuer + "/account", e.Issuer + "/sign-in",
		e.authorizeURL(app.ID, evil, newPKCE(), nil), e.Issuer + "/sign-out"}
	// A page that may be framed shows that the check sees a rendered frame when there is one.
	control := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte("<!doctype html><title>Framable</title><p>ok</p>"))
	}))
	t.Cleanup(control.Close)
	for siteName, site := range sites {
		site.mu.Lock()
		site.frame = append(slices.Clone(framed), control.URL+"/")
		site.mu.Unlock()
		alice.Open(site.URL + "/frames")
		alice.WaitFor("Prizes below")
		controlRendered := 0
		alice.framesOf(control.URL, 1, func(string, string) { controlRendered++ })
		if controlRendered != 1 {
			t.Fatalf("%s: the framable control page was not seen rendered; this check proves nothing", siteName)
		}
		if seen := alice.framesOf(e.Front.URL, len(framed), func(u, why string) {
			t.Errorf("%s framed %s (%s)", siteName, u, why)
		}); seen != len(framed) {
			t.Fatalf("%s: %d of %d frames seen; this check proves nothing", siteName, seen, len(framed))
		}
	}
}

// framesOf finds the page's frames that load prefix and calls rendered for each one the
// browser rendered; a frame the browser refused to render shows its error page, and the frame
// tree reports the address as unreachable. It waits until want frames have committed. Profiles
// run without site isolation, so frames of other sites are in the page's frame tree too.
func (p *profile) framesOf(prefix string, want int, rendered func(u, why string)) int {
	p.T.Helper()
	ctx, cancel := context.WithTimeout(p.Ctx, 20*time.Second)
	defer cancel()
	for {
		type frame struct{ url, why string }
		var found []frame
		tree, err := chromedp.Call(ctx, page.GetFrameTree, cdp.Empty{})
		if err != nil {
			p.T.Fatal(err)
		}
		for _, ch := range tree.FrameTree.ChildFrames {
			f := ch.Frame
			switch {
			case strings.HasPrefix(f.UnreachableURL, prefix):
				found = append(found, frame{f.UnreachableURL, ""})
			case strings.HasPrefix(f.URL, prefix):
				found = append(found, frame{f.URL, "in the frame tree, reachable"})
			}
		}
		if len(found) >= want {
			for _, f := range found {
				if f.why != "" {
					rendered(f.url, f.why)
				}
			}
			return len(found)
		}
		select {
		case <-ctx.Done():
			return len(found)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestForwardedLinkInChromium is the forwarded connect link meeting the forwarded authorization
// URL in a real browser: Mallory presses Connect on her own link and sends Alice the GitHub
// address instead of the link. Alice, signed in to Latchkey and to GitHub (another site,
// 127.0.0.2) and having approved the app before, is refused: the page names Mallory's account,
// masked, offers no confirmation and ends the attempt; nothing is saved and Mallory's agent is
// still refused. A page on a third site that submits the confirmation in Alice's browser is
// refused. Opening Mallory's link itself stops Alice at check 3.
func TestForwardedLinkInChromium(t *testing.T) {
	testbrowser.Chromium(t)
	e := newEnvOn(t, "127.0.0.1", "127.0.0.2")
	refusal := e.AgentExchange(e.AccessToken(stack.MalloryEmail, stack.Agent))
	malloryLink, linkID := e.LinkPath(refusal.Str("connect_uri")), refusal.Str("connect_id")

	// Mallory, in her own browser, opens her link and presses Connect GitHub, but copies the
	// address GitHub would have opened instead of going there.
	mallory := newProfile(t, "mallory's browser")
	mallory.signIn(e.Issuer, stack.MalloryEmail, stack.MalloryPassword)
	mallory.Open(e.Front.URL + malloryLink)
	mallory.WaitFor("Connect your GitHub account and let Repo Helper use it.")
	// Blocked, so Mallory does not go to GitHub.
	mallory.Block(e.GitHubURL)
	authURL := mallory.PressAndCapture("Connect GitHub", e.GitHubURL+"/login/oauth/authorize?")
	if e.CountRows("callback_states") != 1 {
		t.Fatal("Connect left no state row")
	}

	alice := newProfile(t, "alice's browser")
	alice.signIn(e.Issuer, stack.AliceEmail, stack.AlicePassword)
	alice.Open(e.GitHubURL + "/login")
	alice.Fill("login", stack.AliceLogin)
	alice.Fill("password", stack.AlicePassword)
	alice.Press("Sign in")
	alice.WaitFor("404 page not found")
	e.GitHub.Approve(stack.AliceLogin, stack.GitHubClientID)

	alice.Open(authURL)
	text := alice.WaitFor(notYoursText)
	if !strings.Contains(text, "m***@example.com") || strings.Contains(text, stack.MalloryEmail) || strings.Contains(text, "Finish connecting") {
		t.Errorf("Alice sees:\n%s", text)
	}
	if n := e.CountRows("callback_states"); n != 0 {
		t.Errorf("%d state rows; the refusal must end Mallory's attempt", n)
	}
	if loc := alice.Location(); !strings.HasPrefix(loc, e.CallbackURL+"?") {
		t.Errorf("Alice is at %s", loc)
	}
	saved := func(what string) {
		t.Helper()
		if n := e.CountRows("connections") + e.CountRows("agent_permissions"); n != 0 || e.GitHub.ExchangeCalls() != 0 {
			t.Fatalf("%s: %d rows, %d exchanges", what, n, e.GitHub.ExchangeCalls())
		}
		if st := e.linkState(linkID); st != store.LinkOpen {
			t.Fatalf("%s: Mallory's link is %s", what, st)
		}
	}
	saved("after the confirmation page")

	cb := mustURL(alice.Location())
	site := newAttacker(t, "127.0.0.3")
	alice.Open(site.add(e.CallbackURL, url.Values{"code": {cb.Query().Get("code")}, "state": {cb.Query().Get("state")}}))
	alice.WaitFor(crossSiteText)
	saved("after the cross-site confirmation")

	alice.Open(e.Front.URL + malloryLink)
	text = alice.WaitFor(wrongPersonText)
	for _, leak := range []string{"mallory", "Repo Helper", "Connect GitHub"} {
		if strings.Contains(text, leak) {
			t.Errorf("the wrong-person page says %q", leak)
		}
	}
	saved("after Alice opened Mallory's link")
	if a := e.AgentExchange(e.AccessToken(stack.MalloryEmail, stack.Agent)); a.Status == http.StatusOK {
		t.Fatalf("Mallory's agent got a token: %s", a.Raw)
	}

	// Alice's own link works, in the same browser, and its code never leaves Latchkey in a
	// Referer: not to GitHub, not anywhere.
	aliceSubject := e.AccessToken(stack.AliceEmail, stack.Agent)
	own := e.LinkPath(e.AgentExchange(aliceSubject).Str("connect_uri"))
	code := own[strings.LastIndex(own, "/")+1:]
	stop := alice.recordRequests()
	alice.Open(site.add(e.CallbackURL, url.Values{"state": {"x"}})) // control: a Referer the recorder must see
	alice.WaitFor(crossSiteText)
	alice.Open(e.Front.URL + own)
	alice.WaitFor("Connect your GitHub account and let Repo Helper use it.")
	alice.Press("Connect GitHub")
	alice.WaitFor("is now connected.")
	hops := stop()
	control, toGitHub := false, 0
	for _, h := range hops {
		if h.referer == "\x00" {
			continue // no raw headers reported for this hop (served from memory)
		}
		if strings.HasPrefix(h.referer, site.URL) {
			control = true
		}
		if strings.Contains(h.referer, code) || strings.Contains(h.url, code) && !strings.HasPrefix(h.url, e.Front.URL) {
			t.Errorf("the link's code left Latchkey: %s (Referer %q)", h.url, h.referer)
		}
		if strings.HasPrefix(h.url, e.GitHubURL) {
			toGitHub++
		}
	}
	if !control || toGitHub == 0 {
		t.Fatalf("the recorder saw no Referer from the attacker's page (%v) or no request to GitHub (%d); this check proves nothing: %v", control, toGitHub, hops)
	}
	if cs := e.Connections(stack.AliceEmail); len(cs) != 1 || cs[0].AccountName != stack.AliceLogin {
		t.Fatalf("Alice's connections: %+v", cs)
	}
	if a := e.AgentExchange(aliceSubject); a.Status != http.StatusOK {
		t.Fatalf("Alice's agent after she connected: %d %s", a.Status, a.Raw)
	}
	if a := e.AgentExchange(e.AccessToken(stack.MalloryEmail, stack.Agent)); a.Status == http.StatusOK {
		t.Fatalf("Mallory's agent got a token after Alice connected: %s", a.Raw)
	}
}

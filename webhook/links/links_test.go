package links_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/links"
)

// refusal checks the exact shape of the token-exchange refusal (docs/connections-for-agents.md, "The
// refusal") and returns the answer.
func refusal(t *testing.T, h *stack.Stack, a stack.Answer, reason, description, message string) stack.Answer {
	t.Helper()
	if a.Status != http.StatusBadRequest {
		t.Fatalf("status %d, want 400: %s", a.Status, a.Raw)
	}
	if got := a.Header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", got)
	}
	if got := a.Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type %q", got)
	}
	want := map[string]string{
		"error": "invalid_grant", "error_description": description, "reason": reason, "connect_message": message,
	}
	for k, v := range want {
		if got := a.Str(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	// request_id is the extension member every OAuth error carries, the X-Request-Id header.
	if id := a.Header.Get("X-Request-Id"); id == "" || a.Str("request_id") != id {
		t.Errorf("request_id %q, want the X-Request-Id header %q", a.Str("request_id"), id)
	}
	if len(a.Body) != 8 {
		t.Errorf("members: %v, want exactly error, error_description, reason, connect_uri, connect_id, connect_expires_in, connect_message, request_id", a.Body)
	}
	uri := a.Str("connect_uri")
	code := strings.TrimPrefix(uri, h.Issuer+links.PathPrefix)
	if code == uri {
		t.Fatalf("connect_uri %q is not under %s", uri, h.Issuer+links.PathPrefix)
	}
	if b, err := base64.RawURLEncoding.DecodeString(code); err != nil || len(b) != 32 {
		t.Errorf("code %q is not 32 bytes of base64url", code)
	}
	if a.Str("connect_id") == "" || strings.Contains(uri, a.Str("connect_id")) {
		t.Errorf("connect_id %q: want a separate, non-empty id", a.Str("connect_id"))
	}
	if _, ok := a.Body["connect_expires_in"].(float64); !ok {
		t.Errorf("connect_expires_in %v is not a number", a.Body["connect_expires_in"])
	}
	return a
}

const (
	connectDesc = "the person has not connected a GitHub account"
	connectMsg  = "Open this link to connect your GitHub account and let Repo Helper use it."
	allowDesc   = "the person has not allowed Repo Helper to use their GitHub account"
	allowMsg    = "Open this link to let Repo Helper use your GitHub account."
	reconDesc   = "the person's GitHub connection stopped working"
	reconMsg    = "Open this link to reconnect your GitHub account so Repo Helper can use it again."
)

// signedIn is a browser in which email has just signed in.
func signedIn(h *stack.Stack, email, password string) *stack.Browser {
	b := h.Browser()
	b.MustSignIn(email, password)
	return b
}

// token checks a successful exchange and returns the upstream access token.
func token(t *testing.T, a stack.Answer) string {
	t.Helper()
	if a.Status != http.StatusOK {
		t.Fatalf("exchange: %d %s", a.Status, a.Raw)
	}
	if a.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control %q", a.Header.Get("Cache-Control"))
	}
	if a.Str("issued_token_type") != "urn:ietf:params:oauth:token-type:access_token" || a.Str("token_type") != "Bearer" {
		t.Errorf("issued_token_type %q token_type %q", a.Str("issued_token_type"), a.Str("token_type"))
	}
	return a.Str("access_token")
}

// githubLogin asks the fake GitHub whose token tok is.
func githubLogin(t *testing.T, h *stack.Stack, tok string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, h.GitHubURL+"/user", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	b := h.Browser()
	p := b.MustDo(req)
	if p.Status != http.StatusOK {
		t.Fatalf("GitHub /user: %d %s", p.Status, p.Body)
	}
	i := strings.Index(p.Body, `"login":"`)
	if i < 0 {
		t.Fatalf("no login in %s", p.Body)
	}
	rest := p.Body[i+len(`"login":"`):]
	return rest[:strings.IndexByte(rest, '"')]
}

// press submits the form of page whose button says label.
func press(t *testing.T, b *stack.Browser, page stack.Page, label string, extra url.Values) stack.Page {
	t.Helper()
	action, fields, ok := page.Form(label)
	if !ok {
		t.Fatalf("no %q button: %s", label, page.Text())
	}
	for k, v := range extra {
		fields[k] = v
	}
	return b.MustPost(action, fields)
}

func TestConnectStory(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	subject := h.AccessToken(stack.AliceEmail, stack.Agent)

	first := refusal(t, h, h.AgentExchange(subject), "connect_required", connectDesc, connectMsg)
	if first.Str("connect_expires_in") != "1800" {
		t.Errorf("connect_expires_in %s, want 1800", first.Str("connect_expires_in"))
	}
	// Asking again while the link is open returns the same link.
	h.Clock.Advance(time.Minute)
	again := refusal(t, h, h.AgentExchange(subject), "connect_required", connectDesc, connectMsg)
	if again.Str("connect_uri") != first.Str("connect_uri") || again.Str("connect_id") != first.Str("connect_id") {
		t.Fatalf("second refusal has another link")
	}
	if again.Str("connect_expires_in") != "1740" {
		t.Errorf("connect_expires_in after a minute: %s, want 1740", again.Str("connect_expires_in"))
	}
	link := h.LinkPath(first.Str("connect_uri"))

	// Check 2: nobody is signed in, so sign in first and come back.
	b := h.Browser()
	p := b.MustGet(link)
	if p.Status != http.StatusSeeOther {
		t.Fatalf("anonymous open: %d %s", p.Status, p.Text())
	}
	loc, _ := url.Parse(p.Location())
	if loc.Path != "/team/demo/sign-in" || loc.Query().Get("return_to") != link || loc.Query().Get("prompt") != "" {
		t.Fatalf("sign-in redirect %s", p.Location())
	}
	signIn := b.MustGet(p.Location())
	action, fields, ok := signIn.Form("Sign in")
	if !ok {
		t.Fatalf("no sign-in form")
	}
	fields.Set("username", stack.AliceEmail)
	fields.Set("password", stack.AlicePassword)
	done := b.MustPost(action, fields)
	if !strings.Contains(done.Body, `url=`+link) {
		t.Fatalf("sign-in does not continue to the link: %s", done.Body)
	}

	// Check 5: the offer.
	p = b.MustGet(link)
	if p.Status != http.StatusOK || !strings.Contains(p.Text(), "Connect your GitHub account and let Repo Helper use it.") {
		t.Fatalf("offer: %d %s", p.Status, p.Text())
	}
	if p.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("offer Cache-Control %q", p.Header.Get("Cache-Control"))
	}

	// Connect at GitHub, where Alice is signed in and has approved the app before.
	b.SignInGitHub(stack.AliceLogin)
	h.GitHub.Approve(stack.AliceLogin, stack.GitHubClientID)
	toGitHub := press(t, b, p, "Connect GitHub", nil)
	if toGitHub.Status != http.StatusSeeOther || !strings.HasPrefix(toGitHub.Location(), h.GitHubURL) {
		t.Fatalf("connect: %d to %q", toGitHub.Status, toGitHub.Location())
	}
	if csp := p.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "form-action 'self' "+h.GitHubURL+";") {
		t.Errorf("CSP does not allow the redirect to GitHub: %s", csp)
	}
	result := b.MustFollow(toGitHub)
	if result.Status != http.StatusOK || !strings.Contains(result.Text(), "Go back to your agent") {
		t.Fatalf("callback: %d %s", result.Status, result.Text())
	}
	if strings.Contains(result.Body, "http-equiv") || result.Header.Get("Location") != "" {
		t.Errorf("finishing must redirect nowhere")
	}

	// The agent learns the outcome by asking again.
	tok := token(t, h.AgentExchange(subject))
	if got := githubLogin(t, h, tok); got != stack.AliceLogin {
		t.Fatalf("token is for %q", got)
	}
	// The link is done: its code now leads to the 404 page.
	if p := b.MustGet(link); p.Status != http.StatusNotFound {
		t.Fatalf("finished link: %d", p.Status)
	}
}

func TestAliceOpensMallorysLink(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	mallory := h.AccessToken(stack.MalloryEmail, stack.Agent)
	a := refusal(t, h, h.AgentExchange(mallory), "connect_required", connectDesc, connectMsg)
	link := h.LinkPath(a.Str("connect_uri"))

	// Mallory forwards it; Alice is signed in to Latchkey and to GitHub.
	alice := signedIn(h, stack.AliceEmail, stack.AlicePassword)
	alice.SignInGitHub(stack.AliceLogin)
	h.GitHub.Approve(stack.AliceLogin, stack.GitHubClientID)
	p := alice.MustGet(link)
	if p.Status != http.StatusForbidden || !strings.Contains(p.Text(), "This link was made for another account") {
		t.Fatalf("Alice opening Mallory's link: %d %s", p.Status, p.Text())
	}
	for _, secretWord := range []string{"mallory", "Mallory", "Repo Helper", "GitHub"} {
		if strings.Contains(p.Body, secretWord) {
			t.Errorf("the refusal gives away %q", secretWord)
		}
	}
	if _, _, ok := p.Form("Connect"); ok {
		t.Errorf("the refusal offers to connect")
	}

	// Even a hand-made POST with Alice's own form token changes nothing.
	csrf := alice.MustGet(h.Issuer + "/sign-out")
	_, fields, _ := csrf.Form("Sign out")
	post := alice.MustPost(link+"/connect", url.Values{"csrf_token": {fields.Get("csrf_token")}})
	if post.Status != http.StatusForbidden || post.Header.Get("Location") != "" {
		t.Fatalf("Alice's POST: %d to %q", post.Status, post.Header.Get("Location"))
	}

	// Nothing connected, nothing started.
	if n := h.CountRows("connections") + h.CountRows("callback_states") + h.CountRows("agent_permissions"); n != 0 {
		t.Fatalf("%d rows of connections, callback states or permissions", n)
	}
	// The event: audit records, counter, outbox.
	var wrong []store.AuditRecord
	for _, r := range h.Audit() {
		if r.Action == events.LinkWrongPerson {
			wrong = append(wrong, r)
		}
	}
	if len(wrong) != 2 || wrong[0].Actor != h.PersonID(stack.AliceEmail) || wrong[0].Target != h.PersonID(stack.MalloryEmail) {
		t.Fatalf("link.wrong_person records: %+v", wrong)
	}
	if got := h.SecurityEvents(events.LinkWrongPerson); got != 2 {
		t.Errorf("latchkey_security_events_total{type=link.wrong_person} = %v, want 2", got)
	}
	if _, err := h.Deliverer().DeliverDue(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The sink receives every audit record (link.created too); these are the two refusals.
	var got []stack.Received
	for _, r := range h.Sink.Received() {
		if r.Event.Type == "dev.latchkey.link.wrong_person" {
			got = append(got, r)
		}
	}
	if len(got) != 2 || !got[0].Valid || got[0].Event.Type != "dev.latchkey.link.wrong_person" || got[0].Event.Source != h.Issuer ||
		got[0].Event.Data.Actor != h.PersonID(stack.AliceEmail) {
		t.Fatalf("sink received %+v", got)
	}

	// The link is untouched: Mallory can still use it.
	m := signedIn(h, stack.MalloryEmail, stack.MalloryPassword)
	if p := m.MustGet(link); p.Status != http.StatusOK {
		t.Fatalf("Mallory's own link after Alice: %d %s", p.Status, p.Text())
	}
}

func TestMalloryOpensAlicesLink(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	a := refusal(t, h, h.AgentExchange(h.AccessToken(stack.AliceEmail, stack.Agent)), "connect_required", connectDesc, connectMsg)
	link := h.LinkPath(a.Str("connect_uri"))

	// Not signed in: check 2 sends her to sign in, where she cannot be Alice.
	m := h.Browser()
	if p := m.MustGet(link); p.Status != http.StatusSeeOther || !strings.Contains(p.Location(), "/sign-in?") {
		t.Fatalf("anonymous Mallory: %d %s", p.Status, p.Location())
	}
	// Signed in as herself: check 3.
	m.MustSignIn(stack.MalloryEmail, stack.MalloryPassword)
	if p := m.MustGet(link); p.Status != http.StatusForbidden {
		t.Fatalf("Mallory signed in: %d %s", p.Status, p.Text())
	}
	if h.CountRows("callback_states") != 0 {
		t.Fatalf("something was started")
	}
}

func TestStaleSignInMustSignInAgain(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	a := refusal(t, h, h.AgentExchange(h.AccessToken(stack.AliceEmail, stack.Agent)), "connect_required", connectDesc, connectMsg)
	link := h.LinkPath(a.Str("connect_uri"))
	b := signedIn(h, stack.AliceEmail, stack.AlicePassword)
	page := b.MustGet(link)
	if page.Status != http.StatusOK {
		t.Fatalf("fresh: %d", page.Status)
	}

	h.Clock.Advance(16 * time.Minute)
	p := b.MustGet(link)
	loc, _ := url.Parse(p.Location())
	if p.Status != http.StatusSeeOther || loc.Path != "/team/demo/sign-in" || loc.Query().Get("prompt") != "login" || loc.Query().Get("return_to") != link {
		t.Fatalf("16 minutes later: %d %s", p.Status, p.Location())
	}
	// The form from before does not get around it either.
	post := press(t, b, page, "Connect GitHub", nil)
	if post.Status != http.StatusSeeOther || !strings.Contains(post.Location(), "prompt=login") {
		t.Fatalf("stale POST: %d %s", post.Status, post.Location())
	}
	if h.CountRows("callback_states") != 0 {
		t.Fatalf("a stale sign-in started a connection")
	}
	// The sign-in page really asks again, and then the link works.
	if sp := b.MustGet(p.Location()); sp.Status != http.StatusOK || !strings.Contains(sp.Text(), "sign in again") {
		t.Fatalf("sign-in page: %d %s", sp.Status, sp.Text())
	}
	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	if p := b.MustGet(link); p.Status != http.StatusOK {
		t.Fatalf("after signing in again: %d", p.Status)
	}
}

func TestAllowStory(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	subject := h.AccessToken(stack.AliceEmail, stack.Agent)
	first := refusal(t, h, h.AgentExchange(subject), "connect_required", connectDesc, connectMsg)
	oldLink := h.LinkPath(first.Str("connect_uri"))

	// Alice connects GitHub from her account page, without allowing Repo Helper.
	b := signedIn(h, stack.AliceEmail, stack.AlicePassword)
	b.SignInGitHub(stack.AliceLogin)
	h.GitHub.Approve(stack.AliceLogin, stack.GitHubClientID)
	if res := b.MustFollow(b.PressOnAccount("Connect GitHub")); res.Status != http.StatusOK {
		t.Fatalf("account connect: %d %s", res.Status, res.Text())
	}

	// What the link asks for changed: a new link replaces the old one.
	second := refusal(t, h, h.AgentExchange(subject), "allow_required", allowDesc, allowMsg)
	if second.Str("connect_id") == first.Str("connect_id") || second.Str("connect_uri") == first.Str("connect_uri") {
		t.Fatalf("the kind changed but the link did not")
	}
	if p := b.MustGet(oldLink); p.Status != http.StatusNotFound {
		t.Fatalf("replaced link: %d", p.Status)
	}
	link := h.LinkPath(second.Str("connect_uri"))
	p := b.MustGet(link)
	if p.Status != http.StatusOK || !strings.Contains(p.Text(), "Let Repo Helper use your GitHub account alice-gh?") {
		t.Fatalf("allow page: %d %s", p.Status, p.Text())
	}
	done := press(t, b, p, "Allow", nil)
	if done.Status != http.StatusOK || !strings.Contains(done.Text(), "Go back to Repo Helper") || done.Header.Get("Location") != "" {
		t.Fatalf("allow: %d %s", done.Status, done.Text())
	}
	if got := githubLogin(t, h, token(t, h.AgentExchange(subject))); got != stack.AliceLogin {
		t.Fatalf("token for %q", got)
	}
	if p := b.MustGet(link); p.Status != http.StatusNotFound {
		t.Fatalf("finished link: %d", p.Status)
	}
}

func TestAllowChoosesAmongAccounts(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	h.ConnectDirectly(stack.AliceEmail, "1", "alice-work", "gho_work")
	home := h.ConnectDirectly(stack.AliceEmail, "2", "alice-home", "gho_home")
	subject := h.AccessToken(stack.AliceEmail, stack.Agent)
	a := refusal(t, h, h.AgentExchange(subject), "allow_required", allowDesc, allowMsg)
	link := h.LinkPath(a.Str("connect_uri"))

	b := signedIn(h, stack.AliceEmail, stack.AlicePassword)
	p := b.MustGet(link)
	for _, name := range []string{"alice-work", "alice-home", "Which GitHub account may Repo Helper use?"} {
		if !strings.Contains(p.Text(), name) {
			t.Fatalf("allow page lacks %q: %s", name, p.Text())
		}
	}
	// Someone else's connection id is not a choice.
	mallorys := h.ConnectDirectly(stack.MalloryEmail, "3", "mallory-gh", "gho_mallory")
	if bad := press(t, b, p, "Allow", url.Values{"connection_id": {mallorys.ID}}); bad.Status != http.StatusBadRequest {
		t.Fatalf("foreign connection: %d", bad.Status)
	}
	press(t, b, p, "Allow", url.Values{"connection_id": {home.ID}})
	if got := token(t, h.AgentExchange(subject)); got != "gho_home" {
		t.Fatalf("token %q, want the chosen account's", got)
	}
}

func TestReconnectStory(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour, AccessTokenTTL: time.Hour})
	subject := h.AccessToken(stack.AliceEmail, stack.Agent)
	a := refusal(t, h, h.AgentExchange(subject), "connect_required", connectDesc, connectMsg)
	b := signedIn(h, stack.AliceEmail, stack.AlicePassword)
	b.SignInGitHub(stack.AliceLogin)
	h.GitHub.Approve(stack.AliceLogin, stack.GitHubClientID)
	p := b.MustGet(h.LinkPath(a.Str("connect_uri")))
	b.MustFollow(press(t, b, p, "Connect GitHub", nil))
	token(t, h.AgentExchange(subject))

	// Alice revokes the app at GitHub; when the token expires, the refresh is refused.
	h.GitHub.RevokeAll(stack.AliceLogin)
	h.Clock.Advance(2 * time.Hour)
	subject = h.AccessToken(stack.AliceEmail, stack.Agent)
	r := refusal(t, h, h.AgentExchange(subject), "reconnect_required", reconDesc, reconMsg)
	// Asking again: the connection is now marked broken, and the link is the same.
	again := refusal(t, h, h.AgentExchange(subject), "reconnect_required", reconDesc, reconMsg)
	if again.Str("connect_id") != r.Str("connect_id") {
		t.Fatalf("a second reconnect link")
	}

	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	b.SignInGitHub(stack.AliceLogin)
	h.GitHub.Approve(stack.AliceLogin, stack.GitHubClientID)
	p = b.MustGet(h.LinkPath(r.Str("connect_uri")))
	if !strings.Contains(p.Text(), "Your GitHub account alice-gh no longer works here") {
		t.Fatalf("reconnect page: %s", p.Text())
	}
	res := b.MustFollow(press(t, b, p, "Reconnect GitHub", nil))
	if res.Status != http.StatusOK {
		t.Fatalf("reconnect: %d %s", res.Status, res.Text())
	}
	if got := githubLogin(t, h, token(t, h.AgentExchange(subject))); got != stack.AliceLogin {
		t.Fatalf("token for %q", got)
	}
	if n := len(h.Connections(stack.AliceEmail)); n != 1 {
		t.Fatalf("%d connections after reconnecting the same account, want 1", n)
	}
}

func TestDecline(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	subject := h.AccessToken(stack.AliceEmail, stack.Agent)
	a := refusal(t, h, h.AgentExchange(subject), "connect_required", connectDesc, connectMsg)
	link := h.LinkPath(a.Str("connect_uri"))
	b := signedIn(h, stack.AliceEmail, stack.AlicePassword)
	p := b.MustGet(link)

	// Without the form token, or from another site, nothing happens.
	if r := b.MustPost(link+"/decline", url.Values{}); r.Status != http.StatusForbidden {
		t.Fatalf("decline without token: %d", r.Status)
	}
	_, fields, _ := p.Form("Decline")
	if r := b.MustPostFrom(link+"/decline", fields, "https://evil.example"); r.Status != http.StatusForbidden {
		t.Fatalf("cross-site decline: %d", r.Status)
	}
	if r := b.MustGet(link); r.Status != http.StatusOK {
		t.Fatalf("the link closed without a valid decline: %d", r.Status)
	}

	r := press(t, b, p, "Decline", nil)
	if r.Status != http.StatusOK || !strings.Contains(r.Text(), "Declined") {
		t.Fatalf("decline: %d %s", r.Status, r.Text())
	}
	if r := b.MustGet(link); r.Status != http.StatusNotFound {
		t.Fatalf("declined link: %d", r.Status)
	}
	// The agent asking again gets a new link, not the declined one.
	again := refusal(t, h, h.AgentExchange(subject), "connect_required", connectDesc, connectMsg)
	if again.Str("connect_id") == a.Str("connect_id") {
		t.Fatalf("declined link handed out again")
	}
}

// Unknown, expired, replaced, declined and finished codes are indistinguishable.
func TestClosedCodesLookAlike(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	alice := signedIn(h, stack.AliceEmail, stack.AlicePassword)
	codes := map[string]string{"random": links.Path(h.Project, secret.New(""))}

	// Expired: Mallory's link, 31 minutes on.
	mallory := h.AccessToken(stack.MalloryEmail, stack.Agent)
	codes["expired"] = h.LinkPath(h.AgentExchange(mallory).Str("connect_uri"))

	// Replaced, declined and finished: Alice's links, one after the other.
	subject := h.AccessToken(stack.AliceEmail, stack.Agent)
	codes["replaced"] = h.LinkPath(h.AgentExchange(subject).Str("connect_uri"))
	h.ConnectDirectly(stack.AliceEmail, "7", "alice-gh", "gho_alice")
	codes["declined"] = h.LinkPath(h.AgentExchange(subject).Str("connect_uri"))
	press(t, alice, alice.MustGet(codes["declined"]), "Decline", nil)
	codes["done"] = h.LinkPath(h.AgentExchange(subject).Str("connect_uri"))
	press(t, alice, alice.MustGet(codes["done"]), "Allow", nil)
	token(t, h.AgentExchange(subject))

	h.Clock.Advance(31 * time.Minute)

	var ref stack.Page
	anon := h.Browser()
	for _, name := range []string{"random", "expired", "replaced", "declined", "done"} {
		for _, b := range []*stack.Browser{anon, alice} {
			p := b.MustGet(codes[name])
			if p.Status != http.StatusNotFound {
				t.Fatalf("%s: %d", name, p.Status)
			}
			// The request's own id differs on every answer, whatever the code.
			p.Body = strings.ReplaceAll(p.Body, p.Header.Get("X-Request-Id"), "REQUEST-ID")
			p.Header.Del("Date")
			p.Header.Del("X-Request-Id")
			if ref.Body == "" {
				ref = p
				continue
			}
			if p.Body != ref.Body {
				t.Errorf("%s: body differs", name)
			}
			if len(p.Header) != len(ref.Header) {
				t.Errorf("%s: headers %v, want %v", name, p.Header, ref.Header)
			}
			for k := range ref.Header {
				if p.Header.Get(k) != ref.Header.Get(k) {
					t.Errorf("%s: header %s = %q, want %q", name, k, p.Header.Get(k), ref.Header.Get(k))
				}
			}
		}
	}
	// POSTs to closed codes get the same page.
	_, fields, _ := alice.MustGet(h.Issuer + "/sign-out").Form("Sign out")
	for name, path := range codes {
		p := alice.MustPost(path+"/decline", fields)
		if p.Status != http.StatusNotFound || strings.ReplaceAll(p.Body, p.Header.Get("X-Request-Id"), "REQUEST-ID") != ref.Body {
			t.Errorf("POST to %s: %d", name, p.Status)
		}
	}
}

func TestConcurrentExchangesMakeOneLink(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	subject := h.AccessToken(stack.AliceEmail, stack.Agent)
	const n = 64
	answers := make([]stack.Answer, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			answers[i] = h.AgentExchange(subject)
		})
	}
	close(start)
	wg.Wait()
	for i, a := range answers {
		refusal(t, h, a, "connect_required", connectDesc, connectMsg)
		if a.Str("connect_id") != answers[0].Str("connect_id") || a.Str("connect_uri") != answers[0].Str("connect_uri") {
			t.Fatalf("answer %d has another link", i)
		}
	}
	if got := h.CountRows("links"); got != 1 {
		t.Fatalf("%d link rows, want 1", got)
	}
}

// A database read alone cannot open a link: the stored row holds neither the code nor its
// address.
func TestCodeIsNotStoredInTheClear(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	a := h.AgentExchange(h.AccessToken(stack.AliceEmail, stack.Agent))
	code := strings.TrimPrefix(a.Str("connect_uri"), h.Issuer+links.PathPrefix)
	if strings.Contains(string(h.FileBytes()), code) {
		t.Fatalf("the link code is in the database file")
	}
}

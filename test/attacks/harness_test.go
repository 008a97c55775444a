// Package attacks attacks a running Latchkey from outside, as its reviewers will: variants of the
// forwarded connect link, the forwarded upstream authorization URL, consent phishing by a
// self-registered client and refresh-token reuse (docs/security.md), played by two people with
// their own browsers (cookie jars, or real Chromium profiles where browser behaviour is the point)
// and by third-party clients. Every test asserts that an attack is refused, what each person sees,
// and what ends up stored.
//
// The installation is test/stack with the connect-link stories (Options.Links): the real server, a real SQLite file,
// the fake GitHub on its own listener, an injected clock, Alice and Mallory.
package attacks

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/links"
)

// Texts people read; a test that looks for them fails when the wording that protects people
// goes away.
const (
	wrongPersonText = "This link was made for another account"
	notFoundText    = "There is nothing at this address"
	crossSiteText   = "This request came from another site"
	confirmHeading  = "Finish this connection?"
	notYoursText    = "It is not yours to finish."
	expiredText     = "It has expired or has already been used"
	websiteWarning  = "Access goes to a website"
	tickBoxText     = "I set up this connection and expected access to go to"
	policyRefusal   = "This organisation only allows recognised apps to connect"
)

// env is one installation under attack.
type env struct {
	*stack.Stack
	t *testing.T
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return &env{Stack: stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour}), t: t}
}

func newEnvOn(t *testing.T, latchkeyHost, githubHost string) *env {
	t.Helper()
	return &env{Stack: stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour, FrontHost: latchkeyHost, GitHubHost: githubHost}), t: t}
}

// project returns the project as the server sees it now.
func (e *env) project() *config.Project {
	return e.Holder().Load().Project(stack.ProjectKey)
}

// update publishes a changed copy of the project, as the controller would after an edit.
func (e *env) update(fn func(p *config.Project)) {
	e.t.Helper()
	old := e.Holder().Load()
	snap := &config.Snapshot{Projects: map[string]*config.Project{}, Version: old.Version + 1}
	for k, p := range old.Projects {
		snap.Projects[k] = p
	}
	cp := *old.Projects[stack.ProjectKey]
	fn(&cp)
	snap.Projects[stack.ProjectKey] = &cp
	e.Holder().Store(snap)
}

// addOtherProject publishes a second project, team/other, on the same server, with the same
// people and its own GitHub connector (same audience), and returns its issuer.
func (e *env) addOtherProject() string {
	e.t.Helper()
	old := e.Holder().Load()
	demo := old.Projects[stack.ProjectKey]
	other := *demo
	other.Key, other.Name, other.DisplayName = "team/other", "other", "Other Team"
	other.Issuer = e.Front.URL + "/team/other"
	conn := *e.Connector
	conn.Key, conn.Namespace, conn.CallbackURL = "team/github", "team", other.Issuer+config.CallbackPath("team", "github")
	other.Connectors = map[string]*config.Connector{conn.Key: &conn}
	other.ConnectorsByAudience = map[string]*config.Connector{conn.Audience: &conn}
	other.Clients = map[string]*config.Client{}
	for id, c := range demo.Clients {
		cc := *c
		cc.Connectors = []string{conn.Key}
		other.Clients[id] = &cc
	}
	snap := &config.Snapshot{Projects: map[string]*config.Project{}, Version: old.Version + 1}
	for k, p := range old.Projects {
		snap.Projects[k] = p
	}
	snap.Projects[other.Key] = &other
	e.Holder().Store(snap)
	return other.Issuer
}

// ---------------------------------------------------------------------------------------------
// People and their browsers

// signedIn returns a new browser signed in as email.
func (e *env) signedIn(email string) *stack.Browser {
	e.t.Helper()
	b := e.Browser()
	b.MustSignIn(email, password(email))
	return b
}

// signOut signs b out of the project through its sign-out page.
func (e *env) signOut(b *stack.Browser) {
	e.t.Helper()
	action, f, ok := b.MustGet(e.Issuer + "/sign-out").Form("Sign out")
	if !ok {
		e.t.Fatal("no Sign out button")
	}
	b.MustPost(action, f)
	if _, _, ok := b.MustGet(e.Issuer + "/sign-out").Form("Sign out"); ok {
		e.t.Fatal("still signed in after signing out")
	}
}

func password(email string) string {
	switch email {
	case stack.AliceEmail:
		return stack.AlicePassword
	case stack.MalloryEmail:
		return stack.MalloryPassword
	}
	return "no such password"
}

// signInAt answers a sign-in page (the form) as email, filling in its Email and Password
// fields, and returns the page after the POST.
func signInAt(t *testing.T, b *stack.Browser, form stack.Page, email, pw string) stack.Page {
	t.Helper()
	return b.MustFillSignIn(form, email, pw)
}

// ---------------------------------------------------------------------------------------------
// Links

// linkFor makes a connect link for email's Repo Helper, as the token exchange would, and
// returns the link's path on Latchkey and the refusal.
func (e *env) linkFor(email string) (path string, refusal stack.Answer, subject string) {
	e.t.Helper()
	subject = e.AccessToken(email, stack.Agent)
	refusal = e.AgentExchange(subject)
	if refusal.Status != http.StatusBadRequest || refusal.Str("connect_uri") == "" {
		e.t.Fatalf("exchange for %s: %d %s", email, refusal.Status, refusal.Raw)
	}
	return e.LinkPath(refusal.Str("connect_uri")), refusal, subject
}

// stored counts what a link could have changed.
func (e *env) stored() (connections, states, permissions int) {
	return e.CountRows("connections"), e.CountRows("callback_states"), e.CountRows("agent_permissions")
}

func (e *env) assertNothingStored(what string) {
	e.t.Helper()
	if c, s, p := e.stored(); c+s+p != 0 {
		e.t.Fatalf("%s: %d connections, %d callback states, %d permissions stored; want none", what, c, s, p)
	}
}

// linkState reads a link's state straight from the store.
func (e *env) linkState(connectID string) store.LinkState {
	e.t.Helper()
	l, err := e.Store().GetLink(context.Background(), connectID)
	if err != nil {
		e.t.Fatal(err)
	}
	return l.State
}

// ---------------------------------------------------------------------------------------------
// OAuth clients

type pkce struct{ verifier, challenge string }

func newPKCE() pkce {
	v := secret.New("")
	s := sha256.Sum256([]byte(v))
	return pkce{verifier: v, challenge: base64.RawURLEncoding.EncodeToString(s[:])}
}

// registered is a dynamically registered public client and its registration access token.
type registered struct {
	ID, RegToken string
}

// register registers a client (RFC 7591) and returns its answer.
func (e *env) register(meta map[string]any) (int, map[string]any) {
	e.t.Helper()
	body, _ := json.Marshal(meta)
	resp, err := http.Post(e.Issuer+"/register", "application/json", strings.NewReader(string(body)))
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// registerPublic registers a public client with refresh tokens, named name.
func (e *env) registerPublic(name string, redirects ...string) registered {
	e.t.Helper()
	status, out := e.register(map[string]any{
		"client_name": name, "redirect_uris": redirects, "token_endpoint_auth_method": "none",
		"grant_types": []string{"authorization_code", "refresh_token"},
	})
	if status != http.StatusCreated {
		e.t.Fatalf("registering %s %v: %d %v", name, redirects, status, out)
	}
	id, _ := out["client_id"].(string)
	rat, _ := out["registration_access_token"].(string)
	return registered{ID: id, RegToken: rat}
}

func (e *env) authorizeURL(clientID, redirect string, pk pkce, extra url.Values) string {
	q := url.Values{
		"response_type": {"code"}, "client_id": {clientID}, "state": {"st-" + clientID},
		"code_challenge": {pk.challenge}, "code_challenge_method": {"S256"}, "scope": {"openid"},
	}
	if redirect != "" {
		q.Set("redirect_uri", redirect)
	}
	for k, v := range extra {
		q[k] = v
	}
	return e.Issuer + "/authorize?" + q.Encode()
}

// consentFields are the consent page's form fields with decision=allow, and the value of the
// box confirming where access goes when the page has one.
func consentFields(t *testing.T, p stack.Page) (action string, f url.Values, box string) {
	t.Helper()
	form, ok := p.FindForm("Allow")
	if !ok {
		t.Fatalf("no consent form: %d %s", p.Status, p.Text())
	}
	form.Fields.Set("decision", "allow")
	box, _ = p.CheckboxValue(tickBoxText)
	return form.Action, form.Fields, box
}

// codeFrom returns the code of a redirect to the client, or "".
func codeFrom(p stack.Page) string {
	if p.Status < 300 || p.Status > 399 {
		return ""
	}
	u, err := url.Parse(p.Location())
	if err != nil {
		return ""
	}
	return u.Query().Get("code")
}

// authorizeAs runs the browser side of an authorization request for a signed-in browser:
// Allow on the consent page, ticking the box when there is one. It returns the redirect to the
// client and whether the consent page was shown.
func (e *env) authorizeAs(b *stack.Browser, authURL string) (stack.Page, bool) {
	e.t.Helper()
	p := b.MustGet(authURL)
	if p.Status == http.StatusOK && strings.Contains(p.Body, "Where access goes") {
		action, f, box := consentFields(e.t, p)
		if box != "" {
			f.Set("confirm_destination", box)
		}
		return b.MustPost(action, f), true
	}
	return p, false
}

// tokenCall posts a form to an endpoint under the issuer, with Basic authentication when
// clientSecret is set and client_id in the form otherwise.
func (e *env) tokenCall(path, clientID, clientSecret string, form url.Values) stack.Answer {
	e.t.Helper()
	if clientSecret != "" {
		return e.postBasic(path, clientID, clientSecret, form)
	}
	form.Set("client_id", clientID)
	return e.postBasic(path, "", "", form)
}

func (e *env) postBasic(path, user, pass string, form url.Values) stack.Answer {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.Issuer+path, strings.NewReader(form.Encode()))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if user != "" {
		req.SetBasicAuth(url.QueryEscape(user), url.QueryEscape(pass))
	}
	return e.send(req)
}

func (e *env) send(req *http.Request) stack.Answer {
	e.t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := stack.Answer{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	json.Unmarshal(raw, &a.Body)
	return a
}

// redeem exchanges a code at the token endpoint as a public client.
func (e *env) redeem(clientID, code, redirect, verifier string) stack.Answer {
	e.t.Helper()
	return e.tokenCall("/token", clientID, "", url.Values{
		"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {redirect}, "code_verifier": {verifier},
	})
}

func (e *env) refresh(clientID, rt string) stack.Answer {
	e.t.Helper()
	return e.tokenCall("/token", clientID, "", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}})
}

// active asks introspection, as the MCP server (a declared confidential client) would.
func (e *env) active(tok string) bool {
	e.t.Helper()
	a := e.postBasic("/introspect", stack.MCP, stack.MCPSecret, url.Values{"token": {tok}})
	if a.Status != http.StatusOK {
		e.t.Fatalf("introspection: %d %s", a.Status, a.Raw)
	}
	return a.Body["active"] == true
}

// codeFlow runs a whole authorization code flow for a public client in browser b and returns
// the token response.
func (e *env) codeFlow(b *stack.Browser, clientID, redirect string) stack.Answer {
	e.t.Helper()
	pk := newPKCE()
	p, _ := e.authorizeAs(b, e.authorizeURL(clientID, redirect, pk, nil))
	code := codeFrom(p)
	if code == "" {
		e.t.Fatalf("no code: %d %s %s", p.Status, p.Location(), p.Text())
	}
	a := e.redeem(clientID, code, redirect, pk.verifier)
	if a.Status != http.StatusOK {
		e.t.Fatalf("redeeming: %d %s", a.Status, a.Raw)
	}
	return a
}

// noLinkIn fails when a token endpoint answer carries a connect link.
func noLinkIn(t *testing.T, what string, a stack.Answer) {
	t.Helper()
	for _, k := range []string{"connect_uri", "connect_id", "reason", "access_token"} {
		if _, ok := a.Body[k]; ok {
			t.Errorf("%s: answer carries %s: %s", what, k, a.Raw)
		}
	}
	if strings.Contains(string(a.Raw), links.PathPrefix) {
		t.Errorf("%s: answer carries a link: %s", what, a.Raw)
	}
}

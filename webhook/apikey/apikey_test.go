package apikey_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/netguard"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/apikey"
	"latchkey.dev/latchkey/webhook/callback"
	"latchkey.dev/latchkey/webhook/exchange"
)

// The keys the fake service knows: Alice's, and one it has revoked.
const (
	aliceKey   = "lk_alice_Zk3v9QpL2mN8xR4tW7yB"
	revokedKey = "lk_revoked_0000000000000000000"
	// aliceKeyPart is a part of Alice's key long enough that finding it anywhere is a leak.
	aliceKeyPart = "Zk3v9QpL2mN8xR4tW7yB"
)

const (
	connectorKey = "default/keys"
	audience     = "keys"
	agent        = "key-agent"
	agentSecret  = "key-agent-secret-0123456789abcdef0123"
)

// keyService is a service that issues keys: GET /me with "Authorization: Bearer <key>" answers
// the key's account, 401 for any other key; with down set it answers 503.
type keyService struct {
	srv  *httptest.Server
	hits atomic.Int64
	down atomic.Bool
	// during, when set, runs inside each call, before the answer.
	during atomic.Pointer[func()]
}

func newKeyService(t *testing.T) *keyService {
	ks := &keyService{}
	ks.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ks.hits.Add(1)
		if fn := ks.during.Load(); fn != nil {
			(*fn)()
		}
		if ks.down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if r.URL.Path != "/me" || r.Header.Get("Authorization") != "Bearer "+aliceKey {
			// A service that echoes what it was sent: nothing of this may reach a log or a page.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"message":"bad credentials %s"}`, r.Header.Get("Authorization"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"user":{"id":90210,"handle":"alice-at-keys"}}`))
	}))
	t.Cleanup(ks.srv.Close)
	return ks
}

type fixture struct {
	h    *stack.Stack
	ks   *keyService
	c    *config.Connector
	logs func() string
}

// setup starts an installation with an API-key connector, default/keys, whose check call goes
// to the fake service on loopback (allowed for it, as a Project's upstreamNetwork would), and an
// agent that may exchange for it.
func setup(t *testing.T) *fixture {
	var mu sync.Mutex
	var logged bytes.Buffer
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintln(&logged, prefix, args)
	}, funcr.Options{Verbosity: 10})
	h := stack.New(t, stack.Options{Audit: true, Logger: log})
	ks := newKeyService(t)
	c := &config.Connector{
		Key: connectorKey, Namespace: "default", Name: "keys", DisplayName: "KeyService", Audience: audience,
		APIKey: &config.APIKey{
			CheckURL: ks.srv.URL + "/me", Method: http.MethodGet, Header: "Authorization", Format: "Bearer {key}",
			IDField: "user.id", NameField: "user.handle", Hint: "Make a key under Settings, Keys.",
		},
		AllowedNetworks: netguard.Loopback,
	}
	// Before any request: the published snapshot holds these maps.
	h.Project.Connectors[c.Key] = c
	h.Project.ConnectorsByAudience[c.Audience] = c
	h.Project.Clients[agent] = &config.Client{
		ID: agent, SecretHash: secret.Hash(agentSecret), Name: "Key Agent", RedirectURIs: []string{"http://127.0.0.1/agent"},
		GrantTypes: []string{"authorization_code", exchange.GrantType}, Scopes: []string{"openid"},
		TokenEndpointAuthMethod: "client_secret_basic", Connectors: []string{c.Key},
	}
	return &fixture{h: h, ks: ks, c: c, logs: func() string {
		mu.Lock()
		defer mu.Unlock()
		return logged.String()
	}}
}

func (f *fixture) keyConnections(email string) []store.Connection {
	var out []store.Connection
	for _, c := range f.h.Connections(email) {
		if c.Connector == connectorKey {
			out = append(out, c)
		}
	}
	return out
}

// keyPage opens the account area's key page through Connect on the account page.
func keyPage(t *testing.T, b *stack.Browser) stack.Page {
	t.Helper()
	res := b.PressOnAccount("Connect KeyService")
	if res.Status != http.StatusSeeOther || !strings.HasSuffix(res.Location(), apikey.PathPrefix+"default/keys") {
		t.Fatalf("Connect answered %d, Location %q", res.Status, res.Location())
	}
	page := b.MustGet(res.Location())
	if page.Status != http.StatusOK {
		t.Fatalf("key page answered %d: %s", page.Status, page.Text())
	}
	return page
}

// paste submits key on a key page.
func paste(t *testing.T, b *stack.Browser, page stack.Page, key string) stack.Page {
	t.Helper()
	action, fields, ok := page.Form("Check and connect")
	if !ok {
		t.Fatalf("no key form: %s", page.Body)
	}
	fields.Set(apikey.Field, key)
	return b.MustPost(action, fields)
}

// personToken issues a Latchkey access token of the agent for the person.
func personToken(t *testing.T, h *stack.Stack, subject string) string {
	t.Helper()
	tok := secret.New(secret.PrefixAccessToken)
	now := h.Clock.Now()
	if err := h.Store().CreateTokens(context.Background(), store.Token{
		Hash: secret.Hash(tok), Kind: store.AccessToken, Project: stack.ProjectKey, ClientID: agent,
		Subject: subject, Scopes: []string{"openid"}, FamilyID: secret.New(""),
		AuthTime: now, IssuedAt: now, ExpiresAt: now.Add(48 * time.Hour),
	}); err != nil {
		t.Fatal(err)
	}
	return tok
}

// exchangeKey is the agent's token exchange for the key service; it returns the status and body.
func exchangeKey(t *testing.T, h *stack.Stack, subject string) (int, map[string]any) {
	t.Helper()
	form := url.Values{
		"grant_type": {exchange.GrantType}, "subject_token": {subject}, "subject_token_type": {exchange.TokenTypeAccessToken},
		"audience": {audience},
	}
	req, _ := http.NewRequest(http.MethodPost, h.Issuer+"/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(agent, url.QueryEscape(agentSecret))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

// TestAPIKeyConnectionEndToEnd: Alice connects the key service from her account page. A wrong
// key and a service that is down each say so on the page and store nothing; her key is checked
// once, stored sealed, handed to her agent by token exchange exactly as an OAuth token, and
// gone after Disconnect. The key is in no log line, audit record, page or plain database byte.
func TestAPIKeyConnectionEndToEnd(t *testing.T) {
	f := setup(t)
	h := f.h
	b := h.Browser()
	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	page := keyPage(t, b)
	if cc := page.Header.Get("Cache-Control"); !strings.Contains(cc, "no-store") {
		t.Errorf("key page Cache-Control = %q, want no-store", cc)
	}
	if !strings.Contains(page.Text(), "Make a key under Settings, Keys.") || !strings.Contains(page.Body, `type="password"`) {
		t.Errorf("the key page lacks the hint or a password-type field: %s", page.Body)
	}

	refusals := []struct {
		name, key string
		down      bool
		status    int
		says      string
		reason    string
	}{
		{"revoked key", revokedKey, false, http.StatusBadRequest, "KeyService did not accept this key", "bad_key"},
		{"service down", aliceKey, true, http.StatusBadGateway, "KeyService could not be reached to check the key", "service"},
		{"not a key", "two words", false, http.StatusBadRequest, "Paste the whole key", ""},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			f.ks.down.Store(tc.down)
			defer f.ks.down.Store(false)
			res := paste(t, b, page, tc.key)
			if res.Status != tc.status || !strings.Contains(res.Text(), tc.says) || !strings.Contains(res.Text(), "Nothing was saved") {
				t.Fatalf("answered %d: %s", res.Status, res.Text())
			}
			if strings.Contains(res.Body, tc.key) {
				t.Error("the page echoes the key back")
			}
			if n := len(f.keyConnections(stack.AliceEmail)); n != 0 {
				t.Fatalf("%d connections stored after a refused key", n)
			}
			if tc.reason != "" {
				failed := h.Trail(events.ConnectionFailed)[events.ConnectionFailed]
				if failed.Details["reason"] != tc.reason || failed.Details["method"] != "api_key" {
					t.Errorf("connection.failed details = %v, want reason %s", failed.Details, tc.reason)
				}
			}
		})
	}

	before := f.ks.hits.Load()
	res := paste(t, b, page, "  "+aliceKey+"\n")
	if res.Status != http.StatusOK || !strings.Contains(res.Text(), "Your KeyService account alice-at-keys is now connected.") {
		t.Fatalf("a good key answered %d: %s", res.Status, res.Text())
	}
	if got := f.ks.hits.Load() - before; got != 1 {
		t.Errorf("the service was called %d times for one key, want once", got)
	}
	conns := f.keyConnections(stack.AliceEmail)
	if len(conns) != 1 || conns[0].AccountID != "90210" || conns[0].AccountName != "alice-at-keys" ||
		conns[0].Expiry != nil || conns[0].RefreshToken != nil || conns[0].Status != store.ConnectionActive {
		t.Fatalf("connections = %+v", conns)
	}
	saved := h.Trail(events.ConnectionSaved)[events.ConnectionSaved]
	if saved.Actor != conns[0].Subject || saved.Details["method"] != "api_key" || saved.Details["account_id"] != "90210" {
		t.Errorf("connection.saved = %+v", saved)
	}

	subject := personToken(t, h, conns[0].Subject)
	if err := h.Store().AllowAgent(context.Background(), store.AgentPermission{
		Project: stack.ProjectKey, Subject: conns[0].Subject, Connector: connectorKey, ClientID: agent, ConnectionID: conns[0].ID, CreatedAt: h.Clock.Now(),
	}); err != nil {
		t.Fatal(err)
	}
	status, body := exchangeKey(t, h, subject)
	if status != http.StatusOK || body["access_token"] != aliceKey || body["token_type"] != "Bearer" || body["expires_in"] != nil {
		t.Fatalf("token exchange answered %d %v; want Alice's key as a Bearer token without expiry", status, body)
	}
	// A key does not expire in Latchkey: a month later it is still handed out, without a call.
	h.Clock.Advance(31 * 24 * time.Hour)
	hits := f.ks.hits.Load()
	if status, body := exchangeKey(t, h, personToken(t, h, conns[0].Subject)); status != http.StatusOK || body["access_token"] != aliceKey {
		t.Fatalf("a month later token exchange answered %d %v", status, body)
	}
	if f.ks.hits.Load() != hits {
		t.Error("handing the key out called the service")
	}

	b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	acct := b.Account()
	if !strings.Contains(acct.Text(), "alice-at-keys") {
		t.Errorf("the account page does not name the key's account: %s", acct.Text())
	}
	for name, haystack := range map[string]string{
		"account page": acct.Body, "success page": res.Body, "log": f.logs(),
		"database": string(h.FileBytes()), "sealed columns": string(h.ConnectionBytes()),
	} {
		if strings.Contains(haystack, aliceKeyPart) {
			t.Errorf("the %s holds Alice's key", name)
		}
	}
	for _, rec := range h.Audit() {
		raw, _ := json.Marshal(rec)
		if strings.Contains(string(raw), aliceKeyPart) || strings.Contains(string(raw), "lk_revoked") {
			t.Errorf("audit record %s holds a key: %s", rec.Action, raw)
		}
	}

	gone := b.PressOnAccount("Disconnect")
	if gone.Status != http.StatusSeeOther {
		t.Fatalf("Disconnect answered %d", gone.Status)
	}
	if n := len(f.keyConnections(stack.AliceEmail)); n != 0 {
		t.Fatalf("%d key connections after Disconnect", n)
	}
	if status, body := exchangeKey(t, h, personToken(t, h, conns[0].Subject)); status != http.StatusBadRequest || body["reason"] != "connect_required" {
		t.Errorf("after Disconnect token exchange answered %d %v; want the connect_required refusal", status, body)
	}
}

// connectLink asks for Alice's key through the agent and returns the connect link the refusal
// holds.
func connectLink(t *testing.T, f *fixture, b *stack.Browser) (link, subject string) {
	t.Helper()
	b.MustSignIn(stack.AliceEmail, stack.AlicePassword) // Alice exists once she has signed in.
	subject = personToken(t, f.h, f.h.Person(stack.AliceEmail).ID)
	status, body := exchangeKey(t, f.h, subject)
	link, _ = body["connect_uri"].(string)
	if status != http.StatusBadRequest || body["reason"] != "connect_required" || link == "" {
		t.Fatalf("token exchange answered %d %v; want a connect link", status, body)
	}
	return link, subject
}

// TestAPIKeyThroughConnectLink: Alice opens the link her agent was refused with, presses
// Connect, pastes her key; the link closes, the agent may use the account, and its next token
// exchange gets the key.
func TestAPIKeyThroughConnectLink(t *testing.T) {
	f := setup(t)
	b := f.h.Browser()
	link, subject := connectLink(t, f, b)
	offer := b.MustGet(link)
	action, fields, ok := offer.Form("Connect KeyService")
	if offer.Status != http.StatusOK || !ok {
		t.Fatalf("link page %d without Connect: %s", offer.Status, offer.Text())
	}
	if strings.Contains(offer.Text(), "check which account you are signed in to") {
		t.Error("the link page of a key asks which account is signed in at the service")
	}
	res := b.MustPost(action, fields)
	if res.Status != http.StatusSeeOther || res.Location() != link+"/api-key" {
		t.Fatalf("Connect answered %d, Location %q", res.Status, res.Location())
	}
	page := b.MustGet(res.Location())
	if page.Status != http.StatusOK || !strings.Contains(page.Text(), "Once it is connected, Key Agent may use it.") {
		t.Fatalf("link key page %d: %s", page.Status, page.Text())
	}
	done := paste(t, b, page, aliceKey)
	if done.Status != http.StatusOK || !strings.Contains(done.Text(), "Key Agent may now use your KeyService account alice-at-keys.") {
		t.Fatalf("pasting answered %d: %s", done.Status, done.Text())
	}
	if status, body := exchangeKey(t, f.h, subject); status != http.StatusOK || body["access_token"] != aliceKey {
		t.Fatalf("token exchange after the link answered %d %v", status, body)
	}
	if again := b.MustGet(link + "/api-key"); again.Status != http.StatusNotFound {
		t.Errorf("the finished link's key page answered %d, want 404", again.Status)
	}
}

// TestAPIKeyAttacks plays whoever must not get a key in: another person with Alice's link, a
// browser whose sign-in is not recent, a project that asks for a passkey, a cross-site form,
// and a connector whose check URL the Project does not allow. Each is refused, nothing is
// stored, and the key is sent nowhere.
func TestAPIKeyAttacks(t *testing.T) {
	t.Run("another person's session pastes into Alice's connect link", func(t *testing.T) {
		f := setup(t)
		link, _ := connectLink(t, f, f.h.Browser())
		mallory := f.h.Browser()
		mallory.MustSignIn(stack.MalloryEmail, stack.MalloryPassword)
		page := mallory.MustGet(link + "/api-key")
		if page.Status != http.StatusForbidden || !strings.Contains(page.Text(), "made for another account") {
			t.Fatalf("Mallory's GET of Alice's key page answered %d: %s", page.Status, page.Text())
		}
		form := url.Values{"csrf_token": {csrf(t, mallory)}, apikey.Field: {aliceKey}}
		res := mallory.MustPost(link+"/api-key", form)
		if res.Status != http.StatusForbidden || !strings.Contains(res.Text(), "made for another account") {
			t.Fatalf("Mallory's POST answered %d: %s", res.Status, res.Text())
		}
		f.assertNothing(t)
	})

	t.Run("no recent sign-in", func(t *testing.T) {
		for _, via := range []string{"account", "link"} {
			t.Run(via, func(t *testing.T) {
				f := setup(t)
				b := f.h.Browser()
				var page stack.Page
				if via == "link" {
					link, _ := connectLink(t, f, b)
					page = b.MustGet(link + "/api-key")
				} else {
					b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
					page = keyPage(t, b)
				}
				// The session lives on; the sign-in is no longer recent.
				f.h.Clock.Advance(f.h.Project.Lifetimes.RecentSignIn + time.Minute)
				res := paste(t, b, page, aliceKey)
				if res.Status != http.StatusSeeOther || !strings.Contains(res.Location(), "/sign-in?") || strings.Contains(res.Location(), aliceKeyPart) {
					t.Fatalf("a stale sign-in's paste answered %d, Location %q; want a sign-in without the key", res.Status, res.Location())
				}
				f.assertNothing(t)
			})
		}
	})

	t.Run("the project requires a passkey", func(t *testing.T) {
		f := setup(t)
		f.h.Project.SignIn.RequirePhishingResistant = true
		b := f.h.Browser()
		b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
		page := b.MustGet(f.h.Issuer + apikey.PathPrefix + "default/keys")
		if page.Status != http.StatusSeeOther || !strings.Contains(page.Location(), "passkey=1") {
			t.Fatalf("a password sign-in's key page answered %d, Location %q; want a passkey sign-in", page.Status, page.Location())
		}
		form := url.Values{"csrf_token": {csrf(t, b)}, apikey.Field: {aliceKey}}
		res := b.MustPost(f.h.Issuer+apikey.PathPrefix+"default/keys", form)
		if res.Status != http.StatusSeeOther || !strings.Contains(res.Location(), "passkey=1") {
			t.Fatalf("a password sign-in's paste answered %d, Location %q; want a passkey sign-in", res.Status, res.Location())
		}
		f.assertNothing(t)
		// With a passkey sign-in the same paste works: the policy, not the page, refused.
		b.SignInWithPasskey(stack.AliceEmail)
		if res := b.MustPost(f.h.Issuer+apikey.PathPrefix+"default/keys", url.Values{"csrf_token": {csrf(t, b)}, apikey.Field: {aliceKey}}); res.Status != http.StatusOK {
			t.Fatalf("a passkey sign-in's paste answered %d: %s", res.Status, res.Text())
		}
	})

	t.Run("cross-site POST without the form token", func(t *testing.T) {
		f := setup(t)
		b := f.h.Browser()
		b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
		target := f.h.Issuer + apikey.PathPrefix + "default/keys"
		for _, tc := range []struct{ name, origin, csrf string }{
			{"from another site", "https://evil.example", ""},
			{"from another site with a token", "https://evil.example", csrf(t, b)},
			{"same origin without the token", "", ""},
			{"same origin with a wrong token", "", "forged"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				form := url.Values{apikey.Field: {"lk_attacker_key_0123456789"}}
				if tc.csrf != "" {
					form.Set("csrf_token", tc.csrf)
				}
				res := b.MustPostFrom(target, form, tc.origin)
				if res.Status != http.StatusForbidden {
					t.Fatalf("answered %d: %s", res.Status, res.Text())
				}
			})
		}
		f.assertNothing(t)
	})

	t.Run("check URL on loopback without the Project's allowance", func(t *testing.T) {
		f := setup(t)
		f.c.AllowedNetworks = nil
		b := f.h.Browser()
		b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
		res := paste(t, b, keyPage(t, b), aliceKey)
		if res.Status != http.StatusBadGateway || !strings.Contains(res.Text(), "cannot be reached from here") {
			t.Fatalf("answered %d: %s", res.Status, res.Text())
		}
		failed := f.h.Trail(events.ConnectionFailed)[events.ConnectionFailed]
		if failed.Details["reason"] != "address_not_allowed" {
			t.Errorf("connection.failed details = %v", failed.Details)
		}
		f.assertNothing(t)
	})
}

// assertNothing: no key connection stored for anyone, and the service never saw a key.
func (f *fixture) assertNothing(t *testing.T) {
	t.Helper()
	if n := f.h.CountRows("connections"); n != 0 {
		t.Errorf("%d connections stored", n)
	}
	if n := f.ks.hits.Load(); n != 0 {
		t.Errorf("the key service was called %d times", n)
	}
}

// csrf is the browser's form token, read from its account page.
func csrf(t *testing.T, b *stack.Browser) string {
	t.Helper()
	_, fields, ok := b.Account().Form("Connect KeyService")
	if !ok || fields.Get("csrf_token") == "" {
		t.Fatal("no form token on the account page")
	}
	return fields.Get("csrf_token")
}

// TestAPIKeyWhenAccessEnds: what ends a person's access ends their key page too. A key pasted
// after the end is refused with the session; a key whose check is under way when the
// administrator ends the person's access is not saved (connection.failed access_ended), as an
// upstream callback under way is not (docs/leavers.md).
func TestAPIKeyWhenAccessEnds(t *testing.T) {
	ends := []struct {
		name string
		end  func(f *fixture, subject string)
	}{
		{"administrator", func(f *fixture, subject string) {
			if _, err := f.h.Store().EndPersonAccess(context.Background(), stack.ProjectKey, subject, f.h.Clock.Now()); err != nil {
				t.Error(err)
			}
		}},
		{"password file removal", func(f *fixture, _ string) {
			p := *f.h.Project
			p.SignIn.Passwords = map[string]config.PasswordUser{stack.MalloryEmail: p.SignIn.Passwords[stack.MalloryEmail]}
			f.h.Holder().Store(&config.Snapshot{Projects: map[string]*config.Project{stack.ProjectKey: &p}, Version: f.h.Holder().Load().Version + 1})
		}},
	}
	for _, tc := range ends {
		t.Run(tc.name+" before the paste", func(t *testing.T) {
			f := setup(t)
			b := f.h.Browser()
			b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
			page := keyPage(t, b)
			tc.end(f, f.h.Person(stack.AliceEmail).ID)
			res := paste(t, b, page, aliceKey)
			if res.Status != http.StatusSeeOther || !strings.Contains(res.Location(), "/sign-in") {
				t.Fatalf("a paste after the end answered %d, Location %q", res.Status, res.Location())
			}
			f.assertNothing(t)
		})
		t.Run(tc.name+" while the key is checked", func(t *testing.T) {
			f := setup(t)
			b := f.h.Browser()
			b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
			subject := f.h.Person(stack.AliceEmail).ID
			page := keyPage(t, b)
			during := func() {
				f.h.Clock.Advance(time.Second)
				tc.end(f, subject)
			}
			f.ks.during.Store(&during)
			res := paste(t, b, page, aliceKey)
			if res.Status != http.StatusForbidden || !strings.Contains(res.Text(), "Your access to this project has ended. Nothing was connected.") {
				t.Fatalf("a key checked across the end answered %d: %s", res.Status, res.Text())
			}
			if n := f.h.CountRows("connections"); n != 0 {
				t.Fatalf("%d connections saved across the end", n)
			}
			if failed := f.h.Trail(events.ConnectionFailed)[events.ConnectionFailed]; failed.Details["reason"] != "access_ended" {
				t.Errorf("connection.failed details = %v, want reason access_ended", failed.Details)
			}
		})
	}
}

// An API-key connector has no authorization URL: nothing may start an OAuth attempt for it,
// which would send the browser to a relative address built from an empty one.
func TestNoOAuthAttemptForAnAPIKeyConnector(t *testing.T) {
	f := setup(t)
	f.h.Browser().MustSignIn(stack.AliceEmail, stack.AlicePassword)
	req := httptest.NewRequest(http.MethodPost, f.h.Issuer+"/account/connect", nil)
	rec := httptest.NewRecorder()
	if u, err := callback.Begin(rec, req, f.h.Server().Env(), f.h.Store(), f.h.Project, f.c, f.h.Person(stack.AliceEmail).ID, callback.PurposeConnect, ""); err == nil {
		t.Fatalf("Begin started an OAuth attempt for an API-key connector, to %q", u)
	}
	if n := f.h.CountRows("callback_states"); n != 0 || len(rec.Result().Cookies()) != 0 {
		t.Errorf("%d callback states, cookies %v", n, rec.Result().Cookies())
	}
}

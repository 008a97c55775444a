package callback_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/upstream/fakeoauth"
	ct "latchkey.dev/latchkey/webhook/callback/callbacktest"
	"latchkey.dev/latchkey/webhook/exchange"
)

// TestServiceDialectsEndToEnd runs a connection to a Slack-, a Notion- and a Linear-shaped
// service through the real code paths: Connect on the account page, the service's
// authorization, the callback's code exchange and account read, token exchange handing the
// agent the token the service issued, a refresh once it expires (where the service has
// refresh tokens), and revocation at the service when Alice disconnects. Each fake answers in
// its service's documented wire format and refuses the RFC 6749 defaults the dialect replaces.
func TestServiceDialectsEndToEnd(t *testing.T) {
	tests := []struct {
		shape fakeoauth.Shape
		ttl   time.Duration // 0: tokens do not expire and come without refresh token
	}{
		{fakeoauth.Slack, 12 * time.Hour},
		{fakeoauth.Notion, 0},
		{fakeoauth.Linear, 24 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(string(tt.shape), func(t *testing.T) {
			h := ct.New(t, ct.Options{Services: []fakeoauth.Shape{tt.shape}, ServiceTokenTTL: tt.ttl})
			sv := h.Services[tt.shape]
			paths := fakeoauth.PathsOf(tt.shape)

			b := h.Browser()
			b.SignIn(ct.AliceEmail, ct.AlicePassword)
			res := b.Press("Connect " + sv.Connector.DisplayName)
			if res.Status != http.StatusSeeOther || !strings.HasPrefix(res.Location(), sv.URL+paths.Authorize+"?") {
				t.Fatalf("Connect answered %d, Location %q", res.Status, res.Location())
			}
			u, _ := url.Parse(sv.URL)
			b.Jar.SetCookies(u, []*http.Cookie{sv.Fake.SessionCookie(ct.AliceLogin)})
			back := b.Get(res.Location())
			if back.Status != http.StatusFound || !strings.HasPrefix(back.Location(), sv.Connector.CallbackURL+"?") {
				t.Fatalf("the service answered %d, Location %q: %s", back.Status, back.Location(), back.Body)
			}
			done := b.Get(back.Location())
			if done.Status != http.StatusOK || !strings.Contains(done.Text(), "Connected") {
				t.Fatalf("callback answered %d: %s", done.Status, done.Text())
			}
			var conn store.Connection
			for _, c := range h.Connections(ct.AliceEmail) {
				if c.Connector == sv.Connector.Key {
					conn = c
				}
			}
			if conn.AccountID != "U0ALICE" || conn.Status != store.ConnectionActive {
				t.Fatalf("connection = %+v; want Alice's account U0ALICE", conn)
			}
			if tt.ttl == 0 && conn.Expiry != nil {
				t.Errorf("a token without expires_in was stored as expiring at %v", conn.Expiry)
			}

			subject := agentToken(t, h, conn)
			first := exchangeFor(t, h, subject, sv.Connector.Audience)
			if !sv.Fake.Live(first) {
				t.Fatalf("token exchange handed out %q, not a live token the service issued", first)
			}

			last := first
			if tt.ttl > 0 {
				h.Clock.Advance(tt.ttl + time.Minute)
				last = exchangeFor(t, h, subject, sv.Connector.Audience)
				if last == first || !sv.Fake.Live(last) {
					t.Fatalf("after expiry token exchange handed out %q (first %q); want a refreshed live token", last, first)
				}
				refreshes := 0
				for _, r := range sv.Fake.Requests() {
					if r.Path == paths.Token && r.Params.Get("grant_type") == "refresh_token" {
						refreshes++
					}
				}
				if refreshes != 1 {
					t.Errorf("%d refresh requests, want 1", refreshes)
				}
			}

			// The clock moved past Alice's Latchkey session too.
			b.SignIn(ct.AliceEmail, ct.AlicePassword)
			gone := b.Press("Disconnect")
			if gone.Status/100 != 3 && gone.Status != http.StatusOK {
				t.Fatalf("Disconnect answered %d", gone.Status)
			}
			if sv.Fake.Live(last) {
				t.Error("the service still honours the token after Alice disconnected")
			}
			revoked := false
			for _, r := range sv.Fake.Requests() {
				if r.Path == paths.Revoke && r.Params.Get("token") == last {
					revoked = true
				}
			}
			if !revoked {
				t.Error("no revocation of the access token reached the service")
			}
			if tt.shape == fakeoauth.Notion {
				for _, r := range sv.Fake.Requests()[1:] {
					if r.Header.Get("Notion-Version") != fakeoauth.NotionVersion {
						t.Errorf("%s %s without Notion-Version", r.Method, r.Path)
					}
				}
			}
			if n := len(h.Connections(ct.AliceEmail)); n != 0 {
				t.Errorf("%d connections left after Disconnect", n)
			}
		})
	}
}

// agentToken issues Alice a Latchkey access token for the Agent client and lets the Agent use
// her connection, as her consent would.
func agentToken(t *testing.T, h *ct.Harness, conn store.Connection) string {
	t.Helper()
	ctx := context.Background()
	tok := secret.New(secret.PrefixAccessToken)
	now := h.Clock.Now()
	if err := h.Store.CreateTokens(ctx, store.Token{
		Hash: secret.Hash(tok), Kind: store.AccessToken, Project: ct.ProjectKey, ClientID: ct.Agent,
		Subject: conn.Subject, Scopes: []string{"openid"}, FamilyID: secret.New(""),
		AuthTime: now, IssuedAt: now, ExpiresAt: now.Add(48 * time.Hour),
	}); err != nil {
		t.Fatal(err)
	}
	if err := h.Store.AllowAgent(ctx, store.AgentPermission{
		Project: ct.ProjectKey, Subject: conn.Subject, Connector: conn.Connector, ClientID: ct.Agent, ConnectionID: conn.ID, CreatedAt: now,
	}); err != nil {
		t.Fatal(err)
	}
	return tok
}

// exchangeFor is the Agent's token exchange (RFC 8693) for audience; it returns the token.
func exchangeFor(t *testing.T, h *ct.Harness, subject, audience string) string {
	t.Helper()
	form := url.Values{
		"grant_type": {exchange.GrantType}, "subject_token": {subject}, "subject_token_type": {exchange.TokenTypeAccessToken},
		"requested_token_type": {exchange.TokenTypeAccessToken}, "audience": {audience},
	}
	req, _ := http.NewRequest(http.MethodPost, h.Issuer+"/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(ct.Agent, url.QueryEscape(ct.AgentSecret))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	at, _ := body["access_token"].(string)
	if resp.StatusCode != http.StatusOK || at == "" {
		t.Fatalf("token exchange answered %d %v", resp.StatusCode, body)
	}
	// Slack calls its user tokens "user"; the agent must be told how to send it.
	if body["token_type"] != "Bearer" {
		t.Errorf("token_type = %v, want Bearer", body["token_type"])
	}
	return at
}

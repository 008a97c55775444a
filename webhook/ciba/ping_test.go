package ciba_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/netguard"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/ciba"
)

const (
	pingBot       = "lkc_ping-bot"
	pingBotSecret = "lk_cs_ping-bot-secret-for-ciba-tests-0123456789abcdef"
)

type notification struct {
	auth, authReqID string
}

// TestPingNotifiesClient: a ping client must send a client_notification_token; once the person
// answers, Latchkey POSTs the auth_req_id to the client's registered endpoint with that token as
// bearer, and the client's poll then gets the token.
func TestPingNotifiesClient(t *testing.T) {
	got := make(chan notification, 1)
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			AuthReqID string `json:"auth_req_id"`
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &body)
		got <- notification{auth: r.Header.Get("Authorization"), authReqID: body.AuthReqID}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(endpoint.Close)
	// The test's endpoint is on loopback, which only this client may reach.
	s := newStack(t, stack.Options{BackchannelNotify: netguard.Client(5*time.Second, netguard.Loopback, nil)})
	s.Project.Clients[pingBot] = &config.Client{
		ID: pingBot, SecretHash: secret.Hash(pingBotSecret), Name: "Ping Bot", GrantTypes: []string{ciba.GrantType},
		TokenEndpointAuthMethod: "client_secret_basic", BackchannelDeliveryMode: "ping",
		BackchannelNotificationEndpoint: endpoint.URL + "/cb",
	}
	form := url.Values{"login_hint": {stack.AliceEmail}, "scope": {"openid"}}
	wantError(t, s.MustPost(ciba.Path, form, pingBot, pingBotSecret), 400, "invalid_request")
	form.Set("client_notification_token", "ntok-8f14e45fceea167a5a36dedd4bea2543")
	a := s.MustPost(ciba.Path, form, pingBot, pingBotSecret)
	if a.Status != http.StatusOK {
		t.Fatalf("ask: %d %s", a.Status, a.Raw)
	}
	id := a.Str("auth_req_id")

	b, pg := signedIn(t, s, stack.AliceEmail, stack.AlicePassword)
	press(t, b, pg, "Approve")
	select {
	case n := <-got:
		if n.auth != "Bearer ntok-8f14e45fceea167a5a36dedd4bea2543" || n.authReqID != id {
			t.Fatalf("notification: %+v", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no ping notification")
	}
	if tok := poll(t, s, id, pingBot, pingBotSecret); tok.Status != http.StatusOK {
		t.Fatalf("token after ping: %d %s", tok.Status, tok.Raw)
	}
}

// TestConcurrentRedemption: of many polls of one approved auth_req_id at once, one gets the
// token; every other is refused with invalid_grant.
func TestConcurrentRedemption(t *testing.T) {
	s := newStack(t, stack.Options{})
	id := mustAsk(t, s, url.Values{"login_hint": {stack.AliceEmail}})
	b, pg := signedIn(t, s, stack.AliceEmail, stack.AlicePassword)
	press(t, b, pg, "Approve")
	const n = 16
	answers := make([]stack.Answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { answers[i] = poll(t, s, id, opsBot, opsBotSecret) })
	}
	wg.Wait()
	won := 0
	for _, a := range answers {
		switch {
		case a.Status == http.StatusOK:
			won++
		case a.Str("error") != "invalid_grant":
			t.Fatalf("unexpected answer %d %s", a.Status, a.Raw)
		}
	}
	if won != 1 {
		t.Fatalf("%d redemptions of one auth_req_id", won)
	}
}

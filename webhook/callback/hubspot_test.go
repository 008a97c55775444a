package callback_test

import (
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/upstream/fakeoauth"
	"latchkey.dev/latchkey/test/stack"
)

// TestHubSpotPortalIsSharedTokensAreNot: a HubSpot connection's account is the portal, so
// Alice's and Mallory's connections from one portal carry the same account id. That must not
// make them one connection: each is hers, with her tokens, and the portal ending Alice's grant
// leaves Mallory's working while Alice is asked to reconnect.
func TestHubSpotPortalIsSharedTokensAreNot(t *testing.T) {
	const ttl = 30 * time.Minute
	h := stack.New(t, stack.Options{Audit: true, Services: []fakeoauth.Shape{fakeoauth.HubSpot}, ServiceTokenTTL: ttl})
	sv := h.Services[fakeoauth.HubSpot]
	paths := fakeoauth.PathsOf(fakeoauth.HubSpot)
	u, _ := url.Parse(sv.URL)

	conns := map[string]store.Connection{}
	tokens := map[string]string{}
	subjects := map[string]string{}
	for _, p := range []struct{ email, password, login string }{
		{stack.AliceEmail, stack.AlicePassword, stack.AliceLogin}, {stack.MalloryEmail, stack.MalloryPassword, stack.MalloryLogin},
	} {
		b := h.Browser()
		b.MustSignIn(p.email, p.password)
		b.Jar.SetCookies(u, []*http.Cookie{sv.Fake.SessionCookie(p.login)})
		connectThroughProvider(t, b, sv, paths, "Connect "+sv.Connector.DisplayName)
		cs := h.Connections(p.email)
		if len(cs) != 1 {
			t.Fatalf("%s has %d connections", p.email, len(cs))
		}
		conns[p.email] = cs[0]
		subjects[p.email] = agentToken(t, h, cs[0])
		tokens[p.email] = exchangeFor(t, h, subjects[p.email], sv.Connector.Audience)
	}
	alice, mallory := conns[stack.AliceEmail], conns[stack.MalloryEmail]
	portal := strconv.Itoa(fakeoauth.HubSpotPortalID)
	if alice.AccountID != portal || mallory.AccountID != portal {
		t.Fatalf("account ids %q and %q; want the portal %s for both", alice.AccountID, mallory.AccountID, portal)
	}
	if alice.ID == mallory.ID || alice.Subject == mallory.Subject {
		t.Fatalf("one connection for two people: %+v", alice)
	}
	if tokens[stack.AliceEmail] == tokens[stack.MalloryEmail] {
		t.Fatal("Alice and Mallory were handed the same HubSpot token")
	}

	sv.Fake.RevokeAll(stack.AliceLogin)
	h.Clock.Advance(ttl + time.Minute)
	if next := exchangeFor(t, h, subjects[stack.MalloryEmail], sv.Connector.Audience); !sv.Fake.Live(next) || next == tokens[stack.MalloryEmail] {
		t.Fatalf("after the portal ended Alice's grant, Mallory was handed %q; want her own refreshed token", next)
	}
	if status, body := exchangeAnswer(t, h, subjects[stack.AliceEmail], sv.Connector.Audience); status != http.StatusBadRequest {
		t.Fatalf("Alice's exchange answered %d %v after her grant ended; want a refusal", status, body)
	}
}

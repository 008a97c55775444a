package admin_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
)

// TestEndedAccessIsRefusedEverywhere ends Alice's access through the admin API and then plays
// Alice and the agent acting for her: the agent's token exchange, its refresh, and Alice's own
// account page are refused at once, because every one of them reads the store and the store
// no longer has what they need. Mallory, in the same Project, keeps everything.
func TestEndedAccessIsRefusedEverywhere(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	ctx := context.Background()
	type person struct {
		email, password, login string
		access, refresh        string
		browser                *stack.Browser
	}
	people := []*person{
		{email: stack.AliceEmail, password: stack.AlicePassword, login: stack.AliceLogin},
		{email: stack.MalloryEmail, password: stack.MalloryPassword, login: stack.MalloryLogin},
	}
	for _, p := range people {
		p.browser = h.Browser()
		p.browser.MustSignIn(p.email, p.password)
		conn := h.ConnectDirectly(p.email, p.login+"-id", p.login, "gho_"+p.login)
		h.Allow(p.email, stack.Agent, conn)
		p.access = h.AccessToken(p.email, stack.Agent)
		p.refresh = secret.New(secret.PrefixRefreshToken)
		now := h.Clock.Now()
		if err := h.Store().CreateTokens(ctx, store.Token{Hash: secret.Hash(p.refresh), Kind: store.RefreshToken,
			Project: stack.ProjectKey, ClientID: stack.Agent, Subject: h.PersonID(p.email), Scopes: []string{"openid"},
			FamilyID: "family-" + p.login, AuthTime: now, IssuedAt: now, ExpiresAt: now.Add(24 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if a := h.AgentExchange(p.access); a.Status != http.StatusOK || a.Str("access_token") != "gho_"+p.login {
			t.Fatalf("%s's exchange before: %d %s", p.email, a.Status, a.Raw)
		}
		if pg := p.browser.Account(); pg.Status != http.StatusOK {
			t.Fatalf("%s's account page before: %d", p.email, pg.Status)
		}
	}
	alice, mallory := people[0], people[1]

	a := startAdmin(t, h.Store(), h.Holder(), h.Clock.Now, nil)
	ns := strings.Split(stack.ProjectKey, "/")[0]
	var st metav1.Status
	if code := a.do("DELETE", base+"/namespaces/"+ns+"/people/"+h.PersonID(alice.email), "", &st); code != http.StatusOK {
		t.Fatalf("end access: %d %+v", code, st)
	}

	if r := h.AgentExchange(alice.access); r.Status != http.StatusBadRequest || r.Str("error") != "invalid_grant" || r.Str("connect_uri") != "" {
		t.Errorf("alice's exchange after: %d %s", r.Status, r.Raw)
	}
	if r := refresh(h, alice.refresh); r.Status != http.StatusBadRequest || r.Str("error") != "invalid_grant" {
		t.Errorf("alice's refresh after: %d %s", r.Status, r.Raw)
	}
	if pg := alice.browser.Account(); pg.Status == http.StatusOK || !strings.Contains(pg.Header.Get("Location"), "/sign-in") {
		t.Errorf("alice's account page after: %d %s", pg.Status, pg.Header.Get("Location"))
	}
	if conns := h.Connections(alice.email); len(conns) != 0 {
		t.Errorf("alice's connections after: %+v", conns)
	}

	if r := h.AgentExchange(mallory.access); r.Status != http.StatusOK {
		t.Errorf("mallory's exchange: %d %s", r.Status, r.Raw)
	}
	if r := refresh(h, mallory.refresh); r.Status != http.StatusOK {
		t.Errorf("mallory's refresh: %d %s", r.Status, r.Raw)
	}
	if pg := mallory.browser.Account(); pg.Status != http.StatusOK {
		t.Errorf("mallory's account page: %d", pg.Status)
	}
	if !strings.Contains(strings.Join(h.AuditActions(), " "), "admin.person.access_ended") {
		t.Errorf("audit: %v", h.AuditActions())
	}
}

func refresh(h *stack.Stack, rt string) stack.Answer {
	return h.ExchangeForm(stack.Agent, stack.AgentSecret, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}})
}

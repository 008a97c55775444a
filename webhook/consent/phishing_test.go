package consent_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
)

// refusal is what spec.redirects.onlyRecognisedApps answers an app it refuses.
const refusal = "This organisation only allows recognised apps to connect"

// tick labels the consent page's box confirming where access goes.
const tick = "I set up this connection and expected access to go to"

// Consent phishing (docs/recognised-apps.md), told end to end: anybody can register a client called "Claude"
// with a callback on their own site and send people a link to the consent page.
func TestConsentPhishingStory(t *testing.T) {
	t.Parallel()
	s := stack.New(t, stack.Options{})
	attacker := "https://claude-ai.evil.example/api/mcp/auth_callback"
	phish := s.MustRegister(`{"client_name":"Claude","logo_uri":"https://claude-ai.evil.example/logo.png",
		"redirect_uris":["` + attacker + `"],"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"]}`)
	b := s.Browser()
	b.SignInPage("", stack.AliceEmail, stack.AlicePassword)
	// Signing in again finds Alice as she is (and tells the test her id).
	alice, err := s.Admin.UpsertPerson(context.Background(), store.Person{Project: stack.ProjectKey, ID: "unused", Source: "password",
		SourceSubject: stack.AliceEmail, Email: stack.AliceEmail, Name: "Alice"})
	if err != nil || alice.ID == "unused" {
		t.Fatalf("alice: %+v %v", alice, err)
	}

	p := b.MustGet(s.AuthorizeURL(phish, attacker, "read", stack.NewPKCE(), nil))
	if p.Status != http.StatusOK {
		t.Fatalf("consent page: %d %s", p.Status, p.Body)
	}
	text := p.Text()
	where, who := strings.Index(text, "Where access goes"), strings.Index(text, "Claude")
	if where < 0 || who < where {
		t.Errorf("the page must lead with where access goes, before the app's name:\n%s", text)
	}
	for _, want := range []string{
		"Access goes to a website this organisation does not recognise",
		attacker, // in full, in the address block
		"I set up this connection and expected access to go to " + attacker,
		"The app calls itself “Claude”",
		"The name was chosen by whoever registered the app: it proves nothing",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the person must see %q:\n%s", want, text)
		}
	}
	if strings.Contains(p.Body, "Access goes to <strong>Claude</strong>") {
		t.Error("a registered name must never read as where access goes")
	}
	if !strings.Contains(p.Body, `<strong>claude-ai.evil.example</strong>`) {
		t.Error("the host the person must check is not emphasised")
	}

	allow, ok := p.FindForm("Allow")
	if !ok {
		t.Fatalf("no Allow button: %q", p.Buttons())
	}
	decide := allow.Fields
	t.Run("Allow without the tick box issues no code", func(t *testing.T) {
		for _, confirm := range []string{"", "https://claude.ai/api/mcp/auth_callback", attacker + "/"} {
			f := url.Values{}
			for k, v := range decide {
				f[k] = v
			}
			if confirm != "" {
				f.Set("confirm_destination", confirm)
			}
			d := b.MustPost(s.Issuer+"/authorize", f)
			if d.Status != http.StatusBadRequest || d.Header.Get("Location") != "" || !strings.Contains(d.Text(), "Tick the box") ||
				!d.HasField(tick) {
				t.Errorf("confirm %q: %d %q", confirm, d.Status, d.Header.Get("Location"))
			}
		}
		if _, err := s.Admin.GetGrant(context.Background(), stack.ProjectKey, alice.ID, phish); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("consent was stored without the tick box: %v", err)
		}
	})
	t.Run("ticked, the person gets what they said they expected", func(t *testing.T) {
		decide.Set("confirm_destination", attacker)
		d := b.MustPost(s.Issuer+"/authorize", decide)
		loc, _ := url.Parse(d.Header.Get("Location"))
		if d.Status != http.StatusSeeOther || !strings.HasPrefix(d.Header.Get("Location"), attacker+"?") || loc.Query().Get("code") == "" {
			t.Errorf("%d %q", d.Status, d.Header.Get("Location"))
		}
	})

	t.Run("with the setting on, no code at all", func(t *testing.T) {
		s.OnlyRecognisedApps(true)
		defer s.OnlyRecognisedApps(false)
		p := b.MustGet(s.AuthorizeURL(phish, attacker, "read", stack.NewPKCE(), url.Values{"prompt": {"consent"}}))
		if p.Status != http.StatusForbidden || p.Header.Get("Location") != "" || !strings.Contains(p.Text(), refusal) ||
			!strings.Contains(p.Text(), attacker) || len(p.Buttons()) != 0 {
			t.Errorf("%d %q\n%s", p.Status, p.Header.Get("Location"), p.Text())
		}
		// The form from before the switch is refused too: the decision is checked again.
		if d := b.MustPost(s.Issuer+"/authorize", decide); d.Status != http.StatusForbidden || d.Header.Get("Location") != "" {
			t.Errorf("decision after the switch: %d %q", d.Status, d.Header.Get("Location"))
		}
		recs := s.AuditOf(events.ConsentRefusedByPolicy)
		if len(recs) != 2 || recs[0].Actor != alice.ID || recs[0].Target != phish || recs[0].Details["unrecognised_redirect_uris"] != attacker {
			t.Errorf("security events: %+v", recs)
		}
		// And the attacker's developer learns at registration.
		r := s.Register(`{"client_name":"Claude","redirect_uris":["` + attacker + `"],"token_endpoint_auth_method":"none"}`)
		if r.Status != http.StatusBadRequest || r.Str("error") != "invalid_redirect_uri" || r.Str("error_description") != refusal {
			t.Errorf("registration: %d %s", r.Status, r.Raw)
		}
	})

	t.Run("one honest and one foreign redirect is refused", func(t *testing.T) {
		both := s.MustRegister(`{"client_name":"Claude","redirect_uris":["https://claude.ai/api/mcp/auth_callback","` + attacker + `"],
			"token_endpoint_auth_method":"none"}`)
		s.OnlyRecognisedApps(true)
		defer s.OnlyRecognisedApps(false)
		p := b.MustGet(s.AuthorizeURL(both, "https://claude.ai/api/mcp/auth_callback", "read", stack.NewPKCE(), nil))
		if p.Status != http.StatusForbidden || p.Header.Get("Location") != "" || !strings.Contains(p.Text(), refusal) {
			t.Errorf("%d %q", p.Status, p.Header.Get("Location"))
		}
		r := s.Register(`{"redirect_uris":["https://claude.ai/api/mcp/auth_callback","` + attacker + `"],"token_endpoint_auth_method":"none"}`)
		if r.Str("error") != "invalid_redirect_uri" || r.Str("error_description") != refusal {
			t.Errorf("registration: %s", r.Raw)
		}
	})

	t.Run("recognised and on-device addresses read as what they are", func(t *testing.T) {
		s.OnlyRecognisedApps(true)
		defer s.OnlyRecognisedApps(false)
		claude := s.MustRegister(`{"client_name":"Claude","redirect_uris":["https://claude.ai/api/mcp/auth_callback"],"token_endpoint_auth_method":"none"}`)
		p := b.MustGet(s.AuthorizeURL(claude, "https://claude.ai/api/mcp/auth_callback", "read", stack.NewPKCE(), nil))
		if p.Status != http.StatusOK || !strings.Contains(p.Body, "Access goes to <strong>Claude</strong>") ||
			p.HasField(tick) || !strings.Contains(p.Text(), "https://claude.ai/api/mcp/auth_callback") {
			t.Errorf("Claude's callback: %d\n%s", p.Status, p.Text())
		}
		f, ok := p.FindForm("Allow")
		if !ok {
			t.Fatalf("no Allow button: %q", p.Buttons())
		}
		if d, _ := b.Submit(f); d.Status != http.StatusSeeOther || !strings.Contains(d.Header.Get("Location"), "code=") {
			t.Errorf("recognised, no tick box needed: %d %q", d.Status, d.Header.Get("Location"))
		}
		p = b.MustGet(s.AuthorizeURL(stack.CLI, "com.example.cli:/cb", "read", stack.NewPKCE(), url.Values{"prompt": {"consent"}}))
		if !strings.Contains(p.Body, "Access goes to <strong>an app on this device</strong>") || p.HasField(tick) {
			t.Errorf("app scheme:\n%s", p.Text())
		}
		p = b.MustGet(s.AuthorizeURL(stack.CLI, "http://127.0.0.1:53682/callback", "read", stack.NewPKCE(), url.Values{"prompt": {"consent"}}))
		if !strings.Contains(p.Body, "Access goes to <strong>an app on this device</strong>") {
			t.Errorf("loopback:\n%s", p.Text())
		}
	})
}

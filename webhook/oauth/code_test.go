package oauth_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/test/stack"
)

// A code is redeemed only by the client it was issued to, at the redirect URI it was sent to,
// with its verifier, before it expires.

func TestCodeFlowPublicClient(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{})
	b := h.Browser()
	pk := stack.NewPKCE()
	loc, _ := b.MustAuthorizeAt(h.AuthorizeURL("cli", "com.example.cli:/cb", "", pk, nil), "bob@example.com", stack.BobPassword)
	if !strings.HasPrefix(loc.String(), "com.example.cli:/cb?") {
		t.Fatalf("redirect %s", loc)
	}
	form := url.Values{"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")},
		"redirect_uri": {"com.example.cli:/cb"}, "code_verifier": {pk.Verifier}, "client_id": {"cli"}}
	r := h.Token(form, "", "")
	if r.Status != 200 || r.Str("refresh_token") == "" {
		t.Fatalf("%d %s", r.Status, r.Raw)
	}
}

func TestCodeBoundToClientAndRedirect(t *testing.T) {
	t.Parallel()
	h := stack.New(t, stack.Options{})
	b := h.Browser()
	for name, tc := range map[string]struct {
		client, secret, redirect string
	}{
		"another client":       {"other", stack.OtherSecret, "https://app.example/cb"},
		"another redirect_uri": {"web", stack.WebSecret, "http://127.0.0.1/callback"},
		"no redirect_uri":      {"web", stack.WebSecret, ""},
	} {
		t.Run(name, func(t *testing.T) {
			pk := stack.NewPKCE()
			loc, _ := b.MustAuthorizeAt(h.AuthorizeURL("web", "https://app.example/cb", "", pk, nil), "alice@example.com", stack.AlicePassword)
			form := url.Values{"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")}, "code_verifier": {pk.Verifier}}
			if tc.redirect != "" {
				form.Set("redirect_uri", tc.redirect)
			}
			if r := h.Token(form, tc.client, tc.secret); r.Status != 400 || r.Str("error") != "invalid_grant" {
				t.Errorf("%d %s", r.Status, r.Raw)
			}
		})
	}
	t.Run("expired code", func(t *testing.T) {
		pk := stack.NewPKCE()
		loc, _ := b.MustAuthorizeAt(h.AuthorizeURL("web", "https://app.example/cb", "", pk, nil), "alice@example.com", stack.AlicePassword)
		h.Clock.Advance(2 * time.Minute)
		r := h.Token(url.Values{"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")},
			"redirect_uri": {"https://app.example/cb"}, "code_verifier": {pk.Verifier}}, "web", stack.WebSecret)
		if r.Status != 400 || r.Str("error") != "invalid_grant" {
			t.Errorf("%d %s", r.Status, r.Raw)
		}
	})
}

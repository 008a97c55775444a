package idjag_test

import (
	"context"
	"io"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth/extauth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"

	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/idjag"
)

// Each case plays someone who holds, or forges, an identity assertion and tries to get a
// token at team/tools that the rules do not give. The good assertion is redeemed last, to show
// that what was refused was the edit and not the setup.
func TestIDJAGAttacks(t *testing.T) {
	t.Parallel()
	s := newIDJAG(t)
	s.Publish()

	cases := []struct {
		name   string
		edit   func(h, c map[string]any)
		client string
		extra  url.Values
		code   string
		desc   string
	}{
		{name: "wrong aud: an assertion for another authorization server",
			edit: func(_, c map[string]any) { c["aud"] = "https://other-as.example" }, code: "invalid_grant", desc: "not for this authorization server"},
		{name: "wrong client_id: an assertion issued for another client",
			edit: func(_, c map[string]any) { c["client_id"] = "sneaky" }, code: "invalid_grant", desc: "another client"},
		{name: "expired",
			edit: func(_, c map[string]any) {
				c["iat"] = s.Clock.Now().Add(-10 * time.Minute).Unix()
				c["exp"] = s.Clock.Now().Add(-5 * time.Minute).Unix()
			}, code: "invalid_grant", desc: "expired"},
		{name: "long-lived: exp a day after iat",
			edit: func(_, c map[string]any) { c["exp"] = s.Clock.Now().Add(24 * time.Hour).Unix() }, code: "invalid_grant", desc: "lives too long"},
		{name: "unsigned: alg none",
			edit: func(h, _ map[string]any) { h["alg"] = "none" }, code: "invalid_grant", desc: "accepted algorithm"},
		{name: "forged: signed with an attacker's key under the issuer's kid",
			edit: func(h, _ map[string]any) { h["kid"] = "forged" }, code: "invalid_grant", desc: "signature does not verify"},
		{name: "key from another issuer: signed with idp.test's key, iss says other-idp.test",
			edit: func(_, c map[string]any) { c["iss"] = stack.OtherIDP }, code: "invalid_grant", desc: "no key of the assertion's issuer"},
		{name: "key from another issuer, its kid too",
			edit: func(h, c map[string]any) { c["iss"] = stack.OtherIDP; h["kid"] = "idp-1" }, code: "invalid_grant", desc: "no key of the assertion's issuer"},
		{name: "typ missing: an ID token of the same issuer",
			edit: func(h, _ map[string]any) { delete(h, "typ") }, code: "invalid_grant", desc: "typ"},
		{name: "typ wrong",
			edit: func(h, _ map[string]any) { h["typ"] = "JWT" }, code: "invalid_grant", desc: "typ"},
		{name: "untrusted issuer",
			edit: func(_, c map[string]any) { c["iss"] = "https://evil-idp.example" }, code: "invalid_grant", desc: "not trusted"},
		{name: "a client the issuer does not admit, named in the assertion",
			edit: func(_, c map[string]any) { c["client_id"] = "outsider" }, client: "outsider", code: "unauthorized_client", desc: "may not present"},
		{name: "scope widening",
			extra: url.Values{"scope": {"repos:read repos:write"}}, code: "invalid_scope", desc: "exceeds the assertion"},
		{name: "resource widening",
			extra: url.Values{"resource": {"https://admin.example/mcp"}}, code: "invalid_target", desc: "not one the assertion names"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client := tc.client
			if client == "" {
				client = "agent"
			}
			wantRefused(t, s.Redeem(s.Assertion(tc.edit), client, tc.extra), tc.code, tc.desc)
		})
	}

	t.Run("replayed jti", func(t *testing.T) {
		a := s.Assertion(nil)
		if r := s.Redeem(a, "agent", nil); r.Status != http.StatusOK {
			t.Fatalf("first redemption: %d %s", r.Status, r.Raw)
		}
		wantRefused(t, s.Redeem(a, "agent", nil), "invalid_grant", "already been used")
		// A new assertion with the same jti is the same assertion.
		jti := ""
		b := s.Assertion(func(_, c map[string]any) { jti = c["jti"].(string) })
		if r := s.Redeem(b, "agent", nil); r.Status != http.StatusOK {
			t.Fatalf("redemption: %d %s", r.Status, r.Raw)
		}
		wantRefused(t, s.Redeem(s.Assertion(func(_, c map[string]any) { c["jti"] = jti }), "agent", nil), "invalid_grant", "already been used")
	})

	t.Run("unrecognised app: a client with a foreign redirect cannot bypass only recognised apps", func(t *testing.T) {
		sneaky := func(_, c map[string]any) { c["client_id"] = "sneaky" }
		if r := s.Redeem(s.Assertion(sneaky), "sneaky", nil); r.Status != http.StatusOK {
			t.Fatalf("before the policy: %d %s", r.Status, r.Raw)
		}
		tools := *s.Tools
		tools.Redirects.OnlyRecognisedApps = true
		s.Tools = &tools
		s.Publish()
		defer func() { tools.Redirects.OnlyRecognisedApps = false; s.Publish() }()
		wantRefused(t, s.Redeem(s.Assertion(sneaky), "sneaky", nil), "invalid_grant", "recognised apps")
		// The recognised agent still redeems.
		if r := s.Redeem(s.Assertion(nil), "agent", nil); r.Status != http.StatusOK {
			t.Fatalf("recognised client: %d %s", r.Status, r.Raw)
		}
	})

	t.Run("narrowing is kept", func(t *testing.T) {
		r := s.Redeem(s.Assertion(func(_, c map[string]any) { c["scope"] = "repos:read repos:write" }), "agent",
			url.Values{"scope": {"repos:read"}, "resource": {stack.ToolsResource}})
		if r.Status != http.StatusOK || r.Str("scope") != "repos:read" {
			t.Fatalf("narrowed redemption: %d %s", r.Status, r.Raw)
		}
	})
}

// The issuing side refuses what its policy does not declare, in RFC 8693's shape.
func TestIDJAGIssuePolicy(t *testing.T) {
	t.Parallel()
	s := newIDJAG(t)
	idt := s.CodeFlowAs(s.Browser(), "web", stack.WebSecret, "openid", "alice@example.com", stack.AlicePassword).Str("id_token")
	ask := func(client, secret string, edit url.Values) stack.Answer {
		f := url.Values{
			"grant_type": {exchangeType}, "requested_token_type": {idjag.TokenTypeIDJAG},
			"subject_token": {idt}, "subject_token_type": {idjag.TokenTypeIDToken},
			"audience": {s.ToolsIssuer}, "resource": {stack.ToolsResource}, "scope": {"repos:read"},
		}
		for k, v := range edit {
			f[k] = v
		}
		return s.Token(f, client, secret)
	}
	wantRefused(t, ask("web", stack.WebSecret, url.Values{"audience": {"https://undeclared.example"}}), "invalid_target", "no ID-JAGs for that audience")
	wantRefused(t, ask("web", stack.WebSecret, url.Values{"resource": {"https://admin.example/mcp"}}), "invalid_target", "is not one")
	wantRefused(t, ask("web", stack.WebSecret, url.Values{"scope": {"repos:admin"}}), "invalid_scope", "exceeds")
	wantRefused(t, ask("web", stack.WebSecret, url.Values{"subject_token": {idt + "x"}}), "invalid_grant", "invalid, expired or revoked")

	// An access token of the person, issued to the client, serves as the subject token too; one
	// issued to another client does not.
	at := s.CodeFlowAs(s.Browser(), "web", stack.WebSecret, "openid", "alice@example.com", stack.AlicePassword).Str("access_token")
	if r := ask("web", stack.WebSecret, url.Values{"subject_token": {at}, "subject_token_type": {idjag.TokenTypeAccessToken}}); r.Status != http.StatusOK {
		t.Fatalf("access token as subject: %d %s", r.Status, r.Raw)
	}
	// An expired ID token is refused.
	s.Clock.Advance(2 * time.Hour)
	wantRefused(t, ask("web", stack.WebSecret, nil), "invalid_grant", "invalid, expired or revoked")
}

// The MCP Go SDK's Enterprise-Managed Authorization client (auth/extauth) runs the whole flow
// against the two Projects: token exchange at the company's Project, the JWT bearer grant at
// the MCP server's.
func TestIDJAGWithMCPGoSDK(t *testing.T) {
	t.Parallel()
	s := newIDJAG(t)
	idt := s.CodeFlowAs(s.Browser(), "web", stack.WebSecret, "openid email", "alice@example.com", stack.AlicePassword).Str("id_token")
	h, err := extauth.NewEnterpriseHandler(&extauth.EnterpriseHandlerConfig{
		IdPIssuerURL:     s.Issuer,
		IdPCredentials:   &oauthex.ClientCredentials{ClientID: "web", ClientSecretAuth: &oauthex.ClientSecretAuth{ClientSecret: stack.WebSecret}},
		MCPAuthServerURL: s.ToolsIssuer,
		MCPResourceURI:   stack.ToolsResource,
		MCPCredentials:   &oauthex.ClientCredentials{ClientID: "agent", ClientSecretAuth: &oauthex.ClientSecretAuth{ClientSecret: stack.ToolsSecret}},
		MCPScopes:        []string{"repos:read"},
		IDTokenFetcher: func(context.Context) (*oauth2.Token, error) {
			return (&oauth2.Token{AccessToken: "unused"}).WithExtra(map[string]any{"id_token": idt}), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	unauthorized := &http.Response{StatusCode: http.StatusUnauthorized, Body: io.NopCloser(strings.NewReader(""))}
	if err := h.Authorize(t.Context(), nil, unauthorized); err != nil {
		t.Fatalf("enterprise-managed authorization: %v", err)
	}
	ts, _ := h.TokenSource(t.Context())
	tok, err := ts.Token()
	if err != nil {
		t.Fatal(err)
	}
	in := s.ToolsIntrospect(tok.AccessToken)
	if in.Body["active"] != true || in.Body["client_id"] != "agent" || in.Body["scope"] != "repos:read" {
		t.Fatalf("the SDK's token at team/tools: %s", in.Raw)
	}
}

// An identity provider trusted for ID-JAGs speaks only for its own people, and for addresses
// only in the domains the Project lists for it: it cannot take over a person who signs in
// another way by naming their address.
func TestIDJAGNoTakeoverByEmail(t *testing.T) {
	t.Parallel()
	s := newIDJAG(t)
	ctx := t.Context()
	// Alice of the password file has signed in to team/tools before.
	alice, err := s.Store().UpsertPerson(ctx, store.Person{Project: stack.ToolsKey, ID: "alice-tools", Source: "password",
		SourceSubject: "alice@example.com", Email: "alice@example.com", CreatedAt: s.Clock.Now()})
	if err != nil {
		t.Fatal(err)
	}
	introspectSub := func(r stack.Answer) any {
		t.Helper()
		if r.Status != http.StatusOK {
			t.Fatalf("redeem: %d %s", r.Status, r.Raw)
		}
		return s.ToolsIntrospect(r.Str("access_token")).Body["sub"]
	}

	// By sub (the default), a subject that looks like her address is the issuer's own person.
	got := introspectSub(s.Redeem(s.Assertion(func(_, c map[string]any) {
		c["sub"], c["email"] = "alice@example.com", "alice@example.com"
	}), "agent", nil))
	if got == alice.ID {
		t.Fatal("an ID-JAG's sub took over the password person")
	}

	// By email, only within emailDomains.
	iss := *s.Tools.IdentityAssertions.Issuers[stack.TestIDP]
	iss.Subject, iss.EmailDomains = "email", []string{"idp.test"}
	tools := *s.Tools
	tools.IdentityAssertions.Issuers = maps.Clone(tools.IdentityAssertions.Issuers)
	tools.IdentityAssertions.Issuers[stack.TestIDP] = &iss
	s.Tools = &tools
	s.Publish()
	wantRefused(t, s.Redeem(s.Assertion(func(_, c map[string]any) { c["email"] = "alice@example.com" }), "agent", nil),
		"invalid_grant", "not in a domain this issuer speaks for")
	wantRefused(t, s.Redeem(s.Assertion(func(_, c map[string]any) { c["email"] = "Alice <alice@idp.test>" }), "agent", nil),
		"invalid_grant", "not in a domain")

	// Once the domain is listed, the administrator has said the issuer speaks for it.
	iss.EmailDomains = []string{"idp.test", "example.com"}
	s.Publish()
	if got := introspectSub(s.Redeem(s.Assertion(func(_, c map[string]any) { c["email"] = "alice@example.com" }), "agent", nil)); got != alice.ID {
		t.Fatalf("sub = %v, want the password person %s", got, alice.ID)
	}
}

// Without createPeople, only people the Project knows get tokens.
func TestIDJAGUnknownPeople(t *testing.T) {
	t.Parallel()
	s := newIDJAG(t)
	s.Tools.IdentityAssertions.Issuers[stack.TestIDP].CreatePeople = false
	wantRefused(t, s.Redeem(s.Assertion(nil), "agent", nil), "invalid_grant", "not known to the project")
}

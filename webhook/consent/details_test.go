package consent_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/authzdetails"
	"latchkey.dev/latchkey/test/stack"
)

const (
	repoAPI = "https://api.github.com/repos/acme/api"
	// readAPI is what Alice approves: read on acme/api.
	readAPI = `[{"type":"github_repository","locations":["` + repoAPI + `"],"actions":["read"]}]`
)

// detailsStack is the test stack whose Project declares github_repository (governing its
// GitHub Connector) and document (with an identifier).
func detailsStack(t *testing.T) *stack.Stack {
	t.Helper()
	s := stack.New(t, stack.Options{DSN: "sqlite:" + t.TempDir() + "/latchkey.db"})
	types, err := authzdetails.NewTypes([]authzdetails.Type{
		{Name: "github_repository", Label: "GitHub repository", Connector: s.Connector.Key, Actions: []string{"read", "write"},
			RequireLocations: true, LocationPrefixes: []string{"https://api.github.com/repos/acme/"}},
		{Name: "document", Label: "Document", Actions: []string{"read"}, Identifier: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Project.AuthorizationDetails = types
	return s
}

func authorizeURL(s *stack.Stack, pk stack.PKCE, details string) string {
	q := url.Values{
		"response_type": {"code"}, "client_id": {stack.Agent}, "redirect_uri": {stack.AgentRedir}, "state": {"st"},
		"code_challenge": {pk.Challenge}, "code_challenge_method": {"S256"}, "scope": {"read"},
		"authorization_details": {details},
	}
	return s.Issuer + "/authorize?" + q.Encode()
}

func get(t *testing.T, b *stack.Browser, u string) stack.Page {
	t.Helper()
	p, err := b.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// approve shows Alice the consent page for details, checks it, allows, and returns the code.
func approve(t *testing.T, s *stack.Stack, b *stack.Browser, details string, check func(body string)) (string, stack.PKCE) {
	t.Helper()
	pk := stack.NewPKCE()
	page := get(t, b, authorizeURL(s, pk, details))
	if page.Status != http.StatusOK || !strings.Contains(page.Body, "Where access goes") {
		t.Fatalf("consent page: %d %s", page.Status, page.Body)
	}
	if check != nil {
		check(page.Body)
	}
	f := page.Hidden()
	f.Set("decision", "allow")
	res, err := b.Post(s.Issuer+"/authorize", f)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(res.Location())
	if err != nil || u.Query().Get("code") == "" {
		t.Fatalf("after Allow: %d %s", res.Status, res.Location())
	}
	return u.Query().Get("code"), pk
}

// TestAuthorizationDetailsFromConsentToExchange tells the whole story once: Repo Helper asks
// to read acme/api; Alice sees that in words and allows it; the tokens carry it (token
// response, introspection); a refresh may narrow and never widen, and the refresh token keeps
// the approval; the exchange for GitHub is held to it.
func TestAuthorizationDetailsFromConsentToExchange(t *testing.T) {
	s := detailsStack(t)
	ctx := context.Background()
	meta := get(t, s.Browser(), s.Issuer+"/.well-known/oauth-authorization-server")
	if !strings.Contains(meta.Body, `"authorization_details_types_supported":["document","github_repository"]`) {
		t.Fatalf("metadata: %s", meta.Body)
	}
	b := s.Browser()
	if err := b.SignIn(stack.AliceEmail, stack.AlicePassword); err != nil {
		t.Fatal(err)
	}
	code, pk := approve(t, s, b, `[{"type":"github_repository","actions":["read"],"locations":["`+repoAPI+`"]}]`, func(body string) {
		if !strings.Contains(body, "GitHub repository at "+repoAPI+" — may: read") {
			t.Errorf("consent page does not say what is asked in words: %s", body)
		}
	})
	tok := s.MustPost("/token", url.Values{"grant_type": {"authorization_code"}, "code": {code},
		"redirect_uri": {stack.AgentRedir}, "code_verifier": {pk.Verifier}}, stack.Agent, stack.AgentSecret)
	if tok.Status != 200 || !strings.Contains(string(tok.Raw), `"authorization_details":`+readAPI) {
		t.Fatalf("token response: %d %s", tok.Status, tok.Raw)
	}
	intro := s.MustPost("/introspect", url.Values{"token": {tok.Str("access_token")}}, stack.Agent, stack.AgentSecret)
	if !strings.Contains(string(intro.Raw), `"authorization_details":`+readAPI) {
		t.Fatalf("introspection: %s", intro.Raw)
	}

	// Widening at refresh is refused and spends nothing; the refresh token still works.
	wider := `[{"type":"github_repository","actions":["read","write"],"locations":["` + repoAPI + `"]}]`
	refresh := func(rt, details string) stack.Answer {
		f := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}}
		if details != "" {
			f.Set("authorization_details", details)
		}
		return s.MustPost("/token", f, stack.Agent, stack.AgentSecret)
	}
	if a := refresh(tok.Str("refresh_token"), wider); a.Status != 400 || a.Str("error") != "invalid_authorization_details" {
		t.Fatalf("widening refresh: %d %s", a.Status, a.Raw)
	}
	again := refresh(tok.Str("refresh_token"), "")
	if again.Status != 200 || !strings.Contains(string(again.Raw), `"authorization_details":`+readAPI) {
		t.Fatalf("refresh keeps the approval: %d %s", again.Status, again.Raw)
	}

	// The exchange for GitHub is held to the approval.
	s.ConnectGitHub(stack.AliceEmail, stack.AliceLogin)
	ex, err := s.Exchange(ctx, again.Str("access_token"))
	if err != nil || ex.Status != 200 || !strings.Contains(string(ex.Raw), `"authorization_details":`+readAPI) {
		t.Fatalf("exchange within the approval: %v %d %s", err, ex.Status, ex.Raw)
	}
	f := url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:token-exchange"}, "subject_token": {again.Str("access_token")},
		"subject_token_type": {"urn:ietf:params:oauth:token-type:access_token"}, "audience": {stack.Audience}, "authorization_details": {wider}}
	if a := s.MustPost("/token", f, stack.Agent, stack.AgentSecret); a.Status != 400 || a.Str("error") != "invalid_authorization_details" {
		t.Fatalf("widening exchange: %d %s", a.Status, a.Raw)
	}
}

// TestAuthorizationDetailsRefusedAtAuthorize: what the Project does not declare, or declares
// otherwise, never reaches a consent page: the client gets invalid_authorization_details at
// its (verified) redirect URI, and a client_credentials token cannot have details at all.
func TestAuthorizationDetailsRefusedAtAuthorize(t *testing.T) {
	s := detailsStack(t)
	b := s.Browser()
	if err := b.SignIn(stack.AliceEmail, stack.AlicePassword); err != nil {
		t.Fatal(err)
	}
	huge := "[" + strings.Repeat(`{"type":"document","actions":["read"]},`, authzdetails.MaxDetails) + `{"type":"document","actions":["read"]}]`
	manyLocations := `[{"type":"github_repository","actions":["read"],"locations":["` +
		strings.Repeat(repoAPI+`/x","`, authzdetails.MaxValues) + repoAPI + `"]}]`
	for name, details := range map[string]string{
		"a type the project does not declare": `[{"type":"payment_initiation","actions":["initiate"]}]`,
		"another project's type, by its name": `[{"type":"gitlab_project","actions":["read"]}]`,
		"an action outside the declared ones": `[{"type":"github_repository","actions":["admin"],"locations":["` + repoAPI + `"]}]`,
		"a repository outside the prefix":     `[{"type":"github_repository","actions":["read"],"locations":["https://api.github.com/repos/other/api"]}]`,
		"climbing out of the prefix":          `[{"type":"github_repository","actions":["read"],"locations":["https://api.github.com/repos/acme/../other"]}]`,
		"a field nobody declared":             `[{"type":"document","actions":["read"],"privileges":["admin"]}]`,
		"more details than allowed":           huge,
		"more locations than allowed in one":  manyLocations,
		"not JSON":                            `[{`,
	} {
		res := get(t, b, authorizeURL(s, stack.NewPKCE(), details))
		u, err := url.Parse(res.Location())
		if err != nil || !strings.HasPrefix(res.Location(), stack.AgentRedir) || u.Query().Get("error") != "invalid_authorization_details" {
			t.Errorf("%s: %d %s", name, res.Status, res.Location())
		}
	}
	cc := s.MustPost("/token", url.Values{"grant_type": {"client_credentials"}, "authorization_details": {`[{"type":"document","actions":["read"]}]`}},
		stack.Service, stack.ServiceSecret)
	if cc.Status != 400 || cc.Str("error") != "invalid_authorization_details" {
		t.Errorf("client_credentials with details: %d %s", cc.Status, cc.Raw)
	}
}

// TestConsentShowsDetailsEscaped: an identifier is the client's text; the consent page shows
// it as text, never as markup.
func TestConsentShowsDetailsEscaped(t *testing.T) {
	s := detailsStack(t)
	b := s.Browser()
	if err := b.SignIn(stack.AliceEmail, stack.AlicePassword); err != nil {
		t.Fatal(err)
	}
	approve(t, s, b, `[{"type":"document","actions":["read"],"identifier":"<img/src=x/onerror=alert(1)>"}]`, func(body string) {
		if strings.Contains(body, "<img/src=x") {
			t.Errorf("the identifier reached the page as markup")
		}
		if !strings.Contains(body, "Document — may: read; identifier: &lt;img/src=x/onerror=alert(1)&gt;") {
			t.Errorf("the identifier is not shown as escaped text: %s", body)
		}
	})
}

// TestPushedAuthorizationDetails: the pushed authorization request endpoint checks details as
// /authorize does, and answers a refusal in JSON.
func TestPushedAuthorizationDetails(t *testing.T) {
	s := detailsStack(t)
	pk := stack.NewPKCE()
	f := url.Values{"response_type": {"code"}, "client_id": {stack.Agent}, "redirect_uri": {stack.AgentRedir},
		"code_challenge": {pk.Challenge}, "code_challenge_method": {"S256"}}
	f.Set("authorization_details", `[{"type":"payment_initiation","actions":["initiate"]}]`)
	if a := s.MustPost("/par", f, stack.Agent, stack.AgentSecret); a.Status != 400 || a.Str("error") != "invalid_authorization_details" {
		t.Fatalf("pushed undeclared type: %d %s", a.Status, a.Raw)
	}
	f.Set("authorization_details", readAPI)
	if a := s.MustPost("/par", f, stack.Agent, stack.AgentSecret); a.Status != 201 || a.Str("request_uri") == "" {
		t.Fatalf("pushed declared details: %d %s", a.Status, a.Raw)
	}
}

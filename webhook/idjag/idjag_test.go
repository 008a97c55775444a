package idjag_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"latchkey.dev/latchkey/internal/events/audittest"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/idjag"
)

// exchangeType is token exchange's grant type (RFC 8693), by which team/demo issues ID-JAGs.
const exchangeType = "urn:ietf:params:oauth:grant-type:token-exchange"

// newIDJAG starts a stack of the test's own running the ID-JAG story (stack.IDJAG).
func newIDJAG(t *testing.T) *stack.IDJAG { return stack.NewIDJAG(t, stack.New(t, stack.Options{})) }

func wantRefused(t *testing.T, r stack.Answer, code, desc string) {
	t.Helper()
	if r.Status == http.StatusOK || r.Str("error") != code || !strings.Contains(r.Str("error_description"), desc) {
		t.Fatalf("got %d %s, want %s mentioning %q", r.Status, r.Raw, code, desc)
	}
	if r.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control = %q", r.Header.Get("Cache-Control"))
	}
}

func TestIDJAGBothWays(t *testing.T) {
	t.Parallel()
	s := newIDJAG(t)
	sink := audittest.NewSink(t, s.Clock.Now)
	s.Project.EventSinks = append(s.Project.EventSinks, sink.Config())
	s.Tools.EventSinks = append(s.Tools.EventSinks, sink.Config())
	s.Publish()

	// Alice signs in to the company's Project and the client gets her ID token.
	res := s.CodeFlowAs(s.Browser(), "web", stack.WebSecret, "openid email", "alice@example.com", stack.AlicePassword)
	idt := res.Str("id_token")
	if idt == "" {
		t.Fatalf("no id_token: %s", res.Raw)
	}

	// The client exchanges it for an ID-JAG for team/tools.
	x := s.Token(url.Values{
		"grant_type": {exchangeType}, "requested_token_type": {idjag.TokenTypeIDJAG},
		"subject_token": {idt}, "subject_token_type": {idjag.TokenTypeIDToken},
		"audience": {s.ToolsIssuer}, "resource": {stack.ToolsResource}, "scope": {"repos:read"},
	}, "web", stack.WebSecret)
	if x.Status != http.StatusOK {
		t.Fatalf("exchange: %d %s", x.Status, x.Raw)
	}
	if x.Str("issued_token_type") != idjag.TokenTypeIDJAG || x.Str("token_type") != "N_A" || x.Body["expires_in"] != float64(300) {
		t.Fatalf("exchange response: %s", x.Raw)
	}
	jag := x.Str("access_token")
	tok, err := jwt.ParseSigned(jag, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		t.Fatal(err)
	}
	if typ := tok.Headers[0].ExtraHeaders[jose.HeaderType]; typ != idjag.Typ {
		t.Errorf("typ = %v", typ)
	}
	var c map[string]any
	tok.UnsafeClaimsWithoutVerification(&c)
	if c["iss"] != s.Issuer || c["aud"] != s.ToolsIssuer || c["client_id"] != "agent" || c["resource"] != stack.ToolsResource ||
		c["scope"] != "repos:read" || c["email"] != "alice@example.com" || c["jti"] == "" {
		t.Errorf("ID-JAG claims: %v", c)
	}
	aliceAtDemo, _ := c["sub"].(string)

	// team/tools redeems it, without a consent screen: an access token for Alice, no refresh.
	r := s.Redeem(jag, "agent", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("redeem: %d %s", r.Status, r.Raw)
	}
	if r.Str("refresh_token") != "" || r.Str("scope") != "repos:read" || r.Str("token_type") != "Bearer" {
		t.Errorf("redeem response: %s", r.Raw)
	}
	in := s.ToolsIntrospect(r.Str("access_token"))
	if in.Body["active"] != true || in.Body["client_id"] != "agent" {
		t.Fatalf("introspection at team/tools: %s", in.Raw)
	}
	person, err := s.Store().FindPerson(t.Context(), stack.ToolsKey, "id-jag", s.Issuer+"|"+aliceAtDemo)
	if err != nil {
		t.Fatalf("the person at team/tools: %v", err)
	}
	if in.Body["sub"] != person.ID || person.Email != "alice@example.com" {
		t.Errorf("introspected sub %v, person %+v", in.Body["sub"], person)
	}

	// The same ID-JAG a second time is refused.
	wantRefused(t, s.Redeem(jag, "agent", nil), "invalid_grant", "already been used")

	// Both sides are audited, in each Project's log and at its sink.
	issued := audittest.Trail(t, s.Store(), s.Replicas[0].Holder, s.Clock.Now, sink, stack.ProjectKey, idjag.ActionIssued)[idjag.ActionIssued]
	expect(t, issued, "client:web", issued.Target, "web", store.OutcomeSuccess, "")
	if issued.Target == "" || issued.Details["audience"] != s.ToolsIssuer || issued.Details["audience_client_id"] != "agent" || issued.Details["jti"] != c["jti"] {
		t.Errorf("idjag.issued: %+v", issued)
	}
	recs := audittest.Trail(t, s.Store(), s.Replicas[0].Holder, s.Clock.Now, sink, stack.ToolsKey, idjag.ActionRedeemed, idjag.ActionRefused)
	expect(t, recs[idjag.ActionRedeemed], "client:agent", person.ID, "agent", store.OutcomeSuccess, "")
	expect(t, recs[idjag.ActionRefused], "client:agent", "", "agent", store.OutcomeRefused, "invalid_grant")
	if recs[idjag.ActionRedeemed].Details["jti"] != c["jti"] || recs[idjag.ActionRefused].Details["issuer"] != s.Issuer {
		t.Errorf("ID-JAG records: %+v", recs)
	}
}

// expect checks an audit record's actor, subject, client, outcome and reason.
func expect(t *testing.T, r store.AuditRecord, actor, subject, client, outcome, reason string) {
	t.Helper()
	if r.Actor != actor || r.Target != subject || r.ClientID != client || r.Outcome != outcome || r.Reason != reason {
		t.Errorf("%s: actor %q subject %q client %q outcome %q reason %q; want %q %q %q %q %q", r.Action,
			r.Actor, r.Target, r.ClientID, r.Outcome, r.Reason, actor, subject, client, outcome, reason)
	}
}

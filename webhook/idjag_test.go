package webhook_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events/audittest"
	"latchkey.dev/latchkey/internal/netguard"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/idjag"
)

// The ID-JAG story (docs/enterprise-idjag.md) with two Projects on one server: team/demo is
// the company's identity provider, where Alice signs in; team/tools is the authorization
// server of an MCP server, which trusts team/demo's ID-JAGs. A third, test-owned identity
// provider (idp.test) signs the forged and malformed assertions of the attack tests.
const (
	toolsKey     = "team/tools"
	agentSecret  = "lk_cs_agent-secret-for-tests-only-0123456789abcd"
	mcpResource  = "https://mcp.example/mcp"
	testIDP      = "https://idp.test"
	otherIDP     = "https://other-idp.test"
	bearerGrant  = idjag.GrantJWTBearer
	exchangeType = "urn:ietf:params:oauth:grant-type:token-exchange"
)

type idjagStack struct {
	*harness
	tools     *config.Project
	toolsBase string
	idpKey    *ecdsa.PrivateKey // idp.test's
	otherKey  *ecdsa.PrivateKey // other-idp.test's
}

func ecKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func publicSet(t testing.TB, kid string, k *ecdsa.PrivateKey) *jose.JSONWebKeySet {
	return &jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &k.PublicKey, KeyID: kid, Algorithm: "ES256", Use: "sig"}}}
}

func newIDJAGStack(t testing.TB) *idjagStack { return newIDJAGStackOn(t, newHarness(t)) }

func newIDJAGStackOn(t testing.TB, h *harness) *idjagStack {
	s := &idjagStack{harness: h, toolsBase: h.ts.URL + "/team/tools", idpKey: ecKey(t), otherKey: ecKey(t)}

	// team/demo issues ID-JAGs for team/tools to its "web" client, known there as "agent".
	web := *h.project.Clients["web"]
	web.GrantTypes = append([]string{"urn:ietf:params:oauth:grant-type:token-exchange"}, web.GrantTypes...)
	h.project.Clients["web"] = &web
	h.project.IdentityAssertions = config.IdentityAssertions{
		Audiences: map[string]*config.AssertionAudience{s.toolsBase: {
			Issuer:    s.toolsBase,
			Clients:   map[string]config.AssertionClient{"web": {ResourceClientID: "agent"}},
			Resources: []string{mcpResource},
			Scopes:    []string{"repos:read", "repos:write"},
		}},
	}

	tools := testProject(s.toolsBase)
	tools.Key, tools.Name = toolsKey, "tools"
	declared := func(id string, redirects ...string) *config.Client {
		return &config.Client{ID: id, SecretHash: secret.Hash(agentSecret), Name: id, RedirectURIs: redirects,
			GrantTypes: []string{bearerGrant}, TokenEndpointAuthMethod: "client_secret_basic"}
	}
	tools.Clients["agent"] = declared("agent", "http://127.0.0.1/callback")
	tools.Clients["outsider"] = declared("outsider", "http://127.0.0.1/callback")
	tools.Clients["sneaky"] = declared("sneaky", "https://collector.evil.example/cb")
	tools.IdentityAssertions = config.IdentityAssertions{Issuers: map[string]*config.AssertionIssuer{
		h.base: {Issuer: h.base, JWKSURI: h.base + "/jwks.json", Clients: []string{"agent", "sneaky"},
			Subject: config.AssertionSubjectSub, CreatePeople: true, AllowedNetworks: netguard.Loopback},
		testIDP: {Issuer: testIDP, JWKS: publicSet(t, "idp-1", s.idpKey), Clients: []string{"agent", "sneaky"},
			Subject: config.AssertionSubjectSub, CreatePeople: true},
		otherIDP: {Issuer: otherIDP, JWKS: publicSet(t, "other-1", s.otherKey), Clients: []string{"agent"},
			Subject: config.AssertionSubjectSub, CreatePeople: true},
	}}
	s.tools = tools
	s.publish()
	return s
}

func (s *idjagStack) publish() {
	s.holder.Store(&config.Snapshot{Projects: map[string]*config.Project{projectKey: s.project, toolsKey: s.tools}, Version: 3})
}

// toolsToken posts to team/tools' token endpoint.
func (s *idjagStack) toolsToken(form url.Values, user, pass string) tokenResult {
	s.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.toolsBase+"/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(user, pass)
	return s.send(req)
}

func (s *idjagStack) redeem(assertion, client string, extra url.Values) tokenResult {
	s.t.Helper()
	f := url.Values{"grant_type": {bearerGrant}, "assertion": {assertion}}
	for k, v := range extra {
		f[k] = v
	}
	return s.toolsToken(f, client, agentSecret)
}

// assertion signs an ID-JAG from idp.test for "agent" at team/tools; edit changes the header
// and claims first.
func (s *idjagStack) assertion(edit func(h map[string]any, c map[string]any)) string {
	s.t.Helper()
	now := s.clock.Now()
	h := map[string]any{"alg": "ES256", "typ": idjag.Typ, "kid": "idp-1"}
	c := map[string]any{
		"iss": testIDP, "sub": "u-alice", "aud": s.toolsBase, "client_id": "agent",
		"jti": secret.NewID(), "iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(),
		"resource": mcpResource, "scope": "repos:read", "email": "alice@idp.test",
	}
	key := s.idpKey
	if edit != nil {
		edit(h, c)
	}
	switch h["kid"] {
	case "other-1":
		key = s.otherKey
	case "forged": // an attacker's own key, claiming to be idp.test's
		key, h["kid"] = ecKey(s.t), "idp-1"
	}
	return signJWS(s.t, h, c, key)
}

// signJWS signs by hand (ES256), so the tests control every header, typ and alg included.
func signJWS(t testing.TB, h, c map[string]any, key *ecdsa.PrivateKey) string {
	hb, _ := json.Marshal(h)
	cb, _ := json.Marshal(c)
	input := base64.RawURLEncoding.EncodeToString(hb) + "." + base64.RawURLEncoding.EncodeToString(cb)
	if h["alg"] == "none" {
		return input + "."
	}
	digest := sha256.Sum256([]byte(input))
	r, sv, err := ecdsa.Sign(rand.Reader, key, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	sv.FillBytes(sig[32:])
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func wantRefused(t *testing.T, r tokenResult, code, desc string) {
	t.Helper()
	if r.status == http.StatusOK || r.str("error") != code || !strings.Contains(r.str("error_description"), desc) {
		t.Fatalf("got %d %s, want %s mentioning %q", r.status, r.raw, code, desc)
	}
	if r.header.Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control = %q", r.header.Get("Cache-Control"))
	}
}

func TestIDJAGBothWays(t *testing.T) {
	s := newIDJAGStack(t)
	sink := audittest.NewSink(t, s.clock.Now)
	s.project.EventSinks = append(s.project.EventSinks, sink.Config())
	s.tools.EventSinks = append(s.tools.EventSinks, sink.Config())
	s.publish()

	// Alice signs in to the company's Project and the client gets her ID token.
	res := s.codeFlow(s.browser(), "web", webSecret, "openid email", "alice@example.com", alicePass)
	idt := res.str("id_token")
	if idt == "" {
		t.Fatalf("no id_token: %s", res.raw)
	}

	// The client exchanges it for an ID-JAG for team/tools.
	x := s.token(url.Values{
		"grant_type": {exchangeType}, "requested_token_type": {idjag.TokenTypeIDJAG},
		"subject_token": {idt}, "subject_token_type": {idjag.TokenTypeIDToken},
		"audience": {s.toolsBase}, "resource": {mcpResource}, "scope": {"repos:read"},
	}, "web", webSecret)
	if x.status != http.StatusOK {
		t.Fatalf("exchange: %d %s", x.status, x.raw)
	}
	if x.str("issued_token_type") != idjag.TokenTypeIDJAG || x.str("token_type") != "N_A" || x.json["expires_in"] != float64(300) {
		t.Fatalf("exchange response: %s", x.raw)
	}
	jag := x.str("access_token")
	tok, err := jwt.ParseSigned(jag, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		t.Fatal(err)
	}
	if typ := tok.Headers[0].ExtraHeaders[jose.HeaderType]; typ != idjag.Typ {
		t.Errorf("typ = %v", typ)
	}
	var c map[string]any
	tok.UnsafeClaimsWithoutVerification(&c)
	if c["iss"] != s.base || c["aud"] != s.toolsBase || c["client_id"] != "agent" || c["resource"] != mcpResource ||
		c["scope"] != "repos:read" || c["email"] != "alice@example.com" || c["jti"] == "" {
		t.Errorf("ID-JAG claims: %v", c)
	}
	aliceAtDemo, _ := c["sub"].(string)

	// team/tools redeems it, without a consent screen: an access token for Alice, no refresh.
	r := s.redeem(jag, "agent", nil)
	if r.status != http.StatusOK {
		t.Fatalf("redeem: %d %s", r.status, r.raw)
	}
	if r.str("refresh_token") != "" || r.str("scope") != "repos:read" || r.str("token_type") != "Bearer" {
		t.Errorf("redeem response: %s", r.raw)
	}
	in := s.toolsIntrospect(r.str("access_token"))
	if in.json["active"] != true || in.json["client_id"] != "agent" {
		t.Fatalf("introspection at team/tools: %s", in.raw)
	}
	person, err := s.store.FindPerson(t.Context(), toolsKey, "id-jag", s.base+"|"+aliceAtDemo)
	if err != nil {
		t.Fatalf("the person at team/tools: %v", err)
	}
	if in.json["sub"] != person.ID || person.Email != "alice@example.com" {
		t.Errorf("introspected sub %v, person %+v", in.json["sub"], person)
	}

	// The same ID-JAG a second time is refused.
	wantRefused(t, s.redeem(jag, "agent", nil), "invalid_grant", "already been used")

	// Both sides are audited, in each Project's log and at its sink.
	issued := audittest.Trail(t, s.store, s.holder, s.clock.Now, sink, projectKey, idjag.ActionIssued)[idjag.ActionIssued]
	expect(t, issued, "client:web", issued.Target, "web", store.OutcomeSuccess, "")
	if issued.Target == "" || issued.Details["audience"] != s.toolsBase || issued.Details["audience_client_id"] != "agent" || issued.Details["jti"] != c["jti"] {
		t.Errorf("idjag.issued: %+v", issued)
	}
	recs := audittest.Trail(t, s.store, s.holder, s.clock.Now, sink, toolsKey, idjag.ActionRedeemed, idjag.ActionRefused)
	expect(t, recs[idjag.ActionRedeemed], "client:agent", person.ID, "agent", store.OutcomeSuccess, "")
	expect(t, recs[idjag.ActionRefused], "client:agent", "", "agent", store.OutcomeRefused, "invalid_grant")
	if recs[idjag.ActionRedeemed].Details["jti"] != c["jti"] || recs[idjag.ActionRefused].Details["issuer"] != s.base {
		t.Errorf("ID-JAG records: %+v", recs)
	}
}

func (s *idjagStack) toolsIntrospect(tok string) tokenResult {
	s.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.toolsBase+"/introspect", strings.NewReader(url.Values{"token": {tok}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth("svc", svcSecret)
	return s.send(req)
}

package stack

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/netguard"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/webhook/idjag"
)

// SendJSON sends body (JSON, or nothing when empty) to u with method, as the bearer of
// bearer when set (a registration access token, an initial access token), and reads the
// answer: what a client of the registration endpoints sends.
func (s *Stack) SendJSON(method, u, bearer, body string) Answer {
	s.T.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		s.T.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	return s.Send(req)
}

// ---------------------------------------------------------------------------------------------
// The ID-JAG story

// The ID-JAG story (docs/enterprise-idjag.md) with two Projects on one server: team/demo is
// the company's identity provider, where Alice signs in; team/tools is the authorization
// server of an MCP server, which trusts team/demo's ID-JAGs. A third, test-owned identity
// provider (TestIDP) signs the forged and malformed assertions of the attack tests.
const (
	ToolsKey = "team/tools"
	// ToolsSecret is the secret of team/tools' clients "agent" (Web, known there by that
	// name), "outsider" (trusted by no issuer) and "sneaky" (another redirect URI).
	ToolsSecret   = "lk_cs_agent-secret-for-tests-only-0123456789abcd"
	ToolsResource = "https://mcp.example/mcp"
	TestIDP       = "https://idp.test"
	OtherIDP      = "https://other-idp.test"
)

// IDJAG is a stack running the ID-JAG story.
type IDJAG struct {
	*Stack
	Tools *config.Project
	// ToolsIssuer is team/tools' issuer.
	ToolsIssuer string
	// IDPKey signs TestIDP's assertions, OtherKey OtherIDP's.
	IDPKey, OtherKey *ecdsa.PrivateKey
}

// NewECKey is a new P-256 key.
func NewECKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func publicSet(kid string, k *ecdsa.PrivateKey) *jose.JSONWebKeySet {
	return &jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &k.PublicKey, KeyID: kid, Algorithm: "ES256", Use: "sig"}}}
}

// NewIDJAG adds team/tools to s and lets team/demo's Web client ask for ID-JAGs for it.
func NewIDJAG(t testing.TB, s *Stack) *IDJAG {
	x := &IDJAG{Stack: s, ToolsIssuer: s.Front.URL + "/team/tools", IDPKey: NewECKey(t), OtherKey: NewECKey(t)}

	// team/demo issues ID-JAGs for team/tools to Web, known there as "agent".
	demo := *s.Project
	demo.Clients = maps.Clone(demo.Clients)
	web := *demo.Clients[Web]
	web.GrantTypes = append([]string{"urn:ietf:params:oauth:grant-type:token-exchange"}, web.GrantTypes...)
	demo.Clients[Web] = &web
	demo.IdentityAssertions = config.IdentityAssertions{
		Audiences: map[string]*config.AssertionAudience{x.ToolsIssuer: {
			Issuer:    x.ToolsIssuer,
			Clients:   map[string]config.AssertionClient{Web: {ResourceClientID: "agent"}},
			Resources: []string{ToolsResource},
			Scopes:    []string{"repos:read", "repos:write"},
		}},
	}
	s.Project = &demo

	tools := NewProject(x.ToolsIssuer)
	tools.Key, tools.Name = ToolsKey, "tools"
	declared := func(id string, redirects ...string) *config.Client {
		return &config.Client{ID: id, SecretHash: secret.Hash(ToolsSecret), Name: id, RedirectURIs: redirects,
			GrantTypes: []string{idjag.GrantJWTBearer}, TokenEndpointAuthMethod: "client_secret_basic"}
	}
	tools.Clients["agent"] = declared("agent", "http://127.0.0.1/callback")
	tools.Clients["outsider"] = declared("outsider", "http://127.0.0.1/callback")
	tools.Clients["sneaky"] = declared("sneaky", "https://collector.evil.example/cb")
	tools.IdentityAssertions = config.IdentityAssertions{Issuers: map[string]*config.AssertionIssuer{
		s.Issuer: {Issuer: s.Issuer, JWKSURI: s.Issuer + "/jwks.json", Clients: []string{"agent", "sneaky"},
			Subject: config.AssertionSubjectSub, CreatePeople: true, AllowedNetworks: netguard.Loopback},
		TestIDP: {Issuer: TestIDP, JWKS: publicSet("idp-1", x.IDPKey), Clients: []string{"agent", "sneaky"},
			Subject: config.AssertionSubjectSub, CreatePeople: true},
		OtherIDP: {Issuer: OtherIDP, JWKS: publicSet("other-1", x.OtherKey), Clients: []string{"agent"},
			Subject: config.AssertionSubjectSub, CreatePeople: true},
	}}
	x.Tools = tools
	x.Publish()
	return x
}

// Publish publishes Project and Tools to every replica (Update publishes team/demo alone).
func (x *IDJAG) Publish() {
	v := versions.Add(1) + 1
	for _, r := range x.Replicas {
		r.Holder.Store(&config.Snapshot{Projects: map[string]*config.Project{ProjectKey: x.Project, ToolsKey: x.Tools}, Version: v})
	}
}

// ToolsToken posts form to team/tools' token endpoint as client.
func (x *IDJAG) ToolsToken(form url.Values, client, clientSecret string) Answer {
	x.T.Helper()
	req, _ := http.NewRequest(http.MethodPost, x.ToolsIssuer+"/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(client, clientSecret)
	return x.Send(req)
}

// Redeem is team/tools' client redeeming assertion (jwt-bearer grant), extra parameters added.
func (x *IDJAG) Redeem(assertion, client string, extra url.Values) Answer {
	x.T.Helper()
	f := url.Values{"grant_type": {idjag.GrantJWTBearer}, "assertion": {assertion}}
	maps.Copy(f, extra)
	return x.ToolsToken(f, client, ToolsSecret)
}

// ToolsIntrospect is the service introspecting tok at team/tools.
func (x *IDJAG) ToolsIntrospect(tok string) Answer {
	x.T.Helper()
	req, _ := http.NewRequest(http.MethodPost, x.ToolsIssuer+"/introspect", strings.NewReader(url.Values{"token": {tok}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(Service, ServiceSecret)
	return x.Send(req)
}

// Assertion signs an ID-JAG from TestIDP for "agent" at team/tools; edit changes the header
// and claims first. A kid "other-1" signs with OtherKey, "forged" with an attacker's own key
// under TestIDP's kid.
func (x *IDJAG) Assertion(edit func(h map[string]any, c map[string]any)) string {
	x.T.Helper()
	now := x.Clock.Now()
	h := map[string]any{"alg": "ES256", "typ": idjag.Typ, "kid": "idp-1"}
	c := map[string]any{
		"iss": TestIDP, "sub": "u-alice", "aud": x.ToolsIssuer, "client_id": "agent",
		"jti": secret.NewID(), "iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(),
		"resource": ToolsResource, "scope": "repos:read", "email": "alice@idp.test",
	}
	key := x.IDPKey
	if edit != nil {
		edit(h, c)
	}
	switch h["kid"] {
	case "other-1":
		key = x.OtherKey
	case "forged": // an attacker's own key, claiming to be TestIDP's
		key, h["kid"] = NewECKey(x.T), "idp-1"
	}
	return SignJWS(x.T, h, c, key)
}

// SignJWS signs header h and claims c by hand (ES256; alg "none" leaves the signature out), so
// a test controls every header, typ and alg included.
func SignJWS(t testing.TB, h, c map[string]any, key *ecdsa.PrivateKey) string {
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

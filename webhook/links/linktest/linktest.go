// Package linktest runs the connect-link stories (a person connects through their own link;
// Mallory forwards hers to Alice) for tests: the callback harness (real server, real SQLite, fake
// GitHub on its own listener, injected clock, Alice and Mallory with their own browsers) with
// token exchange, the connect link page, the link hook and security events mounted, agents that
// exchange tokens, and an event sink that records what it receives.
package linktest

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/oauth2"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/webhook/callback/callbacktest"
	"latchkey.dev/latchkey/webhook/ciba"
	"latchkey.dev/latchkey/webhook/exchange"
	"latchkey.dev/latchkey/webhook/idjag"
	"latchkey.dev/latchkey/webhook/links"
)

// The agents of the stories.
const (
	// Agent is Repo Helper: a declared client that may exchange for GitHub.
	Agent       = "repo-helper"
	AgentName   = "Repo Helper"
	AgentSecret = "lk_cs_repo-helper-secret-for-tests-0123456789abcdef"

	// MCP is an MCP server that exchanges its callers' tokens; tokens for MCPResource are its.
	MCP         = "github-tools"
	MCPSecret   = "lk_cs_github-tools-secret-for-tests-0123456789abcd"
	MCPResource = "https://mcp.example.test/mcp"

	// Copycat is a declared client that may not exchange for any connector.
	Copycat       = "copycat"
	CopycatSecret = "lk_cs_copycat-secret-for-tests-0123456789abcdefghij"

	// Registered is a dynamically registered client that asked for token exchange.
	Registered       = "dcr-client"
	RegisteredSecret = "lk_cs_dcr-client-secret-for-tests-0123456789abcdefg"

	// SinkName is the project's one event sink; SinkKey signs what it receives.
	SinkName = "ops"
	SinkKey  = "sink-hmac-key-for-tests"

	// Audience is GitHub's identifier for token exchange in the project.
	Audience = "github"
)

// Options configure a Harness.
type Options struct {
	// LatchkeyHost and GitHubHost: see callbacktest.Options.
	LatchkeyHost, GitHubHost string
	// PublicHost: see callbacktest.Options.
	PublicHost string
	// AccessTokenTTL > 0 makes the fake GitHub issue expiring, refreshable tokens.
	AccessTokenTTL time.Duration
	// Store: see callbacktest.Options.
	Store func(store.Store) store.Store
}

// Harness is one running installation with connect links.
type Harness struct {
	*callbacktest.Harness
	Emitter  *events.Emitter
	Registry *prometheus.Registry
	Sink     *Sink
}

// New starts an installation; everything stops when the test ends.
func New(t testing.TB, o Options) *Harness {
	t.Helper()
	ch := callbacktest.New(t, callbacktest.Options{
		LatchkeyHost: o.LatchkeyHost, GitHubHost: o.GitHubHost, AccessTokenTTL: o.AccessTokenTTL,
		PublicHost: o.PublicHost, Store: o.Store,
	})
	h := &Harness{Harness: ch, Registry: prometheus.NewRegistry(), Sink: NewSink(t)}
	gh := ch.Connector.Key
	te := []string{exchange.GrantType}
	p := ch.Project
	p.Clients[Agent] = &config.Client{
		ID: Agent, SecretHash: secret.Hash(AgentSecret), Name: AgentName,
		RedirectURIs: []string{"http://127.0.0.1/cb"}, GrantTypes: []string{"authorization_code", "refresh_token", exchange.GrantType},
		TokenEndpointAuthMethod: "client_secret_basic", Connectors: []string{gh},
	}
	p.Clients[MCP] = &config.Client{
		ID: MCP, SecretHash: secret.Hash(MCPSecret), Name: "GitHub tools", GrantTypes: te,
		TokenEndpointAuthMethod: "client_secret_basic", Connectors: []string{gh}, Resources: []string{MCPResource},
	}
	p.Clients[Copycat] = &config.Client{
		ID: Copycat, SecretHash: secret.Hash(CopycatSecret), Name: "Copycat", GrantTypes: te,
		TokenEndpointAuthMethod: "client_secret_basic",
	}
	p.EventSinks = append(p.EventSinks, config.EventSink{Name: SinkName, URL: h.Sink.URL, HMACKey: []byte(SinkKey)})
	now := ch.Clock.Now()
	if err := ch.Store.CreateClient(context.Background(), store.Client{
		Project: callbacktest.ProjectKey, ID: Registered, SecretHash: secret.Hash(RegisteredSecret), Name: AgentName,
		RedirectURIs: []string{"https://evil.example/cb"}, GrantTypes: []string{"authorization_code", exchange.GrantType},
		ResponseTypes: []string{"code"}, TokenEndpointAuthMethod: "client_secret_basic", CreatedAt: now, UpdatedAt: now,
	}); err != nil {
		t.Fatal(err)
	}

	env := ch.Server.Env()
	em, err := events.NewEmitter(events.EmitterOptions{
		Store: ch.Store, Config: ch.Holder, Now: ch.Clock.Now, Registerer: h.Registry,
	})
	if err != nil {
		t.Fatal(err)
	}
	h.Emitter = em
	// The server's flows hold this Env, so they report to the emitter from now on.
	env.Events = em.Recorded
	// Token exchange is registered again with this Env; ID-JAG requests still go to idjag, as
	// in webhook.New.
	idjag.Register(ch.Server.Grant, env, ch.Store, exchange.New(env, ch.Store, nil).WithApprovals(ciba.NewApprovals(env, ch.Store)))
	return h
}

// Deliverer returns a deliverer for the harness's store, configuration and clock, with
// deterministic backoff (no jitter).
func (h *Harness) Deliverer() *events.Deliverer {
	return &events.Deliverer{
		Store: h.Store, Config: h.Holder, Now: h.Clock.Now, Registerer: prometheus.NewRegistry(),
		Jitter: func() float64 { return 0.5 },
	}
}

// SecurityEvents reads latchkey_security_events_total for a type.
func (h *Harness) SecurityEvents(typ string) float64 {
	h.T.Helper()
	var m dto.Metric
	if err := h.Emitter.Counter().WithLabelValues(typ).Write(&m); err != nil {
		h.T.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// PersonID returns the id of the person who signs in with email, creating them as sign-in
// would (sign-in later finds the same person).
func (h *Harness) PersonID(email string) string {
	h.T.Helper()
	p, err := h.Store.UpsertPerson(context.Background(), store.Person{
		Project: callbacktest.ProjectKey, ID: "p-" + strings.ReplaceAll(email, "@", "-at-"), Source: "password",
		SourceSubject: email, Email: email, CreatedAt: h.Clock.Now(),
	})
	if err != nil {
		h.T.Fatal(err)
	}
	return p.ID
}

// AccessToken issues a Latchkey access token for the person to client, with audience, as the
// authorization code grant would have; it lives an hour.
func (h *Harness) AccessToken(email, client string, audience ...string) string {
	h.T.Helper()
	tok := secret.New(secret.PrefixAccessToken)
	now := h.Clock.Now()
	if err := h.Store.CreateTokens(context.Background(), store.Token{
		Hash: secret.Hash(tok), Kind: store.AccessToken, Project: callbacktest.ProjectKey, ClientID: client,
		Subject: h.PersonID(email), Scopes: []string{"openid"}, Audience: audience, FamilyID: secret.New(""),
		AuthTime: now, IssuedAt: now, ExpiresAt: now.Add(time.Hour),
	}); err != nil {
		h.T.Fatal(err)
	}
	return tok
}

// Answer is a token endpoint answer.
type Answer struct {
	Status int
	Header http.Header
	Body   map[string]any
	Raw    []byte
}

// String returns a JSON member as text ("" when absent).
func (a Answer) String(k string) string {
	switch v := a.Body[k].(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return ""
}

// Exchange asks the token endpoint for the subject token's owner's token at audience,
// authenticating as client.
func (h *Harness) Exchange(client, clientSecret, subjectToken, audience string) Answer {
	h.T.Helper()
	return h.ExchangeForm(client, clientSecret, url.Values{
		"grant_type":           {exchange.GrantType},
		"subject_token":        {subjectToken},
		"subject_token_type":   {exchange.TokenTypeAccessToken},
		"requested_token_type": {exchange.TokenTypeAccessToken},
		"audience":             {audience},
	})
}

// ExchangeForm posts any form to the token endpoint with Basic client authentication.
func (h *Harness) ExchangeForm(client, clientSecret string, form url.Values) Answer {
	h.T.Helper()
	req, err := http.NewRequest(http.MethodPost, h.Issuer+"/token", strings.NewReader(form.Encode()))
	if err != nil {
		h.T.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(client), url.QueryEscape(clientSecret))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.T.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := Answer{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	if err := json.Unmarshal(raw, &a.Body); err != nil {
		h.T.Fatalf("token endpoint answered %d with %q: %v", resp.StatusCode, raw, err)
	}
	return a
}

// AgentExchange is Repo Helper exchanging the person's token (issued to it) for GitHub.
func (h *Harness) AgentExchange(subjectToken string) Answer {
	h.T.Helper()
	return h.Exchange(Agent, AgentSecret, subjectToken, Audience)
}

// ConnectDirectly stores a working connection of the person to GitHub as the callback would,
// holding token (which the fake GitHub did not issue; for tests that only read it back).
func (h *Harness) ConnectDirectly(email, accountID, login, token string) store.Connection {
	h.T.Helper()
	now := h.Clock.Now()
	c := store.Connection{
		ID: secret.New("")[:22], Project: callbacktest.ProjectKey, Subject: h.PersonID(email), Connector: h.Connector.Key,
		AccountID: accountID, AccountName: login, Status: store.ConnectionActive, CreatedAt: now, UpdatedAt: now,
	}
	v := &upstream.Vault{Store: h.Store, Keyring: h.Server.Env().Keyring, Now: h.Clock.Now}
	v.Seal(&c, &oauth2.Token{AccessToken: token, TokenType: "bearer"})
	saved, err := h.Store.SaveConnection(context.Background(), c)
	if err != nil {
		h.T.Fatal(err)
	}
	return saved
}

// Allow lets agent use the connection, as the link page's Allow does.
func (h *Harness) Allow(email, agent string, conn store.Connection) {
	h.T.Helper()
	if err := h.Store.AllowAgent(context.Background(), store.AgentPermission{
		Project: callbacktest.ProjectKey, Subject: h.PersonID(email), Connector: conn.Connector, ClientID: agent,
		ConnectionID: conn.ID, CreatedAt: h.Clock.Now(),
	}); err != nil {
		h.T.Fatal(err)
	}
}

// LinkPath turns a connect_uri into a path on Latchkey.
func (h *Harness) LinkPath(connectURI string) string {
	h.T.Helper()
	if !strings.HasPrefix(connectURI, h.Issuer+links.PathPrefix) {
		h.T.Fatalf("connect_uri %q is not under %s", connectURI, h.Issuer+links.PathPrefix)
	}
	return strings.TrimPrefix(connectURI, h.Latchkey.URL)
}

// ---------------------------------------------------------------------------------------------
// Event sink

// Received is one POST the sink accepted.
type Received struct {
	Event     events.CloudEvent
	Signature string
	// Valid says the signature verified with SinkKey.
	Valid bool
	// Traceparent is the W3C trace context header the delivery carried ("" when none).
	Traceparent string
}

// Sink is an event sink: it answers 503 while Down is set and records what it accepts.
type Sink struct {
	URL string

	mu       sync.Mutex
	down     bool
	refused  int
	received []Received
}

// NewSink starts a sink; it stops when the test ends.
func NewSink(t testing.TB) *Sink {
	s := &Sink{}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.URL = srv.URL + "/hooks/latchkey"
	return s
}

// SetDown makes the sink refuse (503) or accept.
func (s *Sink) SetDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

// Refused counts POSTs answered with 503.
func (s *Sink) Refused() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused
}

// Received returns what the sink accepted, in order.
func (s *Sink) Received() []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Received(nil), s.received...)
}

func (s *Sink) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		s.refused++
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	var ev events.CloudEvent
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != events.ContentType || json.Unmarshal(body, &ev) != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	sig := r.Header.Get(events.SignatureHeader)
	s.received = append(s.received, Received{
		Event: ev, Signature: sig, Valid: Verify([]byte(SinkKey), body, sig), Traceparent: r.Header.Get("Traceparent"),
	})
	w.WriteHeader(http.StatusNoContent)
}

// Verify checks a Latchkey-Signature header as a sink would.
func Verify(key, body []byte, header string) bool {
	var ts, v1 string
	for part := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			v1 = v
		}
	}
	got, err := hex.DecodeString(v1)
	if ts == "" || err != nil {
		return false
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(ts + "."))
	m.Write(body)
	return hmac.Equal(m.Sum(nil), got)
}

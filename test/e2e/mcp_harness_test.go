package e2e

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"latchkey.dev/latchkey/examples/repohelper"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/testenv"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/links"
)

// The MCP stack of the connect-link story (docs/connections-for-agents.md), all real and in process:
// Latchkey as test/stack runs it with Options.Links (webhook.New on a real SQLite file with the callback, connect link,
// token-exchange and event flows) on 127.0.0.1, the fake GitHub on 127.0.0.2 (another site, as
// GitHub is), and Repo Helper, the demo MCP server, which verifies tokens by introspection and
// exchanges them at Latchkey's token endpoint. The agent is an MCP client that registered itself
// (RFC 7591) as a public client, as MCP clients do.
const (
	mcpServerClientID = stack.Agent // Repo Helper's declared OAuthClient
	mcpServerSecret   = stack.AgentSecret
	mcpAgentName      = "Chat Agent"
)

type mcpStack struct {
	*stack.Stack
	// MCPURL is Repo Helper's MCP endpoint, the resource its tokens are issued for.
	MCPURL string
	// AgentID is the registered MCP client; AgentRedirect its loopback callback.
	AgentID, AgentRedirect string
	// ServerRedirect is Repo Helper's own loopback callback, for `repo-helper call`.
	ServerRedirect string
}

// freeLoopback returns a 127.0.0.1 address nothing listens on right now.
func freeLoopback(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func newMCPStack(t *testing.T) *mcpStack {
	t.Helper()
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour, FrontHost: "127.0.0.1", GitHubHost: "127.0.0.2"})
	// The SDK's bearer-token middleware checks a token's expiry on the wall clock, whatever
	// clock the resource server is given; so the injected clock starts at the wall time here,
	// and tests still move it by hand.
	h.Clock.Advance(time.Since(h.Clock.Now()))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &mcpStack{Stack: h, MCPURL: "http://" + ln.Addr().String() + "/mcp", ServerRedirect: "http://" + freeLoopback(t) + "/callback"}

	// Repo Helper serves MCPURL as a resource (so its callers' tokens may be exchanged by it),
	// and signs people in itself for `repo-helper call`, the walkthrough's client.
	p := *h.Project
	p.Clients = maps.Clone(p.Clients)
	rh := *p.Clients[mcpServerClientID]
	rh.Resources = []string{s.MCPURL}
	rh.RedirectURIs = []string{s.ServerRedirect}
	p.Clients[mcpServerClientID] = &rh
	h.Project = &p
	h.Holder().Store(&config.Snapshot{Projects: map[string]*config.Project{p.Key: &p}, Version: 2})

	handler, err := repohelper.New(repohelper.Options{
		Issuer:       h.Issuer,
		ClientID:     mcpServerClientID,
		ClientSecret: mcpServerSecret,
		Resource:     s.MCPURL,
		GitHubAPI:    h.GitHubURL,
		StateKey:     mcpStateKey(),
		// Latchkey's clock: token expiry and requestState expiry are read on the same clock.
		Now:    h.Clock.Now,
		Logger: slog.New(slog.NewTextHandler(mcpLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatalf("repohelper.New: %v", err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: handler}}
	srv.Start()
	t.Cleanup(srv.Close)

	s.registerAgent(t)
	return s
}

// mcpStateKey is Repo Helper's requestState key: 32 random bytes.
func mcpStateKey() []byte {
	k := make([]byte, 32)
	rand.Read(k)
	return k
}

// registerAgent registers the MCP client at Latchkey as an MCP client does on first contact.
func (s *mcpStack) registerAgent(t *testing.T) {
	t.Helper()
	// The agent's loopback callback is never listened on: the test reads the redirect.
	s.AgentRedirect = "http://127.0.0.1:49152/callback"
	body, _ := json.Marshal(map[string]any{
		"client_name":                mcpAgentName,
		"redirect_uris":              []string{s.AgentRedirect},
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
		"token_endpoint_auth_method": "none",
	})
	resp, err := http.Post(s.Issuer+"/register", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		ClientID string `json:"client_id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusCreated || out.ClientID == "" {
		t.Fatalf("registering the agent: %d %v %+v", resp.StatusCode, err, out)
	}
	s.AgentID = out.ClientID
}

// mcpPerson is a person with their own browser (cookie jar) and accounts.
type mcpPerson struct {
	s                        *mcpStack
	B                        *stack.Browser
	Email, Password          string
	GitHubLogin, GitHubPassw string
}

func (s *mcpStack) alice() *mcpPerson {
	return &mcpPerson{s: s, B: s.Browser(), Email: stack.AliceEmail, Password: stack.AlicePassword,
		GitHubLogin: stack.AliceLogin, GitHubPassw: stack.AlicePassword}
}

func (s *mcpStack) mallory() *mcpPerson {
	return &mcpPerson{s: s, B: s.Browser(), Email: stack.MalloryEmail, Password: stack.MalloryPassword,
		GitHubLogin: stack.MalloryLogin, GitHubPassw: stack.MalloryPassword}
}

// resolve turns a form action or refresh target on page pg into an absolute URL.
func resolve(t testing.TB, pg stack.Page, ref string) string {
	t.Helper()
	base, err := url.Parse(pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	u, err := base.Parse(ref)
	if err != nil {
		t.Fatal(err)
	}
	return u.String()
}

func (pp *mcpPerson) onGitHub(pg stack.Page) bool {
	return strings.HasPrefix(pg.URL, pp.s.GitHubURL+"/")
}

// step does what the person does on the page in front of them: follow a redirect or a page
// that moves on, sign in (at Latchkey or at GitHub), allow the agent on the consent page,
// connect on the link page, authorize at GitHub. done is true when nothing is left to do.
func (pp *mcpPerson) step(t testing.TB, pg stack.Page) (next stack.Page, done bool) {
	t.Helper()
	b := pp.B
	switch {
	case pg.Status >= 300 && pg.Status < 400:
		loc := pg.Location()
		if strings.HasPrefix(loc, pp.s.AgentRedirect) {
			return pg, true // the authorization response, for the agent to read
		}
		return b.MustGet(loc), false
	case pg.Status != http.StatusOK:
		return pg, true
	}
	if next := pg.Continue(); next != "" {
		return b.MustGet(resolve(t, pg, next)), false
	}
	if pp.onGitHub(pg) {
		if action, f, ok := pg.Form("Sign in"); ok {
			f.Set("login", pp.GitHubLogin)
			f.Set("password", pp.GitHubPassw)
			return b.MustPost(resolve(t, pg, action), f), false
		}
		if action, f, ok := pg.Form("Authorize"); ok {
			f.Set("authorize", "1")
			return b.MustPost(resolve(t, pg, action), f), false
		}
		return pg, true
	}
	if action, f, ok := pg.Form("Sign in"); ok && strings.Contains(pg.Body, `name="password"`) {
		f.Set("username", pp.Email)
		f.Set("password", pp.Password)
		return b.MustPost(resolve(t, pg, action), f), false
	}
	if strings.Contains(pg.Body, "Where access goes") {
		action, f, ok := pg.Form("Allow")
		if !ok {
			t.Fatalf("consent page without an Allow form: %s", pg.Text())
		}
		f.Set("decision", "allow")
		if strings.Contains(pg.Body, `name="confirm_destination"`) {
			// The person ticks "I set up this connection and expected access to go to …".
			f.Set("confirm_destination", pp.s.AgentRedirect)
		}
		return b.MustPost(resolve(t, pg, action), f), false
	}
	if strings.Contains(pg.URL, links.PathPrefix) && !strings.HasSuffix(pg.URL, "/connect") {
		if action, f, ok := pg.Form("Connect"); ok {
			return b.MustPost(resolve(t, pg, action), f), false
		}
	}
	return pg, true
}

// walk takes the person through pages from start until nothing is left to do.
func (pp *mcpPerson) walk(t testing.TB, start string) stack.Page {
	t.Helper()
	pg := pp.B.MustGet(start)
	for range 25 {
		next, done := pp.step(t, pg)
		if done {
			return next
		}
		pg = next
	}
	t.Fatalf("the person got lost, last at %s: %s", pg.URL, pg.Text())
	return pg
}

// AgentToken runs authorization code + PKCE for the agent through the real endpoints, the
// person signing in and allowing it in their browser, with Repo Helper as the token's resource
// (RFC 8707). It returns the access token the MCP client presents.
func (pp *mcpPerson) AgentToken(t testing.TB) string {
	t.Helper()
	s := pp.s
	verifier := secret.New("")
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{
		"response_type": {"code"}, "client_id": {s.AgentID}, "redirect_uri": {s.AgentRedirect},
		"state": {"agent-state"}, "code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])},
		"code_challenge_method": {"S256"}, "resource": {s.MCPURL},
	}
	final := pp.walk(t, s.Issuer+"/authorize?"+q.Encode())
	loc, err := url.Parse(final.Location())
	if err != nil || !strings.HasPrefix(final.Location(), s.AgentRedirect) {
		t.Fatalf("authorization did not come back to the agent: %d %s %s", final.Status, final.Location(), final.Text())
	}
	if loc.Query().Get("state") != "agent-state" || loc.Query().Get("iss") != s.Issuer {
		t.Fatalf("authorization response %s: wrong state or iss", loc)
	}
	resp, err := http.PostForm(s.Issuer+"/token", url.Values{
		"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")}, "redirect_uri": {s.AgentRedirect},
		"code_verifier": {verifier}, "client_id": {s.AgentID}, "resource": {s.MCPURL},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tok); err != nil || resp.StatusCode != http.StatusOK || tok.AccessToken == "" {
		t.Fatalf("redeeming the agent's code: %d %v", resp.StatusCode, err)
	}
	return tok.AccessToken
}

// OpenLink is the person opening a connect link in their browser and doing what it offers:
// signing in again if asked, connecting GitHub, approving at GitHub. It returns the last page.
func (pp *mcpPerson) OpenLink(t testing.TB, link string) stack.Page {
	t.Helper()
	return pp.walk(t, link)
}

// wantDone checks that the person ended on a page that sends them back to their agent, and
// that it redirected them nowhere.
func wantDone(t testing.TB, pg stack.Page) {
	t.Helper()
	text := pg.Text()
	if pg.Status != http.StatusOK || pg.Header.Get("Location") != "" || !strings.Contains(strings.ToLower(text), "go back to") {
		t.Fatalf("the link did not end with \"go back to\" the agent: %d at %s: %s", pg.Status, pg.URL, text)
	}
}

// Refusal is Latchkey's token-exchange answer as Repo Helper receives it, asked directly.
func (s *mcpStack) Refusal(t testing.TB, token string) map[string]any {
	t.Helper()
	a := s.ExchangeAs(mcpServerClientID, mcpServerSecret, token, stack.Audience)
	if a.Status != http.StatusBadRequest || a.Header.Get("Cache-Control") != "no-store" || a.Str("error") != "invalid_grant" {
		t.Fatalf("exchange answer: %d %q %s", a.Status, a.Header.Get("Cache-Control"), a.Raw)
	}
	return a.Body
}

// ---- MCP clients --------------------------------------------------------------------------

type mcpBearer struct{ token string }

func (b mcpBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

type mcpClientOpts struct {
	version string
	elicit  func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error)
	// noRetry turns off the SDK's own input_required retry, to hold the requestState.
	noRetry bool
}

// GoClient connects the go-sdk client, declaring URL elicitation, with the person's token.
func (s *mcpStack) GoClient(t *testing.T, token string, o mcpClientOpts) *sdk.ClientSession {
	t.Helper()
	opts := &sdk.ClientOptions{
		// A handler alone advertises form mode only; URL mode must be declared.
		Capabilities:       &sdk.ClientCapabilities{Elicitation: &sdk.ElicitationCapabilities{URL: &sdk.URLElicitationCapabilities{}}},
		ElicitationHandler: o.elicit,
	}
	if o.noRetry {
		opts.MultiRoundTrip = &sdk.MultiRoundTripOptions{Disabled: true}
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "chat-agent", Version: "1.0.0"}, opts)
	cs, err := c.Connect(t.Context(), &sdk.StreamableClientTransport{
		Endpoint:   s.MCPURL,
		HTTPClient: &http.Client{Transport: mcpBearer{token}},
	}, &sdk.ClientSessionOptions{ProtocolVersion: o.version})
	if err != nil {
		t.Fatalf("connecting the MCP client (%s): %v", o.version, err)
	}
	t.Cleanup(func() { cs.Close() })
	if got := cs.InitializeResult().ProtocolVersion; got != o.version {
		t.Fatalf("negotiated MCP %s, want %s", got, o.version)
	}
	return cs
}

func callList(ctx context.Context, cs *sdk.ClientSession) (*sdk.CallToolResult, error) {
	return cs.CallTool(ctx, &sdk.CallToolParams{Name: repohelper.ToolName, Arguments: map[string]any{}})
}

// wantRepos checks that the tool listed alice's repositories at the fake GitHub, private
// ones included (the connector asks for the repo scope).
func wantRepos(t testing.TB, res *sdk.CallToolResult, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("CallTool: %v", err)
	}
	if res.IsError || res.NeedsInput() {
		b, _ := json.Marshal(res)
		t.Fatalf("result = %s, want the repositories", b)
	}
	b, _ := json.Marshal(res.StructuredContent)
	wantJSON(t, b)
}

func wantJSON(t testing.TB, structured []byte) {
	t.Helper()
	var out repohelper.ListOutput
	if err := json.Unmarshal(structured, &out); err != nil {
		t.Fatalf("structured content %s: %v", structured, err)
	}
	want := repohelper.ListOutput{Account: stack.AliceLogin, Repositories: []repohelper.Repository{
		{FullName: stack.AliceLogin + "/diary", Private: true, URL: "https://github.com/" + stack.AliceLogin + "/diary"},
	}}
	if fmt.Sprint(out) != fmt.Sprint(want) {
		t.Errorf("repositories = %+v\nwant %+v", out, want)
	}
}

// urlElicitation reads the -32042 error of a 2025-11-25 call.
func urlElicitation(t testing.TB, err error) (*jsonrpc.Error, map[string]any) {
	t.Helper()
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != sdk.CodeURLElicitationRequired {
		t.Fatalf("CallTool error = %v, want JSON-RPC -32042", err)
	}
	var data struct {
		Elicitations []map[string]any `json:"elicitations"`
	}
	if err := json.Unmarshal(rpcErr.Data, &data); err != nil || len(data.Elicitations) != 1 {
		t.Fatalf("-32042 data %s: want one elicitation", rpcErr.Data)
	}
	return rpcErr, data.Elicitations[0]
}

// wantElicitation checks an elicitation against the refusal it relays: the link, its id and
// the person's sentence pass through unchanged.
func wantElicitation(t testing.TB, got map[string]any, refusal map[string]any) {
	t.Helper()
	want := map[string]any{
		"mode":          "url",
		"elicitationId": refusal["connect_id"],
		"url":           refusal["connect_uri"],
		"message":       refusal["connect_message"],
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("elicitation = %v\nwant %v", got, want)
	}
}

// ---- what needs tools from outside Go ------------------------------------------------------

// needTool skips the test when a tool is missing, except in CI, where a missing tool fails it.
func needTool(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is needed in CI: %v", what, err)
	}
	t.Skipf("skipping: %s is not available (%v); CI=true makes this a failure", what, err)
}

// nodeClient makes sure node and the TypeScript SDK are installed (npm ci from the lock file)
// and returns the path of the client script.
func nodeClient(t *testing.T) string {
	t.Helper()
	testenv.SkipShort(t, "Node.js and the MCP TypeScript SDK")
	_, err := exec.LookPath("node")
	needTool(t, "node", err)
	dir := "node"
	if _, err := os.Stat(dir + "/node_modules/@modelcontextprotocol/sdk/package.json"); err != nil {
		npm, err := exec.LookPath("npm")
		needTool(t, "npm", err)
		cmd := exec.CommandContext(t.Context(), npm, "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		needTool(t, "npm ci in test/e2e/node", wrapOutput(err, out))
	}
	return dir + "/client.mjs"
}

func wrapOutput(err error, out []byte) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %s", err, out)
}

// mcpLogWriter sends Repo Helper's warnings to the test log.
type mcpLogWriter struct{ t testing.TB }

func (w mcpLogWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

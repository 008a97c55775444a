package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	latchkey "latchkey.dev/latchkey/mcp"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/test/stack"
)

// Step-up authorization (docs/mcp-step-up.md) end to end: a notes MCP server whose tools need
// different scopes (latchkey.ResourceServer.ToolScopes), real Latchkey, and the Go SDK's own
// OAuth client (auth.AuthorizationCodeHandler), the person signing in and deciding on the
// consent page in their browser.
const (
	scopeRead  = "notes:read"
	scopeWrite = "notes:write"
)

type notesServer struct {
	*mcpStack
	URL string
	ran sync.Map // tool -> *atomic.Int32
}

// newNotesServer adds the notes MCP server to the stack, served by Repo Helper's declared
// OAuthClient (it introspects the tokens issued for its URL).
func newNotesServer(t *testing.T) *notesServer {
	t.Helper()
	s := &notesServer{mcpStack: newMCPStack(t)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.URL = "http://" + ln.Addr().String() + "/mcp"
	p := *s.Project
	p.Clients = maps.Clone(p.Clients)
	rh := *p.Clients[mcpServerClientID]
	rh.Resources = append(slices.Clone(rh.Resources), s.URL)
	p.Clients[mcpServerClientID] = &rh
	s.Project = &p
	s.Holder().Store(&config.Snapshot{Projects: map[string]*config.Project{p.Key: &p}, Version: 3})

	server := sdk.NewServer(&sdk.Implementation{Name: "notes", Version: "1.0.0"}, nil)
	for _, name := range []string{"read_notes", "write_notes"} {
		n := &atomic.Int32{}
		s.ran.Store(name, n)
		sdk.AddTool(server, &sdk.Tool{Name: name}, func(_ context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, struct{}, error) {
			n.Add(1)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: name + " for " + req.Extra.TokenInfo.UserID}}}, struct{}{}, nil
		})
	}
	rs := &latchkey.ResourceServer{
		Resource: s.URL, AuthorizationServer: s.Issuer, ClientID: mcpServerClientID, ClientSecret: mcpServerSecret,
		ScopesSupported: []string{scopeRead},
		ToolScopes:      map[string][]string{"read_notes": {scopeRead}, "write_notes": {scopeWrite}},
		// Introspection answers are not remembered, so a token is read fresh every time.
		CacheSize: -1,
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", rs.Handler(latchkey.NewStreamableHandler(func(*http.Request) *sdk.Server { return server }, nil)))
	mux.Handle(rs.MetadataPath(), rs.MetadataHandler())
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: mux}}
	srv.Start()
	t.Cleanup(srv.Close)
	return s
}

func (s *notesServer) runs(tool string) int32 {
	n, _ := s.ran.Load(tool)
	return n.(*atomic.Int32).Load()
}

// consentSeen is a consent page the person was shown: what it asked about, what it kept.
type consentSeen struct{ New, Kept []string }

var (
	reNewList  = regexp.MustCompile(`(?s)<ul class="scopes(?: scopes-new)?"[^>]*>(.*?)</ul>`)
	reKeptList = regexp.MustCompile(`(?s)<ul class="scopes scopes-kept"[^>]*>(.*?)</ul>`)
	reCode     = regexp.MustCompile(`<code>([^<]+)</code>`)
)

func listed(re *regexp.Regexp, body string) []string {
	m := re.FindStringSubmatch(body)
	if m == nil {
		return nil
	}
	var out []string
	for _, c := range reCode.FindAllStringSubmatch(m[1], -1) {
		out = append(out, c[1])
	}
	return out
}

// browserAgent is the person's side of the Go SDK's authorization: it opens the authorization
// URL in the person's browser, where they sign in and allow, and reads the redirect back.
type browserAgent struct {
	pp       *mcpPerson
	t        *testing.T
	mu       sync.Mutex
	consents []consentSeen
	scopes   []string // the scope of each authorization request, in order
}

func (a *browserAgent) fetch(_ context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
	u, err := url.Parse(args.URL)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.scopes = append(a.scopes, u.Query().Get("scope"))
	a.mu.Unlock()
	pg := a.pp.B.MustGet(args.URL)
	for range 25 {
		if strings.Contains(pg.Body, "Where access goes") {
			a.mu.Lock()
			a.consents = append(a.consents, consentSeen{New: listed(reNewList, pg.Body), Kept: listed(reKeptList, pg.Body)})
			a.mu.Unlock()
		}
		next, done := a.pp.step(a.t, pg)
		if done {
			pg = next
			break
		}
		pg = next
	}
	loc, err := url.Parse(pg.Location())
	if err != nil || !strings.HasPrefix(pg.Location(), a.pp.s.AgentRedirect) {
		return nil, errors.New("authorization did not come back to the agent: " + pg.Text())
	}
	q := loc.Query()
	if e := q.Get("error"); e != "" {
		return nil, errors.New("authorization refused: " + e)
	}
	return &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}, nil
}

// The whole story with the SDK's client, on both protocol versions: the agent connects with
// notes:read, calls write_notes and gets 403 insufficient_scope, the SDK re-authorizes with the
// union, the person sees a consent page that asks for notes:write and keeps notes:read, and the
// call goes through; the new token still calls read_notes.
func TestMCPStepUpWithGoSDK(t *testing.T) {
	for _, version := range []string{latchkey.ProtocolURLElicitationError, latchkey.ProtocolInputRequired} {
		t.Run(version, func(t *testing.T) {
			s := newNotesServer(t)
			agent := &browserAgent{pp: s.alice(), t: t}
			handler, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
				PreregisteredClient:      &oauthex.ClientCredentials{ClientID: s.AgentID},
				RedirectURL:              s.AgentRedirect,
				AuthorizationCodeFetcher: agent.fetch,
			})
			if err != nil {
				t.Fatal(err)
			}
			c := sdk.NewClient(&sdk.Implementation{Name: "chat-agent", Version: "1.0.0"}, nil)
			cs, err := c.Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: s.URL, OAuthHandler: handler},
				&sdk.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatalf("connecting: %v", err)
			}
			defer cs.Close()
			if _, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "read_notes"}); err != nil {
				t.Fatalf("read_notes: %v", err)
			}
			res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "write_notes"})
			if err != nil || res.IsError {
				t.Fatalf("write_notes after step-up: %v %v", res, err)
			}
			if _, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "read_notes"}); err != nil {
				t.Fatalf("read_notes with the stepped-up token: %v", err)
			}
			if s.runs("write_notes") != 1 || s.runs("read_notes") != 2 {
				t.Errorf("runs: write_notes %d, read_notes %d; want 1 and 2", s.runs("write_notes"), s.runs("read_notes"))
			}
			wantConsents := []consentSeen{{New: []string{scopeRead}}, {New: []string{scopeWrite}, Kept: []string{scopeRead}}}
			if !slicesEqualFunc(agent.consents, wantConsents) {
				t.Errorf("consent pages = %+v, want %+v", agent.consents, wantConsents)
			}
			// The SDK makes the union in no particular order.
			if want := []string{scopeRead, scopeRead + " " + scopeWrite}; !slices.EqualFunc(agent.scopes, want, sameScopes) {
				t.Errorf("authorization requests asked for %q, want %q", agent.scopes, want)
			}
			g, err := s.Store().GetGrant(t.Context(), s.Project.Key, s.PersonID(stack.AliceEmail), s.AgentID)
			if err != nil || !sameScopes(strings.Join(g.Scopes, " "), scopeRead+" "+scopeWrite) {
				t.Errorf("stored consent = %v %v, want both scopes", g.Scopes, err)
			}
			tok, err := handler.TokenSource(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			at, err := tok.Token()
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := s.introspect(t, at.AccessToken)["scope"].(string); !sameScopes(got, scopeRead+" "+scopeWrite) {
				t.Errorf("the stepped-up token's scope = %q, want %q", got, scopeRead+" "+scopeWrite)
			}
		})
	}
}

// sameScopes compares two scope strings as sets.
func sameScopes(a, b string) bool {
	x, y := strings.Fields(a), strings.Fields(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

func slicesEqualFunc(a, b []consentSeen) bool {
	return slices.EqualFunc(a, b, func(x, y consentSeen) bool { return slices.Equal(x.New, y.New) && slices.Equal(x.Kept, y.Kept) })
}

// introspect asks Latchkey about a token as the notes server does.
func (s *notesServer) introspect(t *testing.T, token string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.Issuer+"/introspect", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(mcpServerClientID, mcpServerSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// authorizeURL is an authorization request of the agent for the notes server.
func (s *notesServer) authorizeURL(scope string, extra url.Values) (string, string) {
	verifier := secret.New("")
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{
		"response_type": {"code"}, "client_id": {s.AgentID}, "redirect_uri": {s.AgentRedirect}, "state": {"st"},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
		"resource": {s.URL}, "scope": {scope},
	}
	maps.Copy(q, extra)
	return s.Issuer + "/authorize?" + q.Encode(), verifier
}

// redeem trades a code from the agent's redirect for tokens.
func (s *notesServer) redeem(t *testing.T, pg stack.Page, verifier string) (access, refresh, scope string) {
	t.Helper()
	loc, err := url.Parse(pg.Location())
	if err != nil || loc.Query().Get("code") == "" {
		t.Fatalf("no code: %d %s %s", pg.Status, pg.Location(), pg.Text())
	}
	return s.tokenRequest(t, url.Values{"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")},
		"redirect_uri": {s.AgentRedirect}, "code_verifier": {verifier}, "client_id": {s.AgentID}, "resource": {s.URL}})
}

func (s *notesServer) tokenRequest(t *testing.T, form url.Values) (access, refresh, scope string) {
	t.Helper()
	resp, err := http.PostForm(s.Issuer+"/token", form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tok struct {
		AccessToken  string `json:"access_token"`
		RefreshToken string `json:"refresh_token"`
		Scope        string `json:"scope"`
		Error        string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tok); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", "", "error:" + tok.Error
	}
	return tok.AccessToken, tok.RefreshToken, tok.Scope
}

func (s *notesServer) refresh(t *testing.T, rt string) (access, refresh, scope string) {
	t.Helper()
	return s.tokenRequest(t, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}, "client_id": {s.AgentID}})
}

// Latchkey's side of step-up, played through the authorization endpoint by hand: asking for
// more shows the consent page with what is new and what is kept; asking for only the new scope
// never takes the old one from the stored consent; what was allowed is not asked again; and
// refresh tokens carry what their authorization carried, the one issued before the step-up
// rotating on as before.
func TestStepUpConsent(t *testing.T) {
	s := newNotesServer(t)
	alice := s.alice()
	ctx := t.Context()
	aliceID := func() string { return s.PersonID(stack.AliceEmail) }
	grant := func() []string {
		g, err := s.Store().GetGrant(ctx, s.Project.Key, aliceID(), s.AgentID)
		if err != nil {
			t.Fatalf("GetGrant: %v", err)
		}
		return g.Scopes
	}

	u, v := s.authorizeURL(scopeRead, nil)
	_, rtRead, sc := s.redeem(t, alice.walk(t, u), v)
	if sc != scopeRead {
		t.Fatalf("first token scope %q", sc)
	}

	t.Run("asking for only the new scope keeps the old one in the consent", func(t *testing.T) {
		u, v := s.authorizeURL(scopeWrite, nil)
		pg := alice.B.MustGet(u)
		if got := (consentSeen{listed(reNewList, pg.Body), listed(reKeptList, pg.Body)}); !slicesEqualFunc([]consentSeen{got}, []consentSeen{{New: []string{scopeWrite}, Kept: []string{scopeRead}}}) {
			t.Fatalf("consent page shows %+v, want notes:write new and notes:read kept: %s", got, pg.Text())
		}
		_, _, sc := s.redeem(t, alice.walk(t, u), v)
		if sc != scopeWrite {
			t.Errorf("token for the new scope only carries %q, want %q", sc, scopeWrite)
		}
		if g := grant(); !slices.Equal(g, []string{scopeRead, scopeWrite}) {
			t.Errorf("stored consent = %v, want both", g)
		}
	})

	t.Run("what was allowed is not asked again", func(t *testing.T) {
		u, v := s.authorizeURL(scopeRead+" "+scopeWrite, nil)
		pg := alice.B.MustGet(u)
		if !strings.HasPrefix(pg.Location(), s.AgentRedirect) {
			t.Fatalf("a request within the consent was asked again: %d %s", pg.Status, pg.Text())
		}
		access, rtBoth, sc := s.redeem(t, pg, v)
		if sc != scopeRead+" "+scopeWrite || access == "" {
			t.Fatalf("accumulated token scope %q", sc)
		}
		// The refresh token of the accumulated authorization carries both scopes through
		// rotation; the one issued before the step-up still refreshes to what it carried.
		if _, _, sc := s.refresh(t, rtBoth); sc != scopeRead+" "+scopeWrite {
			t.Errorf("refresh after step-up: scope %q, want both", sc)
		}
		_, rtReadNext, sc := s.refresh(t, rtRead)
		if sc != scopeRead {
			t.Errorf("the earlier refresh token: scope %q, want %q", sc, scopeRead)
		}
		// Rotation as before: the spent refresh token, replayed after the grace window, is
		// refused and ends its family.
		s.Clock.Advance(s.Project.Lifetimes.RefreshGrace + 1)
		if _, _, sc := s.refresh(t, rtRead); sc != "error:invalid_grant" {
			t.Errorf("replayed refresh token: %q, want invalid_grant", sc)
		}
		if _, _, sc := s.refresh(t, rtReadNext); sc != "error:invalid_grant" {
			t.Errorf("its family after the replay: %q, want invalid_grant", sc)
		}
	})

	t.Run("prompt=none for a scope not yet allowed gets consent_required and no code", func(t *testing.T) {
		u, _ := s.authorizeURL(scopeRead+" notes:admin", url.Values{"prompt": {"none"}})
		pg := alice.B.MustGet(u)
		loc, _ := url.Parse(pg.Location())
		if !strings.HasPrefix(pg.Location(), s.AgentRedirect) || loc.Query().Get("error") != "consent_required" || loc.Query().Has("code") {
			t.Fatalf("answer %d %s", pg.Status, pg.Location())
		}
		if g := grant(); slices.Contains(g, "notes:admin") {
			t.Errorf("stored consent gained notes:admin without the person: %v", g)
		}
	})
}

// The agent cannot get a scope the person has not allowed: the consent page is shown, a
// decision without the page's form token is refused, and nothing is added to the consent.
func TestAttackStepUpWithoutConsent(t *testing.T) {
	s := newNotesServer(t)
	alice := s.alice()
	u, v := s.authorizeURL(scopeRead, nil)
	s.redeem(t, alice.walk(t, u), v)

	u, _ = s.authorizeURL(scopeRead+" "+scopeWrite, nil)
	pg := alice.B.MustGet(u)
	if pg.Status != http.StatusOK || !strings.Contains(pg.Body, "Where access goes") || pg.Header.Get("Location") != "" {
		t.Fatalf("a request for more was not put to the person: %d %s", pg.Status, pg.Location())
	}
	// A page of another site posts the decision in alice's browser: no form token.
	action, f, ok := pg.Form("Allow")
	if !ok {
		t.Fatal("no Allow form")
	}
	f.Set("decision", "allow")
	f.Del("csrf_token")
	forged := alice.B.MustPost(resolve(t, pg, action), f)
	if forged.Status != http.StatusForbidden || forged.Header.Get("Location") != "" {
		t.Errorf("a decision without the form token: %d %s", forged.Status, forged.Location())
	}
	g, err := s.Store().GetGrant(t.Context(), s.Project.Key, s.PersonID(stack.AliceEmail), s.AgentID)
	if err != nil || !slices.Equal(g.Scopes, []string{scopeRead}) {
		t.Errorf("stored consent = %v %v, want notes:read only", g.Scopes, err)
	}
}

// A client that registered itself with a scope cannot step up past it: the request is refused
// with invalid_scope on its redirect, before any consent page, and nothing is stored.
func TestAttackSelfRegisteredStepUpPastItsScope(t *testing.T) {
	s := newNotesServer(t)
	body, _ := json.Marshal(map[string]any{
		"client_name": "Narrow Agent", "redirect_uris": []string{s.AgentRedirect}, "grant_types": []string{"authorization_code"},
		"response_types": []string{"code"}, "token_endpoint_auth_method": "none", "scope": scopeRead,
	})
	resp, err := http.Post(s.Issuer+"/register", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	var reg struct {
		ClientID string `json:"client_id"`
	}
	json.NewDecoder(resp.Body).Decode(&reg)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("register: %d", resp.StatusCode)
	}
	s.AgentID = reg.ClientID
	alice := s.alice()
	u, v := s.authorizeURL(scopeRead, nil)
	s.redeem(t, alice.walk(t, u), v)

	u, _ = s.authorizeURL(scopeRead+" "+scopeWrite, nil)
	pg := alice.B.MustGet(u)
	loc, _ := url.Parse(pg.Location())
	if !strings.HasPrefix(pg.Location(), s.AgentRedirect) || loc.Query().Get("error") != "invalid_scope" || loc.Query().Has("code") {
		t.Fatalf("step-up past the registered scope: %d %s %s", pg.Status, pg.Location(), pg.Text())
	}
	g, err := s.Store().GetGrant(t.Context(), s.Project.Key, s.PersonID(stack.AliceEmail), s.AgentID)
	if err != nil || !slices.Equal(g.Scopes, []string{scopeRead}) {
		t.Errorf("stored consent = %v %v, want notes:read only", g.Scopes, err)
	}
}

// The same story with the TypeScript SDK's own OAuth support (1.32, protocol 2025-11-25).
// That client asks for exactly the challenge's scope, replacing what it asked for before; so
// the server's 2025-11-25 challenge names what the token holds as well, and the stepped-up
// token still calls read_notes.
func TestMCPStepUpWithTypeScriptSDK(t *testing.T) {
	script := filepath.Join(filepath.Dir(nodeClient(t)), "stepup.mjs")
	s := newNotesServer(t)
	alice := s.alice()
	cmd := exec.CommandContext(t.Context(), "node", script, s.URL, s.AgentID, s.AgentRedirect, "read_notes", "write_notes", "read_notes")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("node client: %v\n%s", err, stderr.String())
		}
	}()

	agent := &browserAgent{pp: alice, t: t}
	var results []string
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var ev struct {
			Event, URL, Tool, Text, Message string
			IsError                         bool
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("node client said %q: %v", sc.Text(), err)
		}
		switch ev.Event {
		case "authorize":
			res, err := agent.fetch(t.Context(), &auth.AuthorizationArgs{URL: ev.URL})
			if err != nil {
				t.Fatalf("authorizing the TypeScript client: %v", err)
			}
			back := s.AgentRedirect + "?" + url.Values{"code": {res.Code}, "state": {res.State}, "iss": {res.Iss}}.Encode()
			if _, err := io.WriteString(stdin, back+"\n"); err != nil {
				t.Fatal(err)
			}
		case "result":
			if ev.IsError {
				t.Errorf("%s: tool error %q", ev.Tool, ev.Text)
			}
			results = append(results, ev.Tool)
		default:
			t.Errorf("node client: %s", sc.Text())
		}
	}
	if want := []string{"read_notes", "write_notes", "read_notes"}; !slices.Equal(results, want) {
		t.Errorf("tools that answered: %v, want %v", results, want)
	}
	if want := []string{scopeRead, scopeRead + " " + scopeWrite}; !slices.Equal(agent.scopes, want) {
		t.Errorf("authorization requests asked for %q, want %q (the challenge's union)", agent.scopes, want)
	}
	wantConsents := []consentSeen{{New: []string{scopeRead}}, {New: []string{scopeWrite}, Kept: []string{scopeRead}}}
	if !slicesEqualFunc(agent.consents, wantConsents) {
		t.Errorf("consent pages = %+v, want %+v", agent.consents, wantConsents)
	}
}

// A self-registered client that registered no scope is held to the Project's
// spec.registration.scopes: a step-up to a scope the Project does not list is refused with
// invalid_scope before any page, and the consent keeps what it had. A declared OAuthClient is
// not held to that list.
func TestAttackSelfRegisteredStepUpOutsideTheProjectsScopes(t *testing.T) {
	s := newNotesServer(t)
	p := *s.Project
	p.Registration.Scopes = []string{scopeRead, scopeWrite}
	s.Project = &p
	s.Holder().Store(&config.Snapshot{Projects: map[string]*config.Project{p.Key: &p}, Version: 4})
	alice := s.alice()
	u, v := s.authorizeURL(scopeRead+" "+scopeWrite, nil)
	if _, _, sc := s.redeem(t, alice.walk(t, u), v); sc != scopeRead+" "+scopeWrite {
		t.Fatalf("scopes the Project lists: %q", sc)
	}
	u, _ = s.authorizeURL(scopeRead+" notes:admin", nil)
	pg := alice.B.MustGet(u)
	loc, _ := url.Parse(pg.Location())
	if !strings.HasPrefix(pg.Location(), s.AgentRedirect) || loc.Query().Get("error") != "invalid_scope" || loc.Query().Has("code") {
		t.Fatalf("a scope the Project does not list: %d %s %s", pg.Status, pg.Location(), pg.Text())
	}
	g, err := s.Store().GetGrant(t.Context(), s.Project.Key, s.PersonID(stack.AliceEmail), s.AgentID)
	if err != nil || slices.Contains(g.Scopes, "notes:admin") {
		t.Errorf("stored consent = %v %v", g.Scopes, err)
	}

	// Repo Helper, a declared OAuthClient, may still ask for a scope the list leaves out.
	declared := s.Issuer + "/authorize?" + url.Values{
		"response_type": {"code"}, "client_id": {mcpServerClientID}, "redirect_uri": {s.ServerRedirect}, "scope": {"notes:admin"},
		"code_challenge": {"E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"}, "code_challenge_method": {"S256"},
	}.Encode()
	pg = alice.B.MustGet(declared)
	if pg.Status != http.StatusOK || !strings.Contains(pg.Body, "Where access goes") {
		t.Errorf("a declared client's request was not put to the person: %d %s", pg.Status, pg.Location())
	}
}

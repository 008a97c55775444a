package repohelper_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"latchkey.dev/latchkey/examples/repohelper"
)

const (
	clientID     = "repo-helper"
	clientSecret = "lk_cs_repo-helper-test-secret"
	message      = "Open this link to connect your GitHub account and let Repo Helper use it."
)

// fakeLatchkey answers metadata, introspection and token exchange the way Latchkey does, for
// two people whose access tokens are "at-<person>".
type fakeLatchkey struct {
	t        *testing.T
	srv      *httptest.Server
	issuer   string
	resource string // set once the repo helper's URL is known

	mu        sync.Mutex
	connected map[string]string // person → GitHub token
	metaHits  atomic.Int32
	exchanges atomic.Int32
}

func newFakeLatchkey(t *testing.T) *fakeLatchkey {
	f := &fakeLatchkey{t: t, connected: map[string]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-authorization-server/team/demo", func(w http.ResponseWriter, r *http.Request) {
		f.metaHits.Add(1)
		writeJSON(w, http.StatusOK, map[string]any{
			"issuer":                 f.issuer,
			"authorization_endpoint": f.issuer + "/authorize",
			"token_endpoint":         f.issuer + "/token",
			"introspection_endpoint": f.issuer + "/introspect",
		})
	})
	mux.HandleFunc("POST /team/demo/introspect", f.introspect)
	mux.HandleFunc("POST /team/demo/token", f.token)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	f.issuer = f.srv.URL + "/team/demo"
	return f
}

func (f *fakeLatchkey) authOK(r *http.Request) bool {
	id, sec, ok := r.BasicAuth()
	return ok && id == clientID && sec == clientSecret
}

func (f *fakeLatchkey) introspect(w http.ResponseWriter, r *http.Request) {
	if !f.authOK(r) {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_client"})
		return
	}
	person, ok := strings.CutPrefix(r.FormValue("token"), "at-")
	if !ok {
		writeJSON(w, http.StatusOK, map[string]any{"active": false})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"active": true, "sub": person, "client_id": clientID, "aud": []string{f.resource},
		"iss": f.issuer, "exp": time.Now().Add(time.Hour).Unix(), "token_type": "Bearer",
	})
}

func (f *fakeLatchkey) token(w http.ResponseWriter, r *http.Request) {
	if !f.authOK(r) {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_client"})
		return
	}
	f.exchanges.Add(1)
	if r.FormValue("audience") != "github" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_target"})
		return
	}
	person := strings.TrimPrefix(r.FormValue("subject_token"), "at-")
	f.mu.Lock()
	gh, ok := f.connected[person]
	f.mu.Unlock()
	w.Header().Set("Cache-Control", "no-store")
	if !ok {
		writeJSON(w, http.StatusBadRequest, map[string]any{
			"error": "invalid_grant", "error_description": "the person has not connected a GitHub account",
			"reason": "connect_required", "connect_uri": f.linkFor(person), "connect_id": "c-" + person,
			"connect_expires_in": 1800, "connect_message": message,
		})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"access_token": gh, "token_type": "Bearer",
		"issued_token_type": "urn:ietf:params:oauth:token-type:access_token", "expires_in": 3600,
	})
}

func (f *fakeLatchkey) linkFor(person string) string {
	return f.issuer + "/account/services/link/code-" + person
}

func (f *fakeLatchkey) connect(person, githubToken string) {
	f.mu.Lock()
	f.connected[person] = githubToken
	f.mu.Unlock()
}

// fakeGitHub serves GET /user/repos in pages of two, with a Link header, to the tokens it knows.
type fakeGitHub struct {
	srv    *httptest.Server
	owners map[string]string // token → login
	repos  map[string][]map[string]any
	// nextOverride replaces the Link header's target, to test where the token may go.
	nextOverride string
}

func newFakeGitHub(t *testing.T) *fakeGitHub {
	g := &fakeGitHub{
		owners: map[string]string{"gho_alice": "alice-gh"},
		repos: map[string][]map[string]any{"alice-gh": {
			repo("alice-gh", "diary", true), repo("alice-gh", "notes", true), repo("alice-gh", "website", false),
		}},
	}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		login, ok := g.owners[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
		if r.URL.Path != "/user/repos" || !ok {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"message": "Bad credentials"})
			return
		}
		all := g.repos[login]
		page := 1
		fmt.Sscan(r.URL.Query().Get("page"), &page)
		start, end := (page-1)*2, min(page*2, len(all))
		if end < len(all) {
			next := fmt.Sprintf("%s/user/repos?page=%d", g.srv.URL, page+1)
			if g.nextOverride != "" {
				next = g.nextOverride
			}
			w.Header().Set("Link", fmt.Sprintf(`<%s>; rel="next", <%s/user/repos?page=9>; rel="last"`, next, g.srv.URL))
		}
		writeJSON(w, http.StatusOK, all[start:end])
	}))
	t.Cleanup(g.srv.Close)
	return g
}

func repo(owner, name string, private bool) map[string]any {
	return map[string]any{
		"full_name": owner + "/" + name, "private": private, "html_url": "https://github.com/" + owner + "/" + name,
		"owner": map[string]any{"login": owner},
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

type stack struct {
	lk  *fakeLatchkey
	gh  *fakeGitHub
	url string // the MCP endpoint
}

func newStack(t *testing.T) *stack {
	t.Helper()
	s := &stack{lk: newFakeLatchkey(t), gh: newFakeGitHub(t)}
	var h http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	s.url = srv.URL + "/mcp"
	s.lk.resource = s.url
	var err error
	h, err = repohelper.New(repohelper.Options{
		Issuer: s.lk.issuer, ClientID: clientID, ClientSecret: clientSecret,
		Resource: s.url, GitHubAPI: s.gh.srv.URL,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func (s *stack) session(t *testing.T, token, version string, elicit func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error)) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, &sdk.ClientOptions{
		Capabilities:       &sdk.ClientCapabilities{Elicitation: &sdk.ElicitationCapabilities{URL: &sdk.URLElicitationCapabilities{}}},
		ElicitationHandler: elicit,
	})
	cs, err := c.Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: s.url, HTTPClient: &http.Client{Transport: bearer{token}}},
		&sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func list(t *testing.T, cs *sdk.ClientSession, args map[string]any) (*sdk.CallToolResult, error) {
	t.Helper()
	return cs.CallTool(t.Context(), &sdk.CallToolParams{Name: repohelper.ToolName, Arguments: args})
}

func output(t *testing.T, res *sdk.CallToolResult) repohelper.ListOutput {
	t.Helper()
	if res.IsError {
		t.Fatalf("tool error: %v", res.Content[0].(*sdk.TextContent).Text)
	}
	var out repohelper.ListOutput
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func names(out repohelper.ListOutput) []string {
	var n []string
	for _, r := range out.Repositories {
		n = append(n, r.FullName)
	}
	return n
}

func TestListsRepositoriesAcrossPages(t *testing.T) {
	s := newStack(t)
	s.lk.connect("alice", "gho_alice")
	cs := s.session(t, "at-alice", "2025-11-25", nil)
	tests := []struct {
		visibility string
		want       []string
	}{
		{"", []string{"alice-gh/diary", "alice-gh/notes", "alice-gh/website"}},
		{"all", []string{"alice-gh/diary", "alice-gh/notes", "alice-gh/website"}},
		{"private", []string{"alice-gh/diary", "alice-gh/notes"}},
		{"public", []string{"alice-gh/website"}},
	}
	for _, tt := range tests {
		t.Run("visibility="+tt.visibility, func(t *testing.T) {
			args := map[string]any{}
			if tt.visibility != "" {
				args["visibility"] = tt.visibility
			}
			res, err := list(t, cs, args)
			if err != nil {
				t.Fatal(err)
			}
			out := output(t, res)
			if got := names(out); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("repositories = %v, want %v", got, tt.want)
			}
			if out.Account != "alice-gh" {
				t.Errorf("account = %q, want alice-gh", out.Account)
			}
		})
	}
	res, err := list(t, cs, map[string]any{"visibility": "secret"})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*sdk.TextContent).Text, "visibility must be") {
		t.Errorf("bad visibility = %v, %v; want a tool error", res, err)
	}
}

// 2026-07-28: the link reaches the client's elicitation handler; the SDK retries once the
// handler returns and the call then lists the repositories.
func TestConnectLinkInputRequired(t *testing.T) {
	s := newStack(t)
	var shown []sdk.ElicitParams
	cs := s.session(t, "at-alice", "2026-07-28", func(_ context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
		shown = append(shown, *req.Params)
		s.lk.connect("alice", "gho_alice")
		return &sdk.ElicitResult{Action: "accept"}, nil
	})
	res, err := list(t, cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(output(t, res)); len(got) != 3 {
		t.Errorf("repositories = %v, want 3", got)
	}
	want := []sdk.ElicitParams{{Mode: "url", Message: message, URL: s.lk.linkFor("alice")}}
	if !reflect.DeepEqual(shown, want) {
		t.Errorf("shown = %+v, want %+v", shown, want)
	}
	if n := s.lk.exchanges.Load(); n != 2 {
		t.Errorf("exchanges = %d, want 2", n)
	}
}

// 2025-11-25: -32042 carrying the link; the next call after connecting succeeds.
func TestConnectLinkURLElicitationError(t *testing.T) {
	s := newStack(t)
	cs := s.session(t, "at-alice", "2025-11-25", nil)
	_, err := list(t, cs, nil)
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != sdk.CodeURLElicitationRequired {
		t.Fatalf("CallTool error = %v, want -32042", err)
	}
	var data struct {
		Elicitations []map[string]string `json:"elicitations"`
	}
	json.Unmarshal(rpcErr.Data, &data)
	want := []map[string]string{{"mode": "url", "elicitationId": "c-alice", "url": s.lk.linkFor("alice"), "message": message}}
	if !reflect.DeepEqual(data.Elicitations, want) {
		t.Errorf("elicitations = %v, want %v", data.Elicitations, want)
	}
	s.lk.connect("alice", "gho_alice")
	res, err := list(t, cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(output(t, res)); len(got) != 3 {
		t.Errorf("repositories = %v", got)
	}
}

func TestGitHubRefusesToken(t *testing.T) {
	s := newStack(t)
	s.lk.connect("alice", "gho_revoked")
	cs := s.session(t, "at-alice", "2025-11-25", nil)
	res, err := list(t, cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(res.Content[0].(*sdk.TextContent).Text, "GitHub did not accept the token") {
		t.Errorf("result = %+v, want a tool error saying GitHub refused the token", res)
	}
}

// A next-page link to another origin is not followed, so the person's token goes to GitHub only.
func TestNextPageStaysOnGitHub(t *testing.T) {
	s := newStack(t)
	var leaked atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			leaked.Add(1)
		}
		writeJSON(w, http.StatusOK, []any{})
	}))
	t.Cleanup(elsewhere.Close)
	s.gh.nextOverride = elsewhere.URL + "/user/repos?page=2"
	s.lk.connect("alice", "gho_alice")
	res, err := list(t, s.session(t, "at-alice", "2025-11-25", nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(output(t, res)); len(got) != 2 {
		t.Errorf("repositories = %v, want the first page only", got)
	}
	if leaked.Load() != 0 {
		t.Error("the GitHub token was sent to another origin")
	}
}

func TestProtectedResource(t *testing.T) {
	s := newStack(t)
	resp, err := http.Post(s.url, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	u, _ := url.Parse(s.url)
	meta := u.Scheme + "://" + u.Host + "/.well-known/oauth-protected-resource/mcp"
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `resource_metadata="`+meta+`"`) {
		t.Errorf("without a token: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	for _, path := range []string{meta, u.Scheme + "://" + u.Host + "/.well-known/oauth-protected-resource"} {
		resp, err := http.Get(path)
		if err != nil {
			t.Fatal(err)
		}
		var md struct {
			Resource             string   `json:"resource"`
			AuthorizationServers []string `json:"authorization_servers"`
		}
		json.NewDecoder(resp.Body).Decode(&md)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || md.Resource != s.url || !reflect.DeepEqual(md.AuthorizationServers, []string{s.lk.issuer}) {
			t.Errorf("%s: %d %+v", path, resp.StatusCode, md)
		}
	}
	// A token Latchkey does not vouch for is refused before any tool runs.
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	_, err = c.Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: s.url, HTTPClient: &http.Client{Transport: bearer{"forged"}}}, nil)
	if err == nil {
		t.Error("a forged token connected")
	}
	if n := s.lk.exchanges.Load(); n != 0 {
		t.Errorf("exchanges = %d, want 0", n)
	}
}

func TestNewOptions(t *testing.T) {
	lk := newFakeLatchkey(t)
	base := repohelper.Options{Issuer: lk.issuer, ClientID: clientID, ClientSecret: clientSecret, Resource: "http://127.0.0.1:1/mcp"}
	tests := []struct {
		name      string
		change    func(*repohelper.Options)
		wantErr   string
		wantFetch bool
	}{
		{"discovers endpoints", func(*repohelper.Options) {}, "", true},
		{"explicit endpoints skip discovery", func(o *repohelper.Options) {
			o.Issuer, o.TokenURL, o.IntrospectionURL = "http://127.0.0.1:1/x", "http://127.0.0.1:1/x/token", "http://127.0.0.1:1/x/introspect"
		}, "", false},
		{"issuer mismatch", func(o *repohelper.Options) { o.Issuer = lk.srv.URL + "/team/demo/" }, "names issuer", false},
		{"no secret", func(o *repohelper.Options) { o.ClientSecret = "" }, "required", false},
		{"relative resource", func(o *repohelper.Options) { o.Resource = "/mcp" }, "absolute", false},
		{"short state key", func(o *repohelper.Options) { o.StateKey = make([]byte, 16) }, "32", true},
		{"bad GitHub URL", func(o *repohelper.Options) { o.GitHubAPI = "api.github.com" }, "GitHub API URL", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := lk.metaHits.Load()
			o := base
			tt.change(&o)
			_, err := repohelper.New(o)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("New: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("New error = %v, want one containing %q", err, tt.wantErr)
			}
			if fetched := lk.metaHits.Load() > before; tt.wantErr == "" && fetched != tt.wantFetch {
				t.Errorf("metadata fetched = %v, want %v", fetched, tt.wantFetch)
			}
		})
	}
}

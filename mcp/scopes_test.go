package mcp_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	latchkey "latchkey.dev/latchkey/mcp"
)

// notesStack is an MCP server with two tools of different needs: read_notes needs notes:read,
// write_notes needs notes:write (declared in ToolScopes), behind a ResourceServer whose tokens
// come from the fake Latchkey.
type notesStack struct {
	fake *fakeLatchkey
	rs   *latchkey.ResourceServer
	url  string
	ran  sync.Map // tool name -> *atomic.Int32
}

func newNotesStack(t *testing.T) *notesStack {
	t.Helper()
	s := &notesStack{fake: newFakeLatchkey(t)}
	server := sdk.NewServer(&sdk.Implementation{Name: "notes", Version: "1.0.0"}, nil)
	for _, name := range []string{"read_notes", "write_notes", "about"} {
		n := &atomic.Int32{}
		s.ran.Store(name, n)
		sdk.AddTool(server, &sdk.Tool{Name: name}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, struct{}, error) {
			n.Add(1)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: name + " ran"}}}, struct{}{}, nil
		})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.url = "http://" + ln.Addr().String() + "/mcp"
	s.rs = &latchkey.ResourceServer{
		Resource: s.url, AuthorizationServer: s.fake.issuer,
		ClientID: s.fake.clientID, ClientSecret: s.fake.clientSecret,
		ScopesSupported: []string{"notes:read"},
		ToolScopes: map[string][]string{
			"read_notes":  {"notes:read"},
			"write_notes": {"notes:write"},
		},
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", s.rs.Handler(latchkey.NewStreamableHandler(func(*http.Request) *sdk.Server { return server }, nil)))
	mux.Handle(s.rs.MetadataPath(), s.rs.MetadataHandler())
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: mux}}
	srv.Start()
	t.Cleanup(srv.Close)
	return s
}

func (s *notesStack) token(token, scope string) {
	s.fake.set(token, fakeToken{sub: "alice", client: "agent", aud: []string{s.url}, scope: scope, tokenType: "Bearer",
		exp: time.Now().Add(time.Hour), active: true})
}

func (s *notesStack) runs(tool string) int32 {
	n, _ := s.ran.Load(tool)
	return n.(*atomic.Int32).Load()
}

// post sends one raw JSON-RPC body, as a client on version does after initialize.
func (s *notesStack) post(t *testing.T, token, version, body string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if version != "" {
		req.Header.Set("Mcp-Protocol-Version", version)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate"), string(b)
}

func call(tool string) string {
	return `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + tool + `","arguments":{}}}`
}

// The challenge a tools/call gets, by protocol version: on 2025-11-25 (and older, and a request
// that names no version) what the token holds plus what the tool needs, as that version's
// recommended approach says, so a client that asks for exactly the challenge keeps what it had;
// from 2026-07-28 only what the tool needs, as RFC 6750 §3.1 reads, since the client makes the
// union itself.
func TestToolScopeChallenge(t *testing.T) {
	s := newNotesStack(t)
	s.token("lk_at_reader", "notes:read profile")
	meta := s.rs.MetadataURL()
	tests := []struct {
		name, version, tool, want string
	}{
		{"2025-11-25 asks for the union", latchkey.ProtocolURLElicitationError, "write_notes",
			`Bearer error="insufficient_scope", scope="notes:read profile notes:write", resource_metadata="` + meta + `", error_description="the tool write_notes needs more permission"`},
		{"2025-06-18 asks for the union", "2025-06-18", "write_notes",
			`Bearer error="insufficient_scope", scope="notes:read profile notes:write", resource_metadata="` + meta + `", error_description="the tool write_notes needs more permission"`},
		{"no version header asks for the union", "", "write_notes",
			`Bearer error="insufficient_scope", scope="notes:read profile notes:write", resource_metadata="` + meta + `", error_description="the tool write_notes needs more permission"`},
		{"2026-07-28 asks for what the tool needs", latchkey.ProtocolInputRequired, "write_notes",
			`Bearer error="insufficient_scope", scope="notes:write", resource_metadata="` + meta + `", error_description="the tool write_notes needs more permission"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, challenge, _ := s.post(t, "lk_at_reader", tt.version, call(tt.tool))
			if status != http.StatusForbidden || challenge != tt.want {
				t.Errorf("answer = %d %q\nwant 403 %q", status, challenge, tt.want)
			}
		})
	}
	if n := s.runs("write_notes"); n != 0 {
		t.Errorf("write_notes ran %d times without its scope", n)
	}
	// The challenge parses as the SDK's client reads it.
	_, challenge, _ := s.post(t, "lk_at_reader", latchkey.ProtocolURLElicitationError, call("write_notes"))
	cs, err := oauthex.ParseWWWAuthenticate([]string{challenge})
	if err != nil || len(cs) != 1 || cs[0].Params["error"] != "insufficient_scope" || cs[0].Params["resource_metadata"] != meta ||
		cs[0].Params["scope"] != "notes:read profile notes:write" {
		t.Errorf("SDK reads the challenge as %+v, %v", cs, err)
	}
}

// A token with the scope of one tool calls that tool and no other; tools/list and a tool that
// needs nothing are open to every valid token.
func TestToolScopesPerTool(t *testing.T) {
	s := newNotesStack(t)
	s.token("lk_at_writer", "notes:write")
	ctx := t.Context()
	for _, version := range []string{latchkey.ProtocolURLElicitationError, latchkey.ProtocolInputRequired} {
		t.Run(version, func(t *testing.T) {
			cs := connectNotes(ctx, t, s, "lk_at_writer", version)
			tools, err := cs.ListTools(ctx, nil)
			if err != nil || len(tools.Tools) != 3 {
				t.Fatalf("ListTools = %v, %v; want all three tools", tools, err)
			}
			before := s.runs("write_notes")
			if res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "write_notes"}); err != nil || res.IsError {
				t.Fatalf("write_notes with notes:write: %v %v", res, err)
			}
			if s.runs("write_notes") != before+1 {
				t.Errorf("write_notes did not run")
			}
			if _, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "about"}); err != nil {
				t.Errorf("about needs no scope: %v", err)
			}
			_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "read_notes"})
			if err == nil || !strings.Contains(err.Error(), http.StatusText(http.StatusForbidden)) {
				t.Errorf("read_notes with only notes:write: %v, want 403 Forbidden", err)
			}
		})
	}
	if n := s.runs("read_notes"); n != 0 {
		t.Errorf("read_notes ran %d times with a token for write_notes only", n)
	}
}

func connectNotes(ctx context.Context, t *testing.T, s *notesStack, token, version string) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "agent", Version: "1.0.0"}, nil)
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{
		Endpoint:   s.url,
		HTTPClient: &http.Client{Transport: bearer{token: token, next: http.DefaultTransport}},
	}, &sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("Connect(%s): %v", version, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// A client that repeats keys, varies their case or hides the call in a batch is asked for the
// scopes of every tool it may have named; a body that is not JSON never reaches the server.
func TestToolScopesSmuggling(t *testing.T) {
	s := newNotesStack(t)
	s.token("lk_at_reader", "notes:read")
	v := latchkey.ProtocolURLElicitationError
	tests := []struct {
		name, body string
		status     int
	}{
		{"name repeated, the called tool last", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_notes","name":"write_notes"}}`, 403},
		{"name repeated, the called tool first", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write_notes","name":"read_notes"}}`, 403},
		{"name in another case", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"Name":"write_notes","name":"read_notes"}}`, 403},
		{"name escaped", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"n\u0061me":"write_notes"}}`, 403},
		{"params repeated", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write_notes"},"params":{"name":"read_notes"}}`, 403},
		{"method repeated", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"name":"write_notes"},"method":"tools/call"}`, 403},
		{"in a batch", `[{"jsonrpc":"2.0","id":1,"method":"tools/list"},` + call("write_notes") + `]`, 403},
		{"not JSON", `{"jsonrpc":"2.0","method":"tools/call",`, 400},
		{"trailing data", call("read_notes") + `{}`, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, challenge, body := s.post(t, "lk_at_reader", v, tt.body)
			if status != tt.status {
				t.Errorf("answer = %d %q %s, want %d", status, challenge, body, tt.status)
			}
			if tt.status == 403 && !strings.Contains(challenge, `scope="notes:read notes:write"`) {
				t.Errorf("challenge = %q, want the scope of write_notes", challenge)
			}
		})
	}
	if n := s.runs("write_notes"); n != 0 {
		t.Errorf("write_notes ran %d times", n)
	}
}

// RequiredScopes gets the same challenge as a tool's scopes, for every request.
func TestRequiredScopesChallenge(t *testing.T) {
	s := newNotesStack(t)
	s.rs.RequiredScopes = []string{"notes:use"}
	s.token("lk_at_reader", "notes:read")
	status, challenge, _ := s.post(t, "lk_at_reader", latchkey.ProtocolURLElicitationError, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	want := `Bearer error="insufficient_scope", scope="notes:read notes:use", resource_metadata="` + s.rs.MetadataURL() + `", error_description="this request needs more permission"`
	if status != http.StatusForbidden || challenge != want {
		t.Errorf("answer = %d %q\nwant 403 %q", status, challenge, want)
	}
	status, challenge, _ = s.post(t, "lk_at_reader", latchkey.ProtocolInputRequired, call("write_notes"))
	want = `Bearer error="insufficient_scope", scope="notes:use notes:write", resource_metadata="` + s.rs.MetadataURL() + `", error_description="the tool write_notes needs more permission"`
	if status != http.StatusForbidden || challenge != want {
		t.Errorf("answer = %d %q\nwant 403 %q", status, challenge, want)
	}
}

package mcp_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	latchkey "latchkey.dev/latchkey/mcp"
)

// stack is a Repo Helper MCP server in front of the fake Latchkey: resource server (401,
// metadata, introspection), both protocol generations on one endpoint, and one tool behind
// the relay.
type stack struct {
	fake  *fakeLatchkey
	relay *latchkey.Relay
	clock *clock
	rs    *latchkey.ResourceServer
	url   string
	ran   atomic.Int32 // how often the tool body ran
}

type listIn struct {
	Owner string `json:"owner,omitempty"`
}

type listOut struct {
	Repos []string `json:"repos"`
}

func newStack(t *testing.T) *stack {
	t.Helper()
	s := &stack{fake: newFakeLatchkey(t), clock: newClock()}
	key := make([]byte, 32)
	rand.Read(key)
	relay, err := latchkey.NewRelay(s.fake.exchanger(), key)
	if err != nil {
		t.Fatal(err)
	}
	relay.Now = s.clock.Now
	s.relay = relay

	server := sdk.NewServer(&sdk.Implementation{Name: "repo-helper", Version: "1.0.0"}, nil)
	sdk.AddTool(server, &sdk.Tool{Name: "list_repos", Description: "List my GitHub repositories"},
		latchkey.Tool(relay, "github", func(ctx context.Context, req *sdk.CallToolRequest, in listIn, tok *latchkey.Token) (*sdk.CallToolResult, listOut, error) {
			s.ran.Add(1)
			person := strings.TrimPrefix(tok.AccessToken, upstreamPrefix)
			return nil, listOut{Repos: []string{person + "/dotfiles", person + "/notes"}}, nil
		}))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	s.url = base + "/mcp"
	s.rs = &latchkey.ResourceServer{
		Resource:            s.url,
		AuthorizationServer: s.fake.issuer,
		ClientID:            s.fake.clientID,
		ClientSecret:        s.fake.clientSecret,
		ScopesSupported:     []string{"repos:read"},
		ResourceName:        "Repo Helper",
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", s.rs.Handler(latchkey.NewStreamableHandler(func(*http.Request) *sdk.Server { return server }, nil)))
	mux.Handle(s.rs.MetadataPath(), s.rs.MetadataHandler())
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: mux}}
	srv.Start()
	t.Cleanup(srv.Close)

	s.fake.issue("lk_at_alice", "alice", s.url)
	s.fake.issue("lk_at_mallory", "mallory", s.url)
	return s
}

type clientOpts struct {
	version   string
	url, form bool // declare elicitation.url / elicitation.form
	elicit    func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error)
	noRetry   bool // handle input_required by hand
}

func (s *stack) connect(t *testing.T, token string, o clientOpts) *sdk.ClientSession {
	t.Helper()
	caps := &sdk.ClientCapabilities{}
	if o.url || o.form {
		caps.Elicitation = &sdk.ElicitationCapabilities{}
		if o.url {
			caps.Elicitation.URL = &sdk.URLElicitationCapabilities{}
		}
		if o.form {
			caps.Elicitation.Form = &sdk.FormElicitationCapabilities{}
		}
	}
	opts := &sdk.ClientOptions{Capabilities: caps, ElicitationHandler: o.elicit}
	if o.noRetry {
		opts.MultiRoundTrip = &sdk.MultiRoundTripOptions{Disabled: true}
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "test-agent", Version: "1.0.0"}, opts)
	tr := &sdk.StreamableClientTransport{
		Endpoint:   s.url,
		HTTPClient: &http.Client{Transport: bearer{token: token, next: http.DefaultTransport}},
	}
	cs, err := c.Connect(t.Context(), tr, &sdk.ClientSessionOptions{ProtocolVersion: o.version})
	if err != nil {
		t.Fatalf("Connect(%s): %v", o.version, err)
	}
	t.Cleanup(func() { cs.Close() })
	if got := cs.InitializeResult().ProtocolVersion; got != o.version {
		t.Fatalf("negotiated protocol %s, want %s", got, o.version)
	}
	return cs
}

func callList(t *testing.T, cs *sdk.ClientSession, owner string) (*sdk.CallToolResult, error) {
	t.Helper()
	return cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "list_repos", Arguments: map[string]any{"owner": owner}})
}

func wantRepos(t *testing.T, res *sdk.CallToolResult, person string) {
	t.Helper()
	if res.IsError || res.NeedsInput() {
		t.Fatalf("result = %s, want the repositories", mustJSON(t, res))
	}
	want := `{"repos":["` + person + `/dotfiles","` + person + `/notes"]}`
	if got := mustJSON(t, res.StructuredContent); got != want {
		t.Errorf("structured content = %s, want %s", got, want)
	}
}

// The 2026-07-28 story, driven by the SDK client's own retry: the client is shown the link in
// an input_required result, the person connects, the client retries and gets the repositories.
func TestInputRequiredThenRetryGetsResult(t *testing.T) {
	s := newStack(t)
	var mu sync.Mutex
	var shown []sdk.ElicitParams
	cs := s.connect(t, "lk_at_alice", clientOpts{version: latchkey.ProtocolInputRequired, url: true,
		elicit: func(ctx context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			mu.Lock()
			shown = append(shown, *req.Params)
			mu.Unlock()
			s.fake.connect("alice", "github") // alice opens her link and connects GitHub
			return &sdk.ElicitResult{Action: "accept"}, nil
		}})

	res, err := callList(t, cs, "alice")
	if err != nil {
		t.Fatalf("CallTool: %v", err)
	}
	wantRepos(t, res, "alice")
	if len(shown) != 1 {
		t.Fatalf("client was shown %d elicitations, want 1", len(shown))
	}
	want := sdk.ElicitParams{Mode: "url", Message: connectMessage, URL: s.fake.linkFor("alice")}
	if got := shown[0]; !reflect.DeepEqual(got, want) {
		t.Errorf("elicitation = %+v\nwant %+v (no elicitationId in 2026-07-28)", got, want)
	}
	if ex, _ := s.fake.counts(); ex != 2 {
		t.Errorf("token exchanges = %d, want 2 (refused, then granted on the retry)", ex)
	}
	if n := s.ran.Load(); n != 1 {
		t.Errorf("tool body ran %d times, want 1", n)
	}
}

// The 2025-11-25 story: -32042 with exactly the data README.md shows, then a retry after
// connecting.
func TestURLElicitationErrorThenRetryGetsResult(t *testing.T) {
	s := newStack(t)
	cs := s.connect(t, "lk_at_alice", clientOpts{version: latchkey.ProtocolURLElicitationError, url: true})

	res, err := callList(t, cs, "alice")
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) {
		t.Fatalf("CallTool = %v, %v; want a JSON-RPC error", res, err)
	}
	if rpcErr.Code != -32042 || rpcErr.Message != connectMessage {
		t.Errorf("error = %d %q, want -32042 %q", rpcErr.Code, rpcErr.Message, connectMessage)
	}
	var data any
	if err := json.Unmarshal(rpcErr.Data, &data); err != nil {
		t.Fatalf("data %s: %v", rpcErr.Data, err)
	}
	want := map[string]any{"elicitations": []any{map[string]any{
		"mode":          "url",
		"elicitationId": "c-alice",
		"url":           s.fake.linkFor("alice"),
		"message":       connectMessage,
	}}}
	if !reflect.DeepEqual(data, want) {
		t.Errorf("data = %s\nwant %s", rpcErr.Data, mustJSON(t, want))
	}
	if n := s.ran.Load(); n != 0 {
		t.Errorf("tool body ran %d times before the person connected", n)
	}

	// Asking again before connecting gives the same link.
	_, err = callList(t, cs, "alice")
	var again *jsonrpc.Error
	if !errors.As(err, &again) || !bytes.Equal(again.Data, rpcErr.Data) {
		t.Errorf("second refusal = %v, want the same link", err)
	}

	s.fake.connect("alice", "github")
	res, err = callList(t, cs, "alice")
	if err != nil {
		t.Fatalf("CallTool after connecting: %v", err)
	}
	wantRepos(t, res, "alice")
}

// Clients that cannot show a URL elicitation get the link as text in a tool error.
func TestPlainToolErrorWithoutURLElicitation(t *testing.T) {
	tests := []struct {
		name    string
		version string
		form    bool
	}{
		{"2026-07-28 without elicitation", "2026-07-28", false},
		{"2026-07-28 with form elicitation only", "2026-07-28", true},
		{"2025-11-25 without elicitation", "2025-11-25", false},
		{"2025-11-25 with form elicitation only", "2025-11-25", true},
		{"2025-06-18, before URL elicitation", "2025-06-18", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStack(t)
			o := clientOpts{version: tt.version, form: tt.form}
			if tt.form {
				o.elicit = func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
					t.Error("client was sent an elicitation it did not declare")
					return &sdk.ElicitResult{Action: "cancel"}, nil
				}
			}
			cs := s.connect(t, "lk_at_alice", o)
			res, err := callList(t, cs, "alice")
			if err != nil {
				t.Fatalf("CallTool: %v", err)
			}
			if !res.IsError || res.NeedsInput() || len(res.Content) != 1 {
				t.Fatalf("result = %s, want one tool error", mustJSON(t, res))
			}
			want := connectMessage + "\n" + s.fake.linkFor("alice") +
				"\nThe link stays open for 30 minutes and only works for you, signed in. When you have finished, ask again."
			if got := res.Content[0].(*sdk.TextContent).Text; got != want {
				t.Errorf("text = %q\nwant %q", got, want)
			}
			if res.StructuredContent != nil {
				t.Errorf("error result carries structured content %s", mustJSON(t, res.StructuredContent))
			}
			s.fake.connect("alice", "github")
			res, err = callList(t, cs, "alice")
			if err != nil {
				t.Fatalf("CallTool after connecting: %v", err)
			}
			wantRepos(t, res, "alice")
		})
	}
}

// flipByte edits one byte of a sealed requestState, keeping it well-formed base64.
func flipByte(t *testing.T, state string) string {
	t.Helper()
	prefix, body, ok := strings.Cut(state, ".")
	if !ok {
		t.Fatalf("requestState %q has no prefix", state)
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 0x80
	return prefix + "." + base64.RawURLEncoding.EncodeToString(raw)
}

func retry(t *testing.T, cs *sdk.ClientSession, owner, state string) (*sdk.CallToolResult, error) {
	t.Helper()
	return cs.CallTool(t.Context(), &sdk.CallToolParams{
		Name:           "list_repos",
		Arguments:      map[string]any{"owner": owner},
		InputResponses: sdk.InputResponseMap{latchkey.InputKey: &sdk.ElicitResult{Action: "accept"}},
		RequestState:   state,
	})
}

func wantStateRefused(t *testing.T, s *stack, res *sdk.CallToolResult, err error, reason string) {
	t.Helper()
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) {
		t.Fatalf("retry = %v, %v; want a JSON-RPC error", res, err)
	}
	if rpcErr.Code != jsonrpc.CodeInvalidParams || !strings.Contains(rpcErr.Message, reason) {
		t.Errorf("error = %d %q, want %d containing %q", rpcErr.Code, rpcErr.Message, jsonrpc.CodeInvalidParams, reason)
	}
	if n := s.ran.Load(); n != 0 {
		t.Errorf("tool body ran %d times on a refused state", n)
	}
}

// A requestState is good only for the person it was issued to, for the same call, and briefly;
// an edited one is refused. Refusals happen before Latchkey is asked anything.
func TestRequestStateRefusals(t *testing.T) {
	s := newStack(t)
	alice := s.connect(t, "lk_at_alice", clientOpts{version: "2026-07-28", url: true, noRetry: true})
	mallory := s.connect(t, "lk_at_mallory", clientOpts{version: "2026-07-28", url: true, noRetry: true})

	first, err := callList(t, alice, "alice")
	if err != nil || !first.NeedsInput() || first.RequestState == "" {
		t.Fatalf("first call = %v, %v; want input_required with a requestState", first, err)
	}
	link := first.InputRequests[latchkey.InputKey].(*sdk.ElicitParams).URL
	exchanges, _ := s.fake.counts()

	t.Run("edited", func(t *testing.T) {
		res, err := retry(t, alice, "alice", flipByte(t, first.RequestState))
		wantStateRefused(t, s, res, err, "not authentic")
	})
	t.Run("another person", func(t *testing.T) {
		res, err := retry(t, mallory, "alice", first.RequestState)
		wantStateRefused(t, s, res, err, "another person")
	})
	t.Run("other arguments", func(t *testing.T) {
		res, err := retry(t, alice, "bob", first.RequestState)
		wantStateRefused(t, s, res, err, "different request")
	})
	if ex, _ := s.fake.counts(); ex != exchanges {
		t.Errorf("refused states reached the token endpoint %d times", ex-exchanges)
	}

	// A good state before the person has connected: asked again, same link, a fresh state.
	second, err := retry(t, alice, "alice", first.RequestState)
	if err != nil || !second.NeedsInput() {
		t.Fatalf("valid retry before connecting = %v, %v; want input_required", second, err)
	}
	if got := second.InputRequests[latchkey.InputKey].(*sdk.ElicitParams).URL; got != link {
		t.Errorf("second link %q, want the same %q", got, link)
	}
	if second.RequestState == first.RequestState {
		t.Error("requestState was not renewed")
	}

	t.Run("expired", func(t *testing.T) {
		s.clock.Advance(latchkey.DefaultStateTTL)
		res, err := retry(t, alice, "alice", second.RequestState)
		wantStateRefused(t, s, res, err, "expired")
	})

	third, err := callList(t, alice, "alice")
	if err != nil || !third.NeedsInput() {
		t.Fatalf("fresh call = %v, %v; want input_required", third, err)
	}
	s.fake.connect("alice", "github")
	res, err := retry(t, alice, "alice", third.RequestState)
	if err != nil {
		t.Fatalf("retry after connecting: %v", err)
	}
	wantRepos(t, res, "alice")
}

// A person who turns the link down gets a plain answer with the link, not the same question
// again and again.
func TestDeclinedLinkIsNotAskedAgain(t *testing.T) {
	s := newStack(t)
	var asked atomic.Int32
	cs := s.connect(t, "lk_at_alice", clientOpts{version: "2026-07-28", url: true,
		elicit: func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			asked.Add(1)
			return &sdk.ElicitResult{Action: "decline"}, nil
		}})
	res, err := callList(t, cs, "alice")
	if err != nil {
		t.Fatalf("CallTool: %v", err)
	}
	if !res.IsError || asked.Load() != 1 {
		t.Fatalf("result = %s after %d questions; want a tool error after 1", mustJSON(t, res), asked.Load())
	}
	text := res.Content[0].(*sdk.TextContent).Text
	if !strings.HasPrefix(text, "You chose not to open the link. "+connectMessage) || !strings.Contains(text, s.fake.linkFor("alice")) {
		t.Errorf("text = %q", text)
	}
}

// The input_required result on the wire, as a client of any SDK reads it.
func TestInputRequiredWireShape(t *testing.T) {
	s := newStack(t)
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"list_repos","arguments":{"owner":"alice"},` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
		`"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},` +
		`"io.modelcontextprotocol/clientCapabilities":{"elicitation":{"url":{}}}}}}`
	req, _ := http.NewRequest(http.MethodPost, s.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", "list_repos")
	req.Header.Set("Authorization", "Bearer lk_at_alice")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	msg := readRPC(t, resp)
	var got struct {
		ID     int `json:"id"`
		Result struct {
			ResultType    string          `json:"resultType"`
			InputRequests json.RawMessage `json:"inputRequests"`
			RequestState  string          `json:"requestState"`
			IsError       *bool           `json:"isError"`
		} `json:"result"`
	}
	if err := json.Unmarshal(msg, &got); err != nil {
		t.Fatalf("%s: %v", msg, err)
	}
	if got.ID != 7 || got.Result.ResultType != "input_required" || !strings.HasPrefix(got.Result.RequestState, "lk1.") || got.Result.IsError != nil {
		t.Errorf("response = %s", msg)
	}
	var inputs any
	_ = json.Unmarshal(got.Result.InputRequests, &inputs)
	want := map[string]any{latchkey.InputKey: map[string]any{
		"method": "elicitation/create",
		"params": map[string]any{"mode": "url", "message": connectMessage, "url": s.fake.linkFor("alice")},
	}}
	if !reflect.DeepEqual(inputs, want) {
		t.Errorf("inputRequests = %s\nwant %s", got.Result.InputRequests, mustJSON(t, want))
	}
	t.Logf("wire: %s", msg)
}

// readRPC returns the JSON-RPC message of a streamable HTTP answer, JSON or one SSE event.
func readRPC(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		return b
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			return []byte(data)
		}
	}
	t.Fatal("no SSE data event")
	return nil
}

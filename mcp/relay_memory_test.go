package mcp_test

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	latchkey "latchkey.dev/latchkey/mcp"
)

// memoryServer is an MCP server on an in-memory transport (as over stdio: no HTTP, so the
// caller comes from Relay.Caller), with a raw sdk.ToolHandler that uses Token and Result
// directly, and typed tools for an unknown service.
func memoryServer(t *testing.T, f *fakeLatchkey, caller *atomic.Pointer[latchkey.Caller]) *sdk.Server {
	t.Helper()
	key := make([]byte, 32)
	rand.Read(key)
	relay, err := latchkey.NewRelay(f.exchanger(), key)
	if err != nil {
		t.Fatal(err)
	}
	relay.Caller = func(ctx context.Context, req *sdk.CallToolRequest) (latchkey.Caller, error) {
		if c := caller.Load(); c != nil {
			return *c, nil
		}
		return latchkey.Caller{}, latchkey.ErrNoCaller
	}
	server := sdk.NewServer(&sdk.Implementation{Name: "repo-helper", Version: "1.0.0"}, nil)
	server.AddTool(&sdk.Tool{Name: "whoami", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			tok, err := relay.Token(ctx, req, "github")
			if err != nil {
				return relay.Result(ctx, req, err)
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: tok.AccessToken}}}, nil
		})
	sdk.AddTool(server, &sdk.Tool{Name: "list_channels"},
		latchkey.Tool(relay, "slack", func(ctx context.Context, req *sdk.CallToolRequest, in struct{}, tok *latchkey.Token) (*sdk.CallToolResult, listOut, error) {
			t.Error("tool ran without a token")
			return nil, listOut{}, nil
		}))
	return server
}

func memoryConnect(t *testing.T, server *sdk.Server, version string, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	st, ct := sdk.NewInMemoryTransports()
	ss, err := server.Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "agent", Version: "1"}, opts).Connect(t.Context(), ct, &sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func TestRawHandlerOverMemoryTransport(t *testing.T) {
	for _, version := range []string{latchkey.ProtocolURLElicitationError, latchkey.ProtocolInputRequired} {
		t.Run(version, func(t *testing.T) {
			f := newFakeLatchkey(t)
			f.issue("lk_at_alice", "alice", "stdio")
			var caller atomic.Pointer[latchkey.Caller]
			caller.Store(&latchkey.Caller{Token: "lk_at_alice", Subject: "alice", ClientID: "cli"})
			server := memoryServer(t, f, &caller)
			var shown atomic.Int32
			cs := memoryConnect(t, server, version, &sdk.ClientOptions{
				Capabilities: &sdk.ClientCapabilities{Elicitation: &sdk.ElicitationCapabilities{URL: &sdk.URLElicitationCapabilities{}}},
				ElicitationHandler: func(ctx context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
					shown.Add(1)
					f.connect("alice", "github")
					return &sdk.ElicitResult{Action: "accept"}, nil
				},
			})
			res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "whoami"})
			if version == latchkey.ProtocolURLElicitationError {
				var rpcErr *jsonrpc.Error
				if !errors.As(err, &rpcErr) || rpcErr.Code != sdk.CodeURLElicitationRequired {
					t.Fatalf("CallTool = %v, %v; want -32042", res, err)
				}
				f.connect("alice", "github")
				res, err = cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "whoami"})
			} else if shown.Load() != 1 {
				t.Errorf("elicitations shown = %d, want 1", shown.Load())
			}
			if err != nil || res.IsError || res.Content[0].(*sdk.TextContent).Text != upstreamPrefix+"alice" {
				t.Fatalf("CallTool = %s, %v; want alice's token", mustJSON(t, res), err)
			}
		})
	}
}

func TestToolErrorsThatAreNotLinks(t *testing.T) {
	f := newFakeLatchkey(t)
	f.issue("lk_at_alice", "alice", "stdio")
	var caller atomic.Pointer[latchkey.Caller]
	server := memoryServer(t, f, &caller)
	cs := memoryConnect(t, server, latchkey.ProtocolInputRequired, &sdk.ClientOptions{
		Capabilities: &sdk.ClientCapabilities{Elicitation: &sdk.ElicitationCapabilities{URL: &sdk.URLElicitationCapabilities{}}},
	})

	text := func(name string) string {
		t.Helper()
		res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: name})
		if err != nil || !res.IsError {
			t.Fatalf("CallTool(%s) = %v, %v; want a tool error", name, res, err)
		}
		return res.Content[0].(*sdk.TextContent).Text
	}
	if got := text("whoami"); got != "This tool needs a caller signed in with Latchkey." {
		t.Errorf("without a caller: %q", got)
	}
	caller.Store(&latchkey.Caller{Token: "lk_at_alice", Subject: "alice"})
	if got := text("list_channels"); !strings.Contains(got, `"slack" (invalid_target): no connector with that audience`) {
		t.Errorf("unknown service: %q", got)
	}
}

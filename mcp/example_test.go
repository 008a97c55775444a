package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	latchkey "latchkey.dev/latchkey/mcp"
)

type Repos struct {
	Names []string `json:"names"`
}

// listRepos calls GitHub with the person's own token.
func listRepos(ctx context.Context, githubToken string) (Repos, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.github.com/user/repos", nil)
	if err != nil {
		return Repos{}, err
	}
	req.Header.Set("Authorization", "Bearer "+githubToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Repos{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Repos{}, fmt.Errorf("GitHub answered %s", resp.Status)
	}
	var list []struct {
		FullName string `json:"full_name"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return Repos{}, err
	}
	var r Repos
	for _, repo := range list {
		r.Names = append(r.Names, repo.FullName)
	}
	return r, nil
}

// A Repo Helper MCP server: its tokens come from a Latchkey project, and its one tool reads the
// caller's GitHub repositories with the GitHub token Latchkey holds for them. When the person
// has not connected GitHub, their MCP client shows them the connect link and retries.
//
// This example serves until stopped, so it is compiled but not run; the examples below run
// against a stand-in for Latchkey.
func Example() {
	issuer := "https://auth.example.com/team-a/demo" // the Latchkey project
	clientID, clientSecret := os.Getenv("CLIENT_ID"), os.Getenv("CLIENT_SECRET")
	stateKey := []byte(os.Getenv("STATE_KEY")) // 32 random bytes, the same on every replica

	relay, err := latchkey.NewRelay(&latchkey.Exchanger{
		TokenURL:     issuer + "/token",
		ClientID:     clientID,
		ClientSecret: clientSecret,
	}, stateKey)
	if err != nil {
		log.Fatal(err)
	}

	server := sdk.NewServer(&sdk.Implementation{Name: "repo-helper", Version: "1.0.0"}, nil)
	sdk.AddTool(server, &sdk.Tool{Name: "list_repos", Description: "List my GitHub repositories"},
		latchkey.Tool(relay, "github", func(ctx context.Context, req *sdk.CallToolRequest, in struct{}, tok *latchkey.Token) (*sdk.CallToolResult, Repos, error) {
			repos, err := listRepos(ctx, tok.AccessToken)
			return nil, repos, err
		}))

	rs := &latchkey.ResourceServer{
		Resource:            "https://mcp.example.com/mcp",
		AuthorizationServer: issuer,
		ClientID:            clientID,
		ClientSecret:        clientSecret,
		ResourceName:        "Repo Helper",
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", rs.Handler(latchkey.NewStreamableHandler(func(*http.Request) *sdk.Server { return server }, nil)))
	mux.Handle(rs.MetadataPath(), rs.MetadataHandler())
	log.Fatal(http.ListenAndServe(":8080", mux))
}

// ResourceServer publishes where clients get tokens, answers a request without one with 401,
// and lets through only tokens issued for this server that act for a person. (standIn plays
// Latchkey's introspection endpoint, in example_standin_test.go.)
func ExampleResourceServer() {
	latchkeyProject := &standIn{}
	rs := &latchkey.ResourceServer{
		Resource:            "https://mcp.example.com/mcp",
		AuthorizationServer: "https://auth.example.com/team-a/demo",
		ClientID:            "repo-helper-mcp",
		ClientSecret:        os.Getenv("CLIENT_SECRET"),
		ResourceName:        "Repo Helper",
		HTTP:                latchkeyProject.Client(),
	}
	mcpHandler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "MCP handler, acting for %s", auth.TokenInfoFromContext(r.Context()).UserID)
	})
	srv := httptest.NewServer(rs.Handler(mcpHandler))
	defer srv.Close()

	get := func(path, token string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		return resp
	}

	resp := get(rs.MetadataPath(), "")
	var md struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&md)
	resp.Body.Close()
	fmt.Println(rs.MetadataPath(), resp.StatusCode, md.Resource, md.AuthorizationServers)

	for _, token := range []string{"", "lk_at_alice", "lk_at_service"} {
		resp := get("/mcp", token)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("token %q: %d\n", token, resp.StatusCode)
		if c := resp.Header.Get("WWW-Authenticate"); c != "" {
			fmt.Println("  WWW-Authenticate:", c)
		} else {
			fmt.Println(" ", string(body))
		}
	}
	// Output:
	// /.well-known/oauth-protected-resource/mcp 200 https://mcp.example.com/mcp [https://auth.example.com/team-a/demo]
	// token "": 401
	//   WWW-Authenticate: Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
	// token "lk_at_alice": 200
	//   MCP handler, acting for alice
	// token "lk_at_service": 401
	//   WWW-Authenticate: Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp", error="invalid_token", error_description="the token names no person: a client got it for itself (client_credentials), and this server acts only for people"
}

// Exchange returns the person's token at the connected service, or the connect link made for
// them. (standIn plays Latchkey's token endpoint, in example_standin_test.go.)
func ExampleExchanger_Exchange() {
	latchkeyProject := &standIn{}
	ex := &latchkey.Exchanger{
		TokenURL:     "https://auth.example.com/team-a/demo/token",
		ClientID:     "repo-helper-mcp",
		ClientSecret: os.Getenv("CLIENT_SECRET"),
		HTTP:         latchkeyProject.Client(),
	}
	// The token the MCP client presented, as ResourceServer verified it.
	const aliceToken = "lk_at_alice"

	_, err := ex.Exchange(context.Background(), aliceToken, "github")
	var cr *latchkey.ConnectRequired
	if errors.As(err, &cr) {
		fmt.Println(cr.Reason)
		fmt.Println(cr.Message)
		fmt.Println(cr.URI, "open for", cr.ExpiresIn)
	}

	latchkeyProject.Connect() // Alice opens the link and connects her GitHub account.
	tok, err := ex.Exchange(context.Background(), aliceToken, "github")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(tok.AccessToken, tok.Scope)
	// Output:
	// connect_required
	// Open this link to connect your GitHub account and let Repo Helper use it.
	// https://auth.example.com/team-a/demo/account/services/link/q3Jx open for 30m0s
	// gho_alice repo
}

// A tool wrapped with Tool runs only with the person's token. Until the person has connected
// the service, a client that cannot show a URL elicitation gets the link as the tool's error
// text, for the agent to pass on; calling again after connecting runs the tool.
//
// Here server and client meet over an in-memory transport, as over stdio: with no HTTP request
// to carry a verified token, Relay.Caller says who is calling. Over HTTP behind
// ResourceServer, leave it nil.
func ExampleTool() {
	latchkeyProject := &standIn{}
	relay, err := latchkey.NewRelay(&latchkey.Exchanger{
		TokenURL:     "https://auth.example.com/team-a/demo/token",
		ClientID:     "repo-helper-mcp",
		ClientSecret: os.Getenv("CLIENT_SECRET"),
		HTTP:         latchkeyProject.Client(),
	}, make([]byte, 32)) // use 32 random bytes, the same on every replica
	if err != nil {
		log.Fatal(err)
	}
	relay.Caller = func(context.Context, *sdk.CallToolRequest) (latchkey.Caller, error) {
		return latchkey.Caller{Token: "lk_at_alice", Subject: "alice", ClientID: "repo-helper-agent"}, nil
	}

	server := sdk.NewServer(&sdk.Implementation{Name: "repo-helper", Version: "1.0.0"}, nil)
	sdk.AddTool(server, &sdk.Tool{Name: "list_repos", Description: "List my GitHub repositories"},
		latchkey.Tool(relay, "github", func(ctx context.Context, req *sdk.CallToolRequest, in struct{}, tok *latchkey.Token) (*sdk.CallToolResult, Repos, error) {
			// A real tool calls GitHub with tok.AccessToken here, as listRepos does.
			return nil, Repos{Names: []string{"alice/dotfiles", "alice/notes"}}, nil
		}))

	ctx := context.Background()
	serverEnd, clientEnd := sdk.NewInMemoryTransports()
	ss, err := server.Connect(ctx, serverEnd, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer ss.Close()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "agent", Version: "1.0.0"}, nil).Connect(ctx, clientEnd, nil)
	if err != nil {
		panic(err) // unlike log.Fatal, runs the deferred Close calls
	}
	defer cs.Close()

	call := func() {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "list_repos"})
		if err != nil {
			panic(err) // unlike log.Fatal, runs the deferred Close calls
		}
		fmt.Printf("isError=%v\n%s\n", res.IsError, res.Content[0].(*sdk.TextContent).Text)
	}
	call()
	latchkeyProject.Connect() // Alice opens the link and connects her GitHub account.
	call()
	// Output:
	// isError=true
	// Open this link to connect your GitHub account and let Repo Helper use it.
	// https://auth.example.com/team-a/demo/account/services/link/q3Jx
	// The link stays open for 30 minutes and only works for you, signed in. When you have finished, ask again.
	// isError=false
	// {"names":["alice/dotfiles","alice/notes"]}
}

// A client that declared URL elicitation gets the connect link as one, in the shape its
// protocol version knows: 2025-11-25 as the JSON-RPC error -32042, after which it calls again;
// 2026-07-28 as an input_required result, which the Go SDK's client shows through its
// ElicitationHandler and then retries by itself. (Transport and stand-in as in ExampleTool.)
func ExampleRelay() {
	ctx := context.Background()
	for _, version := range []string{latchkey.ProtocolURLElicitationError, latchkey.ProtocolInputRequired} {
		fmt.Println("MCP", version)
		latchkeyProject := &standIn{}
		relay, err := latchkey.NewRelay(&latchkey.Exchanger{
			TokenURL:     "https://auth.example.com/team-a/demo/token",
			ClientID:     "repo-helper-mcp",
			ClientSecret: os.Getenv("CLIENT_SECRET"),
			HTTP:         latchkeyProject.Client(),
		}, make([]byte, 32))
		if err != nil {
			log.Fatal(err)
		}
		relay.Caller = func(context.Context, *sdk.CallToolRequest) (latchkey.Caller, error) {
			return latchkey.Caller{Token: "lk_at_alice", Subject: "alice", ClientID: "repo-helper-agent"}, nil
		}
		server := sdk.NewServer(&sdk.Implementation{Name: "repo-helper", Version: "1.0.0"}, nil)
		sdk.AddTool(server, &sdk.Tool{Name: "list_repos"},
			latchkey.Tool(relay, "github", func(ctx context.Context, req *sdk.CallToolRequest, in struct{}, tok *latchkey.Token) (*sdk.CallToolResult, Repos, error) {
				return nil, Repos{Names: []string{"alice/dotfiles"}}, nil
			}))

		serverEnd, clientEnd := sdk.NewInMemoryTransports()
		ss, err := server.Connect(ctx, serverEnd, nil)
		if err != nil {
			log.Fatal(err)
		}
		client := sdk.NewClient(&sdk.Implementation{Name: "agent", Version: "1.0.0"}, &sdk.ClientOptions{
			Capabilities: &sdk.ClientCapabilities{Elicitation: &sdk.ElicitationCapabilities{URL: &sdk.URLElicitationCapabilities{}}},
			// What a 2026-07-28 client does with the input_required result: show the link.
			ElicitationHandler: func(ctx context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
				fmt.Println("  shown:", req.Params.Mode, req.Params.URL)
				latchkeyProject.Connect() // Alice opens the link and connects her GitHub account.
				return &sdk.ElicitResult{Action: "accept"}, nil
			},
		})
		cs, err := client.Connect(ctx, clientEnd, &sdk.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			log.Fatal(err)
		}

		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "list_repos"})
		var rpcErr *jsonrpc.Error
		if errors.As(err, &rpcErr) && rpcErr.Code == sdk.CodeURLElicitationRequired {
			// What a 2025-11-25 client does with -32042: show the link, then call again.
			var data struct {
				Elicitations []sdk.ElicitParams `json:"elicitations"`
			}
			_ = json.Unmarshal(rpcErr.Data, &data)
			e := data.Elicitations[0]
			fmt.Println("  error", rpcErr.Code, "shown:", e.Mode, e.URL, "elicitationId", e.ElicitationID)
			latchkeyProject.Connect() // Alice opens the link and connects her GitHub account.
			res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "list_repos"})
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(" ", res.Content[0].(*sdk.TextContent).Text)
		cs.Close()
		ss.Close()
	}
	// Output:
	// MCP 2025-11-25
	//   error -32042 shown: url https://auth.example.com/team-a/demo/account/services/link/q3Jx elicitationId c6m2
	//   {"names":["alice/dotfiles"]}
	// MCP 2026-07-28
	//   shown: url https://auth.example.com/team-a/demo/account/services/link/q3Jx
	//   {"names":["alice/dotfiles"]}
}

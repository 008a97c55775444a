package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"latchkey.dev/latchkey/examples/repohelper"
	latchkey "latchkey.dev/latchkey/mcp"
)

// call is an MCP client for the walkthrough: it signs a person in at Latchkey (authorization
// code + PKCE through a loopback redirect, with the MCP server as the token's resource), calls
// list_repositories, and when the answer is a connect link, shows it and waits for the person to
// say they are done before the call is made again.
func call(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("call", flag.ContinueOnError)
	var creds credentials
	creds.register(fs)
	mcpURL := fs.String("mcp", "http://"+defaultListen+"/mcp", "Repo Helper's MCP URL")
	redirect := fs.String("redirect", defaultRedirect, "the loopback redirect URI registered for the client")
	protocol := fs.String("protocol", latchkey.ProtocolInputRequired, "MCP protocol version: 2026-07-28 (input_required) or 2025-11-25 (error -32042)")
	visibility := fs.String("visibility", "", "all, public or private")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := creds.check(); err != nil {
		return err
	}
	token, err := signIn(ctx, creds, *mcpURL, *redirect)
	if err != nil {
		return err
	}

	in := bufio.NewScanner(os.Stdin)
	client := sdk.NewClient(&sdk.Implementation{Name: "repo-helper-cli", Version: repohelper.Version}, &sdk.ClientOptions{
		// URL elicitation must be declared explicitly: a handler alone advertises form mode only.
		Capabilities: &sdk.ClientCapabilities{Elicitation: &sdk.ElicitationCapabilities{URL: &sdk.URLElicitationCapabilities{}}},
		ElicitationHandler: func(ctx context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			if req.Params.Mode != "url" {
				return &sdk.ElicitResult{Action: "decline"}, nil
			}
			if !showLink(in, req.Params.Message, req.Params.URL) {
				return &sdk.ElicitResult{Action: "cancel"}, nil
			}
			return &sdk.ElicitResult{Action: "accept"}, nil
		},
	})
	hc := &http.Client{Transport: bearer{token: token, next: http.DefaultTransport}}
	cs, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: *mcpURL, HTTPClient: hc},
		&sdk.ClientSessionOptions{ProtocolVersion: *protocol})
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", *mcpURL, err)
	}
	defer cs.Close()
	fmt.Printf("Connected to Repo Helper with MCP %s.\n", cs.InitializeResult().ProtocolVersion)

	params := &sdk.CallToolParams{Name: repohelper.ToolName, Arguments: map[string]any{}}
	if *visibility != "" {
		params.Arguments = map[string]any{"visibility": *visibility}
	}
	for range 5 {
		fmt.Printf("Calling %s…\n", repohelper.ToolName)
		res, err := cs.CallTool(ctx, params)
		var rpcErr *jsonrpc.Error
		if errors.As(err, &rpcErr) && rpcErr.Code == sdk.CodeURLElicitationRequired {
			// 2025-11-25: the SDK hands -32042 back; showing the link and calling again is ours.
			var data struct {
				Elicitations []sdk.ElicitParams `json:"elicitations"`
			}
			if json.Unmarshal(rpcErr.Data, &data) != nil || len(data.Elicitations) == 0 {
				return fmt.Errorf("error -32042 without elicitations: %s", rpcErr.Data)
			}
			e := data.Elicitations[0]
			if !showLink(in, e.Message, e.URL) {
				return errors.New("stopped before the link was used")
			}
			continue
		}
		if err != nil {
			return err
		}
		return printResult(res)
	}
	return errors.New("the tool still asks for the link; open it, finish, and run call again")
}

// showLink prints the link and waits for Enter; false when stdin is closed.
func showLink(in *bufio.Scanner, message, link string) bool {
	fmt.Printf("\nRepo Helper says: %s\n\n    %s\n\nOpen it in the browser where you are signed in, finish there, then press Enter to call again.\n", message, link)
	return in.Scan()
}

func printResult(res *sdk.CallToolResult) error {
	if res.IsError {
		for _, c := range res.Content {
			if t, ok := c.(*sdk.TextContent); ok {
				fmt.Println(t.Text)
			}
		}
		return errors.New("the tool answered with an error")
	}
	var out repohelper.ListOutput
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		return fmt.Errorf("unexpected result %s", b)
	}
	fmt.Printf("\nRepositories of %s at GitHub:\n", out.Account)
	for _, r := range out.Repositories {
		vis := "public"
		if r.Private {
			vis = "private"
		}
		fmt.Printf("  %-30s %s\n", r.FullName, vis)
	}
	return nil
}

// signIn gets an access token for the MCP server by authorization code + PKCE: it prints the
// address to open, and waits for the browser to come back to the loopback redirect.
func signIn(ctx context.Context, creds credentials, resource, redirect string) (string, error) {
	md, err := repohelper.Discover(ctx, http.DefaultClient, creds.issuer)
	if err != nil {
		return "", err
	}
	ru, err := url.Parse(redirect)
	if err != nil || ru.Scheme != "http" || ru.Host == "" {
		return "", fmt.Errorf("-redirect %q must be a loopback http URL", redirect)
	}
	cfg := &oauth2.Config{
		ClientID:     creds.clientID,
		ClientSecret: creds.clientSecret,
		Endpoint:     oauth2.Endpoint{AuthURL: md.AuthorizationEndpoint, TokenURL: md.TokenEndpoint, AuthStyle: oauth2.AuthStyleInHeader},
		RedirectURL:  redirect,
	}
	state, verifier := oauth2.GenerateVerifier(), oauth2.GenerateVerifier()
	authURL := cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("resource", resource))

	ln, err := net.Listen("tcp", ru.Host)
	if err != nil {
		return "", fmt.Errorf("listening for the redirect on %s: %w", ru.Host, err)
	}
	type answer struct {
		code string
		err  error
	}
	got := make(chan answer, 1)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != ru.Path {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		w.Header().Set("Cache-Control", "no-store")
		var a answer
		switch {
		case q.Get("state") != state:
			a.err = errors.New("the redirect carried another state")
		case q.Get("iss") != md.Issuer:
			// RFC 9207: the answer must come from the issuer we asked.
			a.err = fmt.Errorf("the redirect names issuer %q, want %q", q.Get("iss"), md.Issuer)
		case q.Get("error") != "":
			a.err = fmt.Errorf("sign-in refused: %s %s", q.Get("error"), q.Get("error_description"))
		default:
			a.code = q.Get("code")
		}
		if a.err != nil {
			http.Error(w, a.err.Error(), http.StatusBadRequest)
		} else {
			fmt.Fprintln(w, "Signed in. Go back to the terminal.")
		}
		select {
		case got <- a:
		default:
		}
	})}
	go func() { _ = srv.Serve(ln) }() // returns http.ErrServerClosed after Close
	defer srv.Close()

	fmt.Printf("Open this address to sign in to Latchkey as the person Repo Helper works for:\n\n    %s\n\n", authURL)
	var a answer
	select {
	case a = <-got:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	if a.err != nil {
		return "", a.err
	}
	tok, err := cfg.Exchange(ctx, a.code, oauth2.VerifierOption(verifier), oauth2.SetAuthURLParam("resource", resource))
	if err != nil {
		return "", fmt.Errorf("redeeming the code: %w", err)
	}
	return tok.AccessToken, nil
}

// bearer presents the access token on every request to the MCP server.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

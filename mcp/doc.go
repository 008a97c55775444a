// Package mcp lets a Go MCP server (github.com/modelcontextprotocol/go-sdk) act for a person
// at a service they connected in Latchkey, and relay Latchkey's connect link to them when they
// have not.
//
// It is a module of its own (go get latchkey.dev/latchkey/mcp) whose one direct dependency is
// the MCP Go SDK: it talks to Latchkey over HTTP only and imports nothing else of Latchkey's, so
// an MCP server author's build pulls in no Kubernetes library. Import it under a name that does
// not clash with the SDK's package:
//
//	import (
//		sdk "github.com/modelcontextprotocol/go-sdk/mcp"
//		latchkey "latchkey.dev/latchkey/mcp"
//	)
//
// Three parts:
//
//   - ResourceServer is the OAuth side every remote MCP server needs: protected resource
//     metadata (RFC 9728), a 401 with WWW-Authenticate: Bearer resource_metadata="…", and token
//     verification by introspection (RFC 7662) that accepts only tokens issued for this server
//     that act for a person. A client-only token (one a client got for itself with
//     client_credentials) is refused with 401 invalid_token unless the server sets
//     AllowClientOnlyTokens, or names the token's client in ClientOnlyTokensFrom. A DPoP-bound token (RFC 9449) passes only with "Authorization:
//     DPoP" and a proof of the request signed by its key (package dpop checks proofs).
//     ToolScopes names the scopes each tool needs: a tools/call without them gets 403
//     insufficient_scope, the MCP scope challenge clients answer with a step-up.
//   - Exchanger asks Latchkey, by token exchange (RFC 8693), for the caller's token at a
//     connected service (GitHub, say). When the person has not connected it, has not let this
//     agent use it, or the connection broke, Latchkey refuses with a *ConnectRequired: a link
//     made for that person, which only they, freshly signed in, can use.
//   - Relay turns that refusal into what the MCP client shows the person, by protocol version:
//     an input_required result with a URL elicitation and a sealed requestState (2026-07-28),
//     the JSON-RPC error -32042 with a URL elicitation (2025-11-25), or, for a client that
//     declared no URL elicitation, a tool error whose text carries the link. Either way the
//     client learns the outcome by calling again, and the call then runs with the token.
//
// A server for both protocol versions:
//
//	ex := &latchkey.Exchanger{
//		TokenURL:     issuer + "/token",
//		ClientID:     clientID,
//		ClientSecret: clientSecret,
//	}
//	relay, err := latchkey.NewRelay(ex, stateKey) // 32 random bytes, the same on every replica
//	if err != nil {
//		return err
//	}
//	server := sdk.NewServer(&sdk.Implementation{Name: "repo-helper", Version: "1.0.0"}, nil)
//	sdk.AddTool(server, &sdk.Tool{Name: "list_repos", Description: "List my GitHub repositories"},
//		latchkey.Tool(relay, "github", func(ctx context.Context, req *sdk.CallToolRequest, in struct{}, tok *latchkey.Token) (*sdk.CallToolResult, Repos, error) {
//			repos, err := listRepos(ctx, tok.AccessToken) // the person's GitHub token
//			return nil, repos, err
//		}))
//
//	rs := &latchkey.ResourceServer{
//		Resource:            "https://mcp.example.com/mcp",
//		AuthorizationServer: issuer,
//		ClientID:            clientID,
//		ClientSecret:        clientSecret,
//	}
//	mcpHandler := latchkey.NewStreamableHandler(func(*http.Request) *sdk.Server { return server }, nil)
//	http.Handle("/mcp", rs.Handler(mcpHandler))
//	http.Handle(rs.MetadataPath(), rs.MetadataHandler())
//
// Handlers written against sdk.ToolHandler call Relay.Token and, on error, return Relay.Result
// unchanged.
package mcp

package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"os"

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

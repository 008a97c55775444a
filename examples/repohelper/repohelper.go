// Package repohelper is Repo Helper, the example agent of docs/connections-for-agents.md, as an MCP
// server: one tool, list_repositories, that lists the caller's GitHub repositories with the GitHub
// token Latchkey holds for them.
//
// It is an example of latchkey.dev/latchkey/mcp in use, and what `make run` and the end-to-end
// tests run. The server is an OAuth protected resource whose tokens a Latchkey project issues
// (introspected, and accepted only when issued for this server's resource URL). For each call it
// exchanges the caller's token at Latchkey for their GitHub token (RFC 8693). When the person has
// not connected GitHub, or has not let this agent use it, Latchkey answers with a connect link
// made for that person, and the relay passes it to the MCP client in the shape the client's
// protocol version can show: an input_required URL elicitation (2026-07-28), the -32042 error
// (2025-11-25), or the link as text. The client learns the outcome by calling again.
package repohelper

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	latchkey "latchkey.dev/latchkey/mcp"
)

// ToolName is the one tool the server offers.
const ToolName = "list_repositories"

// Defaults for Options.
const (
	DefaultAudience  = "github"
	DefaultGitHubAPI = "https://api.github.com"
)

// Version is reported to MCP clients.
const Version = "0.1.0"

// discoveryTimeout bounds the metadata fetch New does when endpoints are not given.
const discoveryTimeout = 10 * time.Second

// Options configure the server. Issuer, ClientID, ClientSecret and Resource are required.
type Options struct {
	// Issuer is the Latchkey project's issuer, {publicURL}/{namespace}/{project}. Its metadata
	// (RFC 8414) names the token and introspection endpoints unless they are set below.
	Issuer string
	// TokenURL and IntrospectionURL override what the metadata says. When both are set, New
	// does not fetch the metadata at all.
	TokenURL         string
	IntrospectionURL string
	// ClientID and ClientSecret are this server's OAuthClient at Latchkey (in the demo, the
	// client repo-helper, whose credentials the controller writes to the Secret
	// repo-helper-credentials). They authenticate both the introspection and the exchange.
	ClientID     string
	ClientSecret string
	// Resource is this server's MCP endpoint as clients name it in the "resource" parameter,
	// e.g. http://127.0.0.1:8071/mcp. Tokens must carry it in aud; the handler serves MCP at its
	// path.
	Resource string
	// Audience is the GitHub Connector's token-exchange audience; default "github".
	Audience string
	// GitHubAPI is GitHub's API base URL; default https://api.github.com. The demo points it at
	// the fake GitHub. The person's GitHub token is only ever sent to this origin.
	GitHubAPI string
	// StateKey seals the requestState of 2026-07-28 retries: 32 bytes, the same on every replica
	// and across restarts. Nil means a random key per process, so a retry that reaches another
	// replica or a restarted server is refused ("not authentic") and the person must call the
	// tool again, which shows the same link again.
	StateKey []byte
	// HTTP reaches Latchkey and GitHub; nil means a client with a 30-second timeout.
	HTTP *http.Client
	// Logger receives the server's log; nil discards it.
	Logger *slog.Logger
	// Now is the clock for requestState and token expiry; nil means time.Now. Tests inject one.
	Now func() time.Time
}

// New returns the server's HTTP handler: the MCP endpoint at Resource's path (both protocol
// generations), and the protected resource metadata at its well-known paths. When TokenURL or
// IntrospectionURL is empty, New reads them from the issuer's metadata, so Latchkey must answer.
func New(o Options) (http.Handler, error) {
	if o.Issuer == "" || o.ClientID == "" || o.ClientSecret == "" || o.Resource == "" {
		return nil, errors.New("repohelper: Issuer, ClientID, ClientSecret and Resource are required")
	}
	res, err := url.Parse(o.Resource)
	if err != nil || (res.Scheme != "http" && res.Scheme != "https") || res.Host == "" || res.Fragment != "" || res.RawQuery != "" {
		return nil, fmt.Errorf("repohelper: Resource %q must be an absolute http(s) URL without query or fragment", o.Resource)
	}
	if o.Audience == "" {
		o.Audience = DefaultAudience
	}
	if o.GitHubAPI == "" {
		o.GitHubAPI = DefaultGitHubAPI
	}
	gh, err := newGitHub(o.GitHubAPI, o.HTTP)
	if err != nil {
		return nil, err
	}
	if o.HTTP == nil {
		o.HTTP = &http.Client{Timeout: 30 * time.Second}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.StateKey == nil {
		o.StateKey = make([]byte, 32)
		rand.Read(o.StateKey)
		o.Logger.Warn("repohelper: no state key given; using a random one, so a 2026-07-28 retry that reaches another replica or a restarted server is refused")
	}
	if o.TokenURL == "" || o.IntrospectionURL == "" {
		ctx, cancel := context.WithTimeout(context.Background(), discoveryTimeout)
		md, err := Discover(ctx, o.HTTP, o.Issuer)
		cancel()
		if err != nil {
			return nil, err
		}
		if o.TokenURL == "" {
			o.TokenURL = md.TokenEndpoint
		}
		if o.IntrospectionURL == "" {
			o.IntrospectionURL = md.IntrospectionEndpoint
		}
		if o.TokenURL == "" || o.IntrospectionURL == "" {
			return nil, fmt.Errorf("repohelper: the metadata of %s names no token or introspection endpoint", o.Issuer)
		}
	}

	relay, err := latchkey.NewRelay(&latchkey.Exchanger{
		TokenURL:     o.TokenURL,
		ClientID:     o.ClientID,
		ClientSecret: o.ClientSecret,
		HTTP:         o.HTTP,
	}, o.StateKey)
	if err != nil {
		return nil, fmt.Errorf("repohelper: %w", err)
	}
	relay.Now = o.Now

	server := sdk.NewServer(&sdk.Implementation{Name: "repo-helper", Title: "Repo Helper", Version: Version},
		&sdk.ServerOptions{
			Instructions: "Repo Helper lists the repositories of the person you work for at GitHub. " +
				"When it answers with a link, show the link to the person, and call the tool again once they say they are done.",
			Logger: o.Logger,
		})
	sdk.AddTool(server, &sdk.Tool{
		Name:        ToolName,
		Title:       "List my repositories",
		Description: "Lists the GitHub repositories of the person you are working for, private ones included.",
	}, latchkey.Tool(relay, o.Audience, gh.list))

	rs := &latchkey.ResourceServer{
		Resource:            o.Resource,
		AuthorizationServer: o.Issuer,
		IntrospectionURL:    o.IntrospectionURL,
		ClientID:            o.ClientID,
		ClientSecret:        o.ClientSecret,
		ResourceName:        "Repo Helper",
		HTTP:                o.HTTP,
		Now:                 o.Now,
		Logger:              o.Logger,
	}
	path := res.EscapedPath()
	if path == "" {
		path = "/"
	}
	mux := http.NewServeMux()
	mux.Handle(path, rs.Protect(latchkey.NewStreamableHandler(
		func(*http.Request) *sdk.Server { return server },
		&sdk.StreamableHTTPOptions{Logger: o.Logger},
	)))
	meta := rs.MetadataHandler()
	mux.Handle(rs.MetadataPath(), meta)
	if rs.MetadataPath() != "/.well-known/oauth-protected-resource" {
		// Clients that do not read WWW-Authenticate try the bare well-known path.
		mux.Handle("/.well-known/oauth-protected-resource", meta)
	}
	return mux, nil
}

// Metadata is what Repo Helper reads from the issuer's authorization server metadata.
type Metadata struct {
	Issuer                string `json:"issuer"`
	AuthorizationEndpoint string `json:"authorization_endpoint"`
	TokenEndpoint         string `json:"token_endpoint"`
	IntrospectionEndpoint string `json:"introspection_endpoint"`
}

// Discover reads the issuer's authorization server metadata (RFC 8414, the path-inserted
// well-known URL) and checks that it names the same issuer (§3.3), so a misconfigured or
// impersonating server is not trusted with this server's credentials.
func Discover(ctx context.Context, hc *http.Client, issuer string) (*Metadata, error) {
	u, err := url.Parse(issuer)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("repohelper: issuer %q is not an absolute http(s) URL", issuer)
	}
	wk := *u
	wk.Path = "/.well-known/oauth-authorization-server" + strings.TrimSuffix(u.Path, "/")
	wk.RawPath = ""
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, wk.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("repohelper: reading %s: %w", wk.String(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("repohelper: %s answered %s", wk.String(), resp.Status)
	}
	var md Metadata
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&md); err != nil {
		return nil, fmt.Errorf("repohelper: %s: %w", wk.String(), err)
	}
	if md.Issuer != issuer {
		return nil, fmt.Errorf("repohelper: %s names issuer %q, want %q", wk.String(), md.Issuer, issuer)
	}
	return &md, nil
}

// ListInput is the tool's input.
type ListInput struct {
	// Visibility filters the list: "all" (the default), "public" or "private".
	Visibility string `json:"visibility,omitempty" jsonschema:"which repositories to list: all (the default), public or private"`
}

// ListOutput is the tool's structured result.
type ListOutput struct {
	// Account is the GitHub login the repositories belong to, so the person can tell whether the
	// account they connected is the one they meant: Latchkey proves who the person is, not which
	// GitHub account they picked (docs/connections-for-agents.md, what the check does not prove).
	Account      string       `json:"account,omitempty"`
	Repositories []Repository `json:"repositories"`
}

// Repository is one repository as GitHub describes it.
type Repository struct {
	FullName string `json:"full_name"`
	Private  bool   `json:"private"`
	URL      string `json:"html_url,omitempty"`
}

// github calls the GitHub REST API with the person's token.
type github struct {
	base *url.URL
	hc   *http.Client
}

// maxPages bounds how far list follows GitHub's pagination (100 repositories a page).
const maxPages = 10

func newGitHub(base string, hc *http.Client) (*github, error) {
	u, err := url.Parse(strings.TrimSuffix(base, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("repohelper: GitHub API URL %q is not an absolute http(s) URL", base)
	}
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	// Redirects are not followed: the person's token must go nowhere but this origin.
	c := *hc
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &github{base: u, hc: &c}, nil
}

func (g *github) list(ctx context.Context, _ *sdk.CallToolRequest, in ListInput, tok *latchkey.Token) (*sdk.CallToolResult, ListOutput, error) {
	switch in.Visibility {
	case "", "all", "public", "private":
	default:
		return nil, ListOutput{}, fmt.Errorf("visibility must be all, public or private, not %q", in.Visibility)
	}
	next := g.base.JoinPath("user", "repos")
	q := url.Values{"per_page": {"100"}, "sort": {"full_name"}}
	if in.Visibility != "" {
		q.Set("visibility", in.Visibility)
	}
	next.RawQuery = q.Encode()
	out := ListOutput{Repositories: []Repository{}}
	for page := 0; next != nil && page < maxPages; page++ {
		repos, more, err := g.page(ctx, next, tok.AccessToken)
		if err != nil {
			return nil, ListOutput{}, err
		}
		for _, r := range repos {
			// Filtered here too: not every server honours the query parameter.
			if (in.Visibility == "public" && r.Private) || (in.Visibility == "private" && !r.Private) {
				continue
			}
			if out.Account == "" {
				out.Account = r.Owner.Login
			}
			out.Repositories = append(out.Repositories, Repository{FullName: r.FullName, Private: r.Private, URL: r.HTMLURL})
		}
		next = more
	}
	return nil, out, nil
}

type apiRepo struct {
	FullName string `json:"full_name"`
	Private  bool   `json:"private"`
	HTMLURL  string `json:"html_url"`
	Owner    struct {
		Login string `json:"login"`
	} `json:"owner"`
}

// page fetches one page and returns the next page's URL, if GitHub names one on this origin.
func (g *github) page(ctx context.Context, u *url.URL, token string) ([]apiRepo, *url.URL, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	resp, err := g.hc.Do(req)
	if err != nil {
		return nil, nil, errors.New("could not reach GitHub; try again later")
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return nil, nil, errors.New("GitHub did not accept the token Latchkey holds for you; " +
			"reconnect GitHub on your Latchkey account page, then ask again")
	case resp.StatusCode != http.StatusOK:
		return nil, nil, fmt.Errorf("GitHub answered %s", resp.Status)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" {
		return nil, nil, fmt.Errorf("GitHub answered with %q, not JSON", mt)
	}
	var repos []apiRepo
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&repos); err != nil {
		return nil, nil, fmt.Errorf("GitHub's answer: %w", err)
	}
	return repos, g.nextPage(resp.Header.Get("Link")), nil
}

// nextPage reads rel="next" from a Link header (RFC 8288), keeping only URLs on the API's own
// origin so the token cannot be led elsewhere.
func (g *github) nextPage(link string) *url.URL {
	for part := range strings.SplitSeq(link, ",") {
		target, params, ok := strings.Cut(strings.TrimSpace(part), ";")
		if !ok || !strings.Contains(strings.ReplaceAll(params, " ", ""), `rel="next"`) {
			continue
		}
		u, err := url.Parse(strings.Trim(strings.TrimSpace(target), "<>"))
		if err != nil || u.Scheme != g.base.Scheme || u.Host != g.base.Host {
			return nil
		}
		return u
	}
	return nil
}

// Command repo-helper runs Repo Helper, the demo MCP server of latchkey.dev/latchkey/mcp, and a
// small MCP client to try it with.
//
//	repo-helper serve   the MCP server (the default)
//	repo-helper call    sign in as a person, call list_repositories, show the connect link
//
// Defaults fit `make run`: Latchkey at http://127.0.0.1:8080, the demo project latchkey-demo/demo,
// the fake GitHub at http://127.0.0.1:8090. The client credentials are the demo OAuthClient
// repo-helper's, from the Secret latchkey-demo/repo-helper-credentials; pass them in
// REPO_HELPER_CLIENT_ID and REPO_HELPER_CLIENT_SECRET (or the flags) to both subcommands.
package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"latchkey.dev/latchkey/examples/repohelper"
)

const (
	defaultIssuer   = "http://127.0.0.1:8080/latchkey-demo/demo"
	defaultListen   = "127.0.0.1:8071"
	defaultGitHub   = "http://127.0.0.1:8090"
	defaultRedirect = "http://127.0.0.1:8070/callback"
)

func main() {
	args := os.Args[1:]
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd {
	case "serve":
		err = serve(ctx, args)
	case "call":
		err = call(ctx, args)
	default:
		err = fmt.Errorf("unknown command %q; use serve or call", cmd)
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(os.Stderr, "repo-helper %s: %v\n", cmd, err)
		os.Exit(1) //nolint:gocritic // the deferred stop only unregisters the signal handler; exiting does that too
	}
}

// credentials are the flags both subcommands share.
type credentials struct {
	issuer, clientID, clientSecret string
}

func (c *credentials) register(fs *flag.FlagSet) {
	fs.StringVar(&c.issuer, "issuer", envOr("LATCHKEY_ISSUER", defaultIssuer), "the Latchkey project's issuer URL (env LATCHKEY_ISSUER)")
	fs.StringVar(&c.clientID, "client-id", os.Getenv("REPO_HELPER_CLIENT_ID"), "Repo Helper's client id at Latchkey (env REPO_HELPER_CLIENT_ID)")
	fs.StringVar(&c.clientSecret, "client-secret", "", "its client secret; prefer env REPO_HELPER_CLIENT_SECRET, which other users cannot read in the process list")
}

func (c *credentials) check() error {
	if c.clientSecret == "" {
		c.clientSecret = os.Getenv("REPO_HELPER_CLIENT_SECRET")
	}
	if c.clientID == "" || c.clientSecret == "" {
		return errors.New("set REPO_HELPER_CLIENT_ID and REPO_HELPER_CLIENT_SECRET (make run prints them; " +
			"they are in the Secret latchkey-demo/repo-helper-credentials)")
	}
	return nil
}

func serve(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var creds credentials
	creds.register(fs)
	listen := fs.String("listen", envOr("REPO_HELPER_LISTEN", defaultListen), "address to listen on (env REPO_HELPER_LISTEN)")
	resource := fs.String("resource", os.Getenv("REPO_HELPER_RESOURCE"), "this server's MCP URL as clients name it; default http://{listen}/mcp (env REPO_HELPER_RESOURCE)")
	githubAPI := fs.String("github-api", envOr("REPO_HELPER_GITHUB_API", defaultGitHub), "GitHub's API base URL; https://api.github.com for the real one (env REPO_HELPER_GITHUB_API)")
	audience := fs.String("audience", repohelper.DefaultAudience, "the GitHub Connector's token-exchange audience")
	verbose := fs.Bool("v", false, "log every request")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := creds.check(); err != nil {
		return err
	}
	if *resource == "" {
		*resource = "http://" + *listen + "/mcp"
	}
	// REPO_HELPER_STATE_KEY: 32 bytes, base64. Without it every restart forgets the key, and a
	// 2026-07-28 retry in flight across the restart is refused (the person calls again).
	var stateKey []byte
	if s := os.Getenv("REPO_HELPER_STATE_KEY"); s != "" {
		k, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(k) != 32 {
			return errors.New("REPO_HELPER_STATE_KEY must be 32 bytes in base64 (head -c32 /dev/urandom | base64)")
		}
		stateKey = k
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	h, err := repohelper.New(repohelper.Options{ //nolint:contextcheck // New discovers the issuer under its own timeout
		Issuer:       creds.issuer,
		ClientID:     creds.clientID,
		ClientSecret: creds.clientSecret,
		Resource:     *resource,
		Audience:     *audience,
		GitHubAPI:    *githubAPI,
		StateKey:     stateKey,
		Logger:       logger,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	logger.Info("Repo Helper is serving MCP", "url", *resource, "issuer", creds.issuer, "github", *githubAPI)
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

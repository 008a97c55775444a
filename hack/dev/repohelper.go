package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"latchkey.dev/latchkey/examples/repohelper"
)

const (
	repoHelperAddr   = "127.0.0.1:8071"
	repoHelperSecret = "repo-helper-credentials"
	demoNamespace    = "latchkey-demo"
)

type repoHelper struct {
	resource, clientID, clientSecret string
}

// startRepoHelper runs the demo MCP server in-process once the controller has written the demo
// OAuthClient's credentials (creds reads them), so the walkthrough needs nothing but `make run`.
func startRepoHelper(ctx context.Context, creds func(context.Context) (id, secret string, err error), issuer string) (repoHelper, func(), error) {
	say("starting Repo Helper, the demo MCP server, on %s", repoHelperAddr)
	var id, secret string
	deadline := time.Now().Add(60 * time.Second)
	for {
		var err error
		id, secret, err = creds(ctx)
		if err == nil && id != "" && secret != "" {
			break
		}
		if time.Now().After(deadline) {
			return repoHelper{}, nil, fmt.Errorf("the controller did not write %s/%s within a minute: %w", demoNamespace, repoHelperSecret, err)
		}
		select {
		case <-ctx.Done():
			return repoHelper{}, nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	rh := repoHelper{
		resource:     "http://" + repoHelperAddr + "/mcp",
		clientID:     id,
		clientSecret: secret,
	}
	h, err := repohelper.New(repohelper.Options{ //nolint:contextcheck // New discovers the issuer under its own timeout
		Issuer:       issuer,
		ClientID:     rh.clientID,
		ClientSecret: rh.clientSecret,
		Resource:     rh.resource,
		GitHubAPI:    "http://" + fakeGitHubAddr,
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return repoHelper{}, nil, err
	}
	ln, err := net.Listen("tcp", repoHelperAddr)
	if err != nil {
		return repoHelper{}, nil, fmt.Errorf("repo helper: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(os.Stderr, "repo helper: %v\n", err)
		}
	}()
	return rh, func() { //nolint:contextcheck // the stop function runs after ctx has ended
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// A peer beside the real binary (-binary … -hydra path/to/hydra).
//
// Ory Hydra is the open-source OAuth 2.0 server people compare an authorization server with.
// With -hydra, bench starts it as its quickstart does (`hydra serve all --dev`: plain HTTP, its
// default hashers and opaque access tokens stored in its database), on a SQLite file of its own
// in the run's directory, registers one client_credentials client through its admin API, and
// runs hydra_client_credentials in every round beside Latchkey's client_credentials: same
// load generator, same machine, same rounds, so the ratio is read round by round. Hydra's SQLite
// support needs its `sqlite` build tag (CGO), and its go.mod's replace directives apply only when
// it is built as the main module: hack/build-hydra.sh builds it that way into bin/hydra.

// hydraPeer is the running Hydra and its client.
type hydraPeer struct {
	proc          *proc
	tokenURL      string
	id, secret    string
	logPath, home string
}

// startHydra migrates a fresh database, starts Hydra and registers the client.
func startHydra(ctx context.Context, o options, dir string) (*hydraPeer, error) {
	public, err := freeAddr()
	if err != nil {
		return nil, err
	}
	admin, err := freeAddr()
	if err != nil {
		return nil, err
	}
	sys := make([]byte, 24)
	_, _ = rand.Read(sys)
	h := &hydraPeer{home: dir, logPath: filepath.Join(dir, "hydra.log")}
	env := append(os.Environ(),
		"DSN=sqlite://"+filepath.Join(dir, "hydra.db")+"?_fk=true",
		"SERVE_PUBLIC_HOST="+hostOf(public), "SERVE_PUBLIC_PORT="+portOf(public),
		"SERVE_ADMIN_HOST="+hostOf(admin), "SERVE_ADMIN_PORT="+portOf(admin),
		"URLS_SELF_ISSUER=http://"+public,
		"SECRETS_SYSTEM="+hex.EncodeToString(sys),
	)
	migrate := exec.CommandContext(ctx, o.hydra, "migrate", "sql", "up", "-e", "--yes")
	migrate.Env = env
	if out, err := migrate.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("hydra migrate sql up: %w\n%s", err, tail(out, 2000))
	}
	logFile, err := os.Create(h.logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(o.hydra, "serve", "all", "--dev")
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if h.proc, err = startProc(cmd); err != nil {
		logFile.Close()
		return nil, err
	}
	go func() { <-h.proc.done; logFile.Close() }()
	if err := waitReady(ctx, "http://"+admin+"/health/ready", h.proc); err != nil {
		b, _ := os.ReadFile(h.logPath)
		h.proc.stop()
		return nil, fmt.Errorf("hydra did not become ready: %w\n%s", err, tail(b, 2000))
	}
	if err := h.register(ctx, "http://"+admin); err != nil {
		h.proc.stop()
		return nil, err
	}
	h.tokenURL = "http://" + public + "/oauth2/token"
	logf(o, "started %s serve all --dev (log %s), client %s", o.hydra, h.logPath, h.id)
	return h, nil
}

// register creates a confidential client that authenticates with HTTP Basic and may use
// client_credentials, as the Latchkey service client does.
func (h *hydraPeer) register(ctx context.Context, admin string) error {
	body, _ := json.Marshal(map[string]any{
		"client_name":                "bench",
		"grant_types":                []string{"client_credentials"},
		"token_endpoint_auth_method": "client_secret_basic",
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, admin+"/admin/clients", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("hydra: creating the client: %s: %s", resp.Status, b)
	}
	var c struct {
		ID     string `json:"client_id"`
		Secret string `json:"client_secret"`
	}
	if err := json.Unmarshal(b, &c); err != nil || c.ID == "" || c.Secret == "" {
		return fmt.Errorf("hydra: creating the client: no id and secret in %s", b)
	}
	h.id, h.secret = c.ID, c.Secret
	return nil
}

// op is one client_credentials request to Hydra; a token must come back.
func (h *hydraPeer) op(c *http.Client) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		body, err := send(c, post(ctx, h.tokenURL, "grant_type=client_credentials", h.id, h.secret), http.StatusOK)
		if err == nil && !strings.Contains(string(body), `"access_token"`) {
			err = fmt.Errorf("no access token: %s", body)
		}
		return err
	}
}

func (h *hydraPeer) stop() {
	if h != nil {
		h.proc.stop()
	}
}

func hostOf(addr string) string { return addr[:strings.LastIndexByte(addr, ':')] }
func portOf(addr string) string { return addr[strings.LastIndexByte(addr, ':')+1:] }

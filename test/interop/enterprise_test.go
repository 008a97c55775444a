package interop

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/test/stack"
)

const (
	pkjClientID   = "lkc_interop_enterprise"
	pkjClientName = "Interop enterprise agent"
	hsClientID    = "lkc_interop_hs256"
	hsSecret      = "lk_cs_interop-client-secret-jwt-0123456789abcdef"
)

// TestEnterpriseWithOAuth4WebAPI runs npm oauth4webapi (test/interop/node/enterprise.mjs)
// against DPoP with server nonces, private_key_jwt, client_secret_jwt and a pushed
// authorization request bound to a DPoP key: each step is ok only when the library accepted
// the server's answer (or, for a refused step, refused it).
func TestEnterpriseWithOAuth4WebAPI(t *testing.T) {
	node := nodeScript(t)
	h := stack.New(t, stack.Options{Audit: true})
	h.Clock.Advance(time.Since(h.Clock.Now()))
	withSigningKey(t, h)

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	private, _ := json.Marshal(jose.JSONWebKey{Key: key, KeyID: "agent-2026", Algorithm: "ES256"})
	public, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: key.Public(), KeyID: "agent-2026", Algorithm: "ES256", Use: "sig"}}})
	redirectURI := redirectBase + "/enterprise"
	p := *h.Project
	p.RequireDPoPNonce = true
	p.Clients = maps.Clone(p.Clients)
	p.Clients[pkjClientID] = &config.Client{
		ID: pkjClientID, Name: pkjClientName, RedirectURIs: []string{redirectURI},
		GrantTypes:              []string{"authorization_code", "refresh_token", "client_credentials"},
		TokenEndpointAuthMethod: "private_key_jwt", JWKS: public, RequireDPoP: true, RequirePAR: true,
	}
	p.Clients[hsClientID] = &config.Client{
		ID: hsClientID, Name: "Interop HS256 client", GrantTypes: []string{"client_credentials"},
		TokenEndpointAuthMethod: "client_secret_jwt", SecretHash: secret.Hash(hsSecret), SecretJWTKey: []byte(hsSecret),
	}
	h.Project = &p
	h.Holder().Store(&config.Snapshot{Projects: map[string]*config.Project{p.Key: &p}, Version: 3})
	if pg := h.Browser().MustGet(h.Front.URL + "/-/readyz"); pg.Status != http.StatusOK {
		t.Fatalf("server not ready: %d %s", pg.Status, pg.Body)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "enterprise.mjs", h.Issuer, redirectURI)
	cmd.Dir = nodeDir
	cmd.Env = append(os.Environ(), "INTEROP_PKJ_ID="+pkjClientID, "INTEROP_PKJ_KEY="+string(private),
		"INTEROP_HS_ID="+hsClientID, "INTEROP_HS_SECRET="+hsSecret,
		"INTEROP_RS_ID="+resourceServerID, "INTEROP_RS_SECRET="+resourceServerSecret)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	alice := &person{b: h.Browser(), email: stack.AliceEmail, password: stack.AlicePassword}
	results := map[string]result{}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var r result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("not a JSON line: %q", sc.Text())
		}
		t.Logf("%s", sc.Bytes())
		results[r.str("step")] = r
		switch r.str("step") {
		case "authorize":
			io.WriteString(stdin, alice.authorize(t, r.str("url"), pkjClientName, "allow")+"\n")
		case "authorize-reused":
			pg := alice.b.MustGet(r.str("url"))
			if pg.Status != http.StatusBadRequest || pg.Location() != "" || !strings.Contains(pg.Text(), "has expired or has already been used") {
				t.Errorf("a spent request_uri: %d %q %s", pg.Status, pg.Location(), pg.Text())
			}
			io.WriteString(stdin, "done\n")
		}
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		for k, r := range results {
			if !r.ok() {
				t.Errorf("step %s failed: %v", k, r)
			}
		}
		t.Fatalf("enterprise.mjs: %v\nstderr:\n%s", err, stderr.String())
	}
	for step, want := range map[string]map[string]matcher{
		"discovery": {
			"pushed_authorization_request_endpoint": eq(h.Issuer + "/par"),
		},
		"client-credentials-dpop":      {"token_type": eqFold("dpop"), "nonce_retry": eq(true)},
		"introspect-cnf":               {"active": eq(true), "token_type": eq("DPoP"), "jkt_matches": eq(true)},
		"client-secret-jwt":            {"token_type": eqFold("bearer")},
		"pushed-authorization-request": {"request_uri_prefix": eq("urn:ietf:params:oauth:request_uri:"), "expires_in": eq(float64(60))},
		"token-code-other-key-refused": {"refused": eq(true), "error": eq("invalid_grant")},
		"token-code-dpop":              {"token_type": eqFold("dpop"), "has_refresh": eq(true)},
		"userinfo-dpop":                {"has_sub": eq(true)},
		"userinfo-bearer-refused":      {"refused": eq(true)},
		"refresh-dpop":                 {"token_type": eqFold("dpop"), "refresh_rotated": eq(true)},
		"done":                         {},
	} {
		r, ok := results[step]
		if !ok || !r.ok() {
			t.Errorf("step %s: %v", step, r)
			continue
		}
		for path, m := range want {
			if got := r.get(path); !m.match(got) {
				t.Errorf("%s: %s = %v, want %s", step, path, got, m.desc)
			}
		}
	}
	if !strings.Contains(strings.Join(alice.consented, ","), pkjClientName) {
		t.Errorf("the consent page never named %q", pkjClientName)
	}
}

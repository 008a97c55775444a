// Package interop runs strict third-party OAuth client libraries against Latchkey: npm
// oauth4webapi 3.8.8 step by step, then openid-client 6.9.0 through its high-level API, both in
// Node (test/interop/node/flow.mjs), against the real server in process — webhook.New on a real
// SQLite file with open registration and two password people (test/stack's installation).
//
// The script does what an agent does (discovery, dynamic registration, authorization code with
// PKCE S256, state, nonce and iss checking, token, refresh, userinfo, introspection,
// revocation) and prints one JSON line per step; this test plays the person in a browser with
// its own cookie jar when the script prints an authorization URL, and then asserts every step's
// outcome. A step is ok only when the library accepted the server's answer, so a server that
// drifts from the RFCs fails here even when our own tests agree with it.
package interop

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/testenv"
	"latchkey.dev/latchkey/test/stack"
)

const (
	// redirectBase is where the clients' loopback callbacks point. Nothing listens there: the
	// browser stops at the redirect and hands the address to the script, as a native app's
	// loopback listener would.
	redirectBase = "http://127.0.0.1:49152/interop"
	nodeDir      = "node"
	signingKeyID = "interop-es256"
)

// The client names the script registers; the consent page must show them.
var clientNames = map[string]string{
	"oauth4webapi":  "Interop public client (oauth4webapi)",
	"openid-client": "Interop confidential client (openid-client)",
}

func TestStrictClientLibraries(t *testing.T) {
	node := nodeScript(t)

	h := stack.New(t, stack.Options{Audit: true})
	// The libraries check ID token times (exp, auth_time against max_age) on the wall clock;
	// the injected clock starts there and stands still for the run.
	h.Clock.Advance(time.Since(h.Clock.Now()))
	withSigningKey(t, h)
	// Ask the server from this process before Node does. stack.New sets its handler
	// after the listener starts; an in-process request orders that write before every later
	// request (the race detector cannot see ordering through another process).
	if pg := h.Browser().MustGet(h.Front.URL + "/-/readyz"); pg.Status != http.StatusOK {
		t.Fatalf("server not ready: %d %s", pg.Status, pg.Body)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "flow.mjs", h.Issuer, redirectBase)
	cmd.Dir = nodeDir
	cmd.Env = append(os.Environ(), "INTEROP_RS_ID="+resourceServerID, "INTEROP_RS_SECRET="+resourceServerSecret)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	alice := &person{b: h.Browser(), email: stack.AliceEmail, password: stack.AlicePassword}
	results := map[string]result{}
	var order []string
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var r result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("the script printed something that is not a JSON line: %q", sc.Text())
		}
		key := r.key()
		t.Logf("%s %s", key, sc.Bytes())
		if _, dup := results[key]; dup {
			t.Fatalf("step %s reported twice", key)
		}
		results[key] = r
		order = append(order, key)
		if strings.HasPrefix(r.str("step"), "authorize") && r.ok() {
			final := alice.authorize(t, r.str("url"), clientNames[r.str("pass")], r.str("decision"))
			if _, err := io.WriteString(stdin, final+"\n"); err != nil {
				t.Fatalf("writing the authorization response to the script: %v", err)
			}
		}
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		for _, k := range order {
			if !results[k].ok() {
				t.Errorf("step %s failed: %v", k, results[k])
			}
		}
		t.Fatalf("flow.mjs: %v\nstderr:\n%s", err, stderr.String())
	}

	for _, w := range expectations(t, h, results) {
		key := w.pass + "/" + w.step
		r, ok := results[key]
		if !ok {
			t.Errorf("step %s did not run", key)
			continue
		}
		if !r.ok() {
			t.Errorf("step %s failed: %v", key, r)
			continue
		}
		for path, m := range w.want {
			if got := r.get(path); !m.match(got) {
				t.Errorf("%s: %s = %v, want %s", key, path, got, m.desc)
			}
		}
		delete(results, key)
	}
	for _, k := range order {
		if _, left := results[k]; left {
			t.Errorf("step %s ran but nothing checks it; add it to expectations", k)
		}
	}

	// What the server kept: three registrations, consent from alice to the two clients that
	// asked her, each shown with the name the client registered.
	count := func(action string) int {
		n := 0
		for _, a := range h.AuditActions() {
			if a == action {
				n++
			}
		}
		return n
	}
	if n := count("client.registered"); n != 3 {
		t.Errorf("client.registered recorded %d times, want 3", n)
	}
	if n := count("consent.granted"); n != 2 {
		t.Errorf("consent.granted recorded %d times, want 2", n)
	}
	for pass, name := range clientNames {
		if !slices.Contains(alice.consented, name) {
			t.Errorf("%s: the consent page never named %q (it named %q)", pass, name, alice.consented)
		}
	}
}

// expectations are what every step must have seen. Values that only exist once the run is
// over (client ids, alice's subject) come from the results and the store.
func expectations(t *testing.T, h *stack.Stack, res map[string]result) []expect {
	t.Helper()
	iss := h.Issuer
	aliceID := h.Person(stack.AliceEmail).ID
	pubID := res["oauth4webapi/register-public"].str("client_id")
	confID := res["oauth4webapi/register-confidential"].str("client_id")
	oidcID := res["openid-client/discovery-register"].str("client_id")

	// What the store holds for the registered clients: a hash for the confidential ones only.
	for id, secret := range map[string]bool{pubID: false, confID: true, oidcID: true} {
		if id == "" {
			continue
		}
		c, err := h.Store().GetClient(context.Background(), stack.ProjectKey, id)
		if err != nil {
			t.Errorf("registered client %s: %v", id, err)
			continue
		}
		if got := len(c.SecretHash) == sha256.Size; got != secret {
			t.Errorf("client %s: stored secret hash present = %v, want %v", id, got, secret)
		}
	}

	refusedBy := func(code, msg string) map[string]matcher {
		return map[string]matcher{"refused": eq(true), "code": eq(code), "message": contains(msg)}
	}
	return []expect{
		{"oauth4webapi", "discovery-oidc", map[string]matcher{
			"issuer":                           eq(iss),
			"code_challenge_methods_supported": eq([]string{"S256"}),
			"authorization_response_iss_parameter_supported": eq(true),
			"registration_endpoint":                          eq(iss + "/register"),
			"id_token_signing_alg_values_supported":          eq([]string{"ES256"}),
		}},
		{"oauth4webapi", "discovery-oauth2", map[string]matcher{"issuer": eq(iss), "same_token_endpoint": eq(true)}},
		{"oauth4webapi", "register-public", map[string]matcher{
			"cache_control": eq("no-store"), "client_id": nonEmpty(), "has_secret": eq(false), "token_endpoint_auth_method": eq("none"),
			"has_registration_access_token": eq(true),
		}},
		{"oauth4webapi", "register-confidential", map[string]matcher{
			"client_id": nonEmpty(), "has_secret": eq(true), "secret_prefix": eq("lk_cs_"),
			"client_secret_expires_at": eq(0), "token_endpoint_auth_method": eq("client_secret_basic"),
		}},
		{"oauth4webapi", "authorize-deny", map[string]matcher{"url": prefix(iss + "/authorize?"), "decision": eq("deny")}},
		// The refusal passed the library's iss and state checks: it reports the error itself.
		{"oauth4webapi", "auth-response-denied", map[string]matcher{
			"refused": eq(true), "code": eq("OAUTH_AUTHORIZATION_RESPONSE_ERROR"), "error": eq("access_denied"),
		}},
		{"oauth4webapi", "authorize", map[string]matcher{"url": prefix(iss + "/authorize?"), "decision": eq("allow")}},
		// RFC 9207: the library refuses another issuer, and no issuer at all since our metadata
		// promises one; the genuine response passes, so our iss is what the check accepted.
		{"oauth4webapi", "auth-response-wrong-iss", refusedBy("OAUTH_INVALID_RESPONSE", `unexpected "iss"`)},
		{"oauth4webapi", "auth-response-missing-iss", refusedBy("OAUTH_INVALID_RESPONSE", `"iss" (issuer) missing`)},
		{"oauth4webapi", "auth-response-wrong-state", refusedBy("OAUTH_INVALID_RESPONSE", `"state"`)},
		{"oauth4webapi", "auth-response", map[string]matcher{"iss": eq(iss), "code_prefix": eq("lk_ac_")}},
		{"oauth4webapi", "token-code", map[string]matcher{
			"cache_control": eq("no-store"),
			"token_type":    eqFold("Bearer"), "access_prefix": eq("lk_at_"), "refresh_prefix": eq("lk_rt_"),
			"expires_in": eq(3600), "scope": eq("openid email profile"),
			"id_token.iss": eq(iss), "id_token.aud": eq(pubID), "id_token.sub": eq(aliceID),
			"id_token.email": eq(stack.AliceEmail), "id_token.name": eq("Alice"),
			"id_token.has_auth_time": eq(true), "id_token.nonce_matches": eq(true),
		}},
		{"oauth4webapi", "id-token-signature", map[string]matcher{"alg": eq("ES256"), "kid": eq(signingKeyID), "sub": eq(aliceID)}},
		{"oauth4webapi", "userinfo", map[string]matcher{"sub": eq(aliceID), "email": eq(stack.AliceEmail), "name": eq("Alice")}},
		{"oauth4webapi", "refresh", map[string]matcher{
			"cache_control": eq("no-store"), "access_prefix": eq("lk_at_"), "refresh_prefix": eq("lk_rt_"),
			"access_rotated": eq(true), "refresh_rotated": eq(true), "scope": eq("openid email profile"),
		}},
		{"oauth4webapi", "client-credentials", map[string]matcher{
			"token_type": eqFold("Bearer"), "access_prefix": eq("lk_at_"), "has_refresh": eq(false),
		}},
		{"oauth4webapi", "introspect-active", map[string]matcher{
			"active": eq(true), "client_id": eq(pubID), "sub": eq(aliceID), "sub_matches": eq(true), "iss": eq(iss),
			"token_type": eq("Bearer"), "scope": eq("openid email profile"), "has_exp": eq(true),
		}},
		{"oauth4webapi", "revoke-access", nil},
		// RFC 7662 §2.2: an inactive token's answer says nothing more than that.
		{"oauth4webapi", "introspect-revoked", map[string]matcher{"active": eq(false), "keys": eq([]string{"active"})}},
		{"oauth4webapi", "userinfo-revoked", map[string]matcher{"refused": eq(true), "status": eq(401)}},
		{"oauth4webapi", "revoke-refresh", nil},
		{"oauth4webapi", "refresh-after-revoke", map[string]matcher{"refused": eq(true), "error": eq("invalid_grant"), "status": eq(400)}},

		{"openid-client", "discovery-register", map[string]matcher{
			"issuer": eq(iss), "client_id": nonEmpty(), "has_secret": eq(true),
			"token_endpoint_auth_method": eq("client_secret_post"),
		}},
		// prompt=none before consent: consent_required, on the redirect, past the iss and state checks.
		{"openid-client", "authorize-prompt-none", map[string]matcher{"url": prefix(iss + "/authorize?")}},
		{"openid-client", "code-grant-consent-required", map[string]matcher{
			"refused": eq(true), "code": eq("OAUTH_AUTHORIZATION_RESPONSE_ERROR"), "error": eq("consent_required"),
		}},
		{"openid-client", "authorize", map[string]matcher{"url": prefix(iss + "/authorize?")}},
		{"openid-client", "code-grant-wrong-iss", map[string]matcher{
			"refused": eq(true), "code": eq("OAUTH_INVALID_RESPONSE"), "cause": contains(`unexpected "iss"`),
		}},
		{"openid-client", "code-grant-missing-iss", map[string]matcher{
			"refused": eq(true), "code": eq("OAUTH_INVALID_RESPONSE"), "cause": contains(`"iss" (issuer) missing`),
		}},
		{"openid-client", "code-grant", map[string]matcher{
			"token_type": eqFold("Bearer"), "access_prefix": eq("lk_at_"), "refresh_prefix": eq("lk_rt_"),
			"scope": eq("openid email"), "id_token.iss": eq(iss), "id_token.aud": eq(oidcID),
			"id_token.sub": eq(aliceID), "id_token.email": eq(stack.AliceEmail), "id_token.nonce_matches": eq(true),
		}},
		{"openid-client", "userinfo", map[string]matcher{"sub": eq(aliceID), "email": eq(stack.AliceEmail)}},
		{"openid-client", "refresh", map[string]matcher{"access_prefix": eq("lk_at_"), "refresh_rotated": eq(true), "access_rotated": eq(true)}},
		{"openid-client", "introspect-active", map[string]matcher{"active": eq(true), "client_id": eq(oidcID), "sub_matches": eq(true), "iss": eq(iss)}},
		{"openid-client", "revoke-refresh", nil},
		// Revoking the refresh token ended the grant, access token included (RFC 7009 §2.1).
		{"openid-client", "introspect-after-revoke", map[string]matcher{"active": eq(false)}},
		{"openid-client", "refresh-after-revoke", map[string]matcher{"refused": eq(true), "error": eq("invalid_grant")}},
		{"", "done", nil},
	}
}

// withSigningKey gives the project an ES256 key, so the code flow with scope openid returns
// an ID token the libraries validate.
const (
	resourceServerID     = "interop-resource-server"
	resourceServerSecret = "lk_cs_interop-resource-server-secret-0123456789"
)

func withSigningKey(t *testing.T, h *stack.Stack) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p := *h.Project
	p.SigningKeys = []config.SigningKey{{ID: signingKeyID, Algorithm: "ES256", Private: key}}
	// The resource server that introspects people's tokens is declared by the admin, as an
	// OAuthClient would be: a self-registered client may only introspect its own tokens.
	p.Clients = maps.Clone(p.Clients)
	p.Clients[resourceServerID] = &config.Client{
		ID: resourceServerID, SecretHash: secret.Hash(resourceServerSecret), Name: "Interop resource server",
		GrantTypes: []string{"client_credentials"}, TokenEndpointAuthMethod: "client_secret_basic",
	}
	h.Project = &p
	h.Holder().Store(&config.Snapshot{Projects: map[string]*config.Project{p.Key: &p}, Version: 2})
}

// ---- the person ---------------------------------------------------------------------------

type person struct {
	b               *stack.Browser
	email, password string
	// consented are the app names the consent pages showed.
	consented []string
}

var (
	metaRefresh = regexp.MustCompile(`<meta http-equiv="refresh" content="0; url=([^"]+)">`)
	confirmBox  = regexp.MustCompile(`<input type="checkbox" id="confirm_destination" name="confirm_destination" value="([^"]*)"`)
)

// authorize opens the authorization URL and does what the pages ask — sign in; on the consent
// page press decision ("allow" or "deny"), ticking the destination box if one is shown — until
// the browser is sent to the client's callback. It returns that address: the authorization
// response.
func (pp *person) authorize(t *testing.T, start, appName, decision string) string {
	t.Helper()
	b := pp.b
	pg := b.MustGet(start)
	for range 15 {
		switch {
		case pg.Status >= 300 && pg.Status < 400:
			loc := pg.Location()
			if strings.HasPrefix(loc, redirectBase+"/") {
				if got := pg.Header.Get("Cache-Control"); got != "no-store" {
					t.Errorf("the redirect carrying the code has Cache-Control %q, want no-store", got)
				}
				return loc
			}
			pg = b.MustGet(loc)
			continue
		case pg.Status != http.StatusOK:
			t.Fatalf("the person got %d at %s: %s", pg.Status, pg.URL, pg.Text())
		}
		if m := metaRefresh.FindStringSubmatch(pg.Body); m != nil {
			pg = b.MustGet(resolve(t, pg.URL, html.UnescapeString(m[1])))
			continue
		}
		if action, f, ok := pg.Form("Sign in"); ok && strings.Contains(pg.Body, `name="password"`) {
			f.Set("username", pp.email)
			f.Set("password", pp.password)
			pg = b.MustPost(resolve(t, pg.URL, action), f)
			continue
		}
		if action, f, ok := pg.Form("Allow"); ok {
			if strings.Contains(pg.Text(), appName) {
				pp.consented = append(pp.consented, appName)
			}
			f.Set("decision", decision)
			if m := confirmBox.FindStringSubmatch(pg.Body); m != nil && decision == "allow" {
				// An unrecognised destination: the person ticks "I set up this connection and
				// expected access to go to …".
				t.Logf("the consent page asks to confirm the destination %s; ticking it", html.UnescapeString(m[1]))
				f.Set("confirm_destination", html.UnescapeString(m[1]))
			}
			pg = b.MustPost(resolve(t, pg.URL, action), f)
			continue
		}
		t.Fatalf("the person does not know what to do at %s: %s", pg.URL, pg.Text())
	}
	t.Fatalf("the person went round in circles, last at %s", pg.URL)
	return ""
}

func resolve(t *testing.T, base, ref string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	r, err := u.Parse(ref)
	if err != nil {
		t.Fatal(err)
	}
	return r.String()
}

// ---- results and matchers -----------------------------------------------------------------

// result is one JSON line of the script.
type result map[string]any

func (r result) key() string { return r.str("pass") + "/" + r.str("step") }
func (r result) ok() bool    { return r["ok"] == true }
func (r result) str(k string) string {
	s, _ := r.get(k).(string)
	return s
}

// get reads a dotted path ("id_token.sub").
func (r result) get(path string) any {
	var cur any = map[string]any(r)
	for part := range strings.SplitSeq(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[part]
	}
	return cur
}

type expect struct {
	pass, step string
	want       map[string]matcher
}

type matcher struct {
	desc  string
	match func(any) bool
}

// eq compares JSON values by their printed form, so []string{"a"} matches ["a"] and 3600
// matches 3600.0.
func eq(want any) matcher {
	return matcher{fmt.Sprintf("%v", want), func(got any) bool {
		if got == nil {
			return false
		}
		if f, ok := got.(float64); ok {
			got = strconv.FormatFloat(f, 'f', -1, 64)
		}
		return fmt.Sprint(got) == fmt.Sprint(want)
	}}
}

func eqFold(want string) matcher {
	return matcher{want + " (any case)", func(got any) bool {
		s, ok := got.(string)
		return ok && strings.EqualFold(s, want)
	}}
}

func contains(sub string) matcher {
	return matcher{"text containing " + strconv.Quote(sub), func(got any) bool {
		s, ok := got.(string)
		return ok && strings.Contains(s, sub)
	}}
}

func prefix(p string) matcher {
	return matcher{"text starting with " + strconv.Quote(p), func(got any) bool {
		s, ok := got.(string)
		return ok && strings.HasPrefix(s, p)
	}}
}

func nonEmpty() matcher {
	return matcher{"a non-empty string", func(got any) bool {
		s, ok := got.(string)
		return ok && s != ""
	}}
}

// ---- Node ---------------------------------------------------------------------------------

// needTool skips the test when a tool is missing, except in CI, where it fails.
func needTool(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is needed in CI: %v", what, err)
	}
	t.Skipf("skipping: %s is not available (%v); CI=true makes this a failure", what, err)
}

// lockStamp records which package-lock.json node_modules was installed from, so npm ci runs
// once per lock file rather than on every test run.
const lockStamp = ".latchkey-lock-sha256"

// nodeScript makes sure node (20 or later) is there and the pinned libraries are installed
// from the lock file, and returns the node binary.
func nodeScript(t *testing.T) string {
	t.Helper()
	testenv.SkipShort(t, "Node.js and the client libraries")
	node, err := exec.LookPath("node")
	needTool(t, "node", err)
	out, err := exec.Command(node, "-p", "process.versions.node").Output()
	if err == nil {
		major, _, _ := strings.Cut(strings.TrimSpace(string(out)), ".")
		if n, perr := strconv.Atoi(major); perr != nil || n < 20 {
			err = fmt.Errorf("node %s is too old; oauth4webapi needs 20 or later", strings.TrimSpace(string(out)))
		}
	}
	needTool(t, "node 20+", err)

	lock, err := os.ReadFile(filepath.Join(nodeDir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lock)
	want := hex.EncodeToString(sum[:])
	stamp := filepath.Join(nodeDir, "node_modules", lockStamp)
	if got, err := os.ReadFile(stamp); err == nil && strings.TrimSpace(string(got)) == want {
		return node
	}
	npm, err := exec.LookPath("npm")
	needTool(t, "npm", err)
	cmd := exec.CommandContext(t.Context(), npm, "ci", "--no-audit", "--no-fund", "--prefer-offline")
	cmd.Dir = nodeDir
	if out, err := cmd.CombinedOutput(); err != nil {
		needTool(t, "npm ci in test/interop/node", fmt.Errorf("%w: %s", err, out))
	}
	if err := os.WriteFile(stamp, []byte(want+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return node
}

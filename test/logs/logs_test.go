// Package logs checks that no secret reaches the logs: the real flows run (sign-in, the code
// flow, refresh and refresh reuse, token exchange refused with a connect link, the link page
// opened by its person and by someone else, connecting GitHub through the confirmation page,
// exchange handing out the GitHub token, registration, client credentials, revocation) with a
// JSON logger at the most verbose level, and then every secret those flows handled is looked
// for in what was logged.
package logs_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"latchkey.dev/latchkey/test/stack"
)

// buffer is a log sink safe for the server's concurrent writes.
type buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestNoSecretInLogs(t *testing.T) {
	var out buffer
	// slog level -100 is logr's V(100): everything any component logs at any verbosity.
	log := logr.FromSlogHandler(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.Level(-100)}))
	s := stack.New(t, stack.Options{
		DSN: "sqlite:" + filepath.Join(t.TempDir(), "latchkey.db"), Logger: log, AccessTokenTTL: 10 * time.Minute,
	})
	ctx := context.Background()
	secrets := map[string]string{} // what → value
	keep := func(what, v string) {
		t.Helper()
		if v == "" {
			t.Fatalf("%s is empty: the flow did not run as expected", what)
		}
		secrets[what] = v
	}
	keep("Alice's password", stack.AlicePassword)
	keep("Mallory's password", stack.MalloryPassword)
	keep("Repo Helper's client secret", stack.AgentSecret)
	keep("the service's client secret", stack.ServiceSecret)
	keep("the GitHub client secret", stack.GitHubClientSecret)
	check := func(what string, ok bool, detail any) {
		t.Helper()
		if !ok {
			t.Fatalf("%s: %v", what, detail)
		}
	}

	// A wrong password first: what was typed is a secret too.
	alice := s.Browser()
	wrong := "not-alice's-password-0xDEADBEEF"
	keep("a mistyped password", wrong)
	check("a wrong password is refused", alice.SignIn(stack.AliceEmail, wrong) != nil, "signed in")
	check("sign-in", alice.SignIn(stack.AliceEmail, stack.AlicePassword) == nil, "failed")

	// The code flow, then refresh, then reuse of the rotated refresh token.
	pk := stack.NewPKCE()
	keep("the PKCE verifier", pk.Verifier)
	code, err := alice.Authorize(stack.Agent, stack.AgentRedir, "openid read", "", "", pk)
	check("authorize", err == nil, err)
	keep("the authorization code", code)
	tok := s.MustPost("/token", url.Values{
		"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {stack.AgentRedir}, "code_verifier": {pk.Verifier},
	}, stack.Agent, stack.AgentSecret)
	check("code redemption", tok.Status == http.StatusOK, string(tok.Raw))
	keep("the first access token", tok.Str("access_token"))
	keep("the first refresh token", tok.Str("refresh_token"))
	ref, err := s.Refresh(ctx, tok.Str("refresh_token"))
	check("refresh", err == nil && ref.Status == http.StatusOK, string(ref.Raw))
	keep("the rotated access token", ref.Str("access_token"))
	keep("the rotated refresh token", ref.Str("refresh_token"))
	s.Clock.Advance(time.Minute)
	reuse, _ := s.Refresh(ctx, tok.Str("refresh_token"))
	check("reuse is refused", reuse.Status == http.StatusBadRequest, string(reuse.Raw))
	replay := s.MustPost("/token", url.Values{
		"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {stack.AgentRedir}, "code_verifier": {pk.Verifier},
	}, stack.Agent, stack.AgentSecret)
	check("a replayed code is refused", replay.Status == http.StatusBadRequest, string(replay.Raw))

	// A fresh grant for the exchange story (the reuse ended the first one).
	pk2 := stack.NewPKCE()
	code2, err := alice.Authorize(stack.Agent, stack.AgentRedir, "openid read", "", "", pk2)
	check("authorize again", err == nil, err)
	tok2 := s.MustPost("/token", url.Values{
		"grant_type": {"authorization_code"}, "code": {code2}, "redirect_uri": {stack.AgentRedir}, "code_verifier": {pk2.Verifier},
	}, stack.Agent, stack.AgentSecret)
	check("second code redemption", tok2.Status == http.StatusOK, string(tok2.Raw))
	keep("the second code", code2)
	subject := tok2.Str("access_token")
	keep("the subject token", subject)

	// Token exchange refused with a connect link.
	refusal, err := s.Exchange(ctx, subject)
	check("exchange refusal", err == nil && refusal.Str("reason") == "connect_required", string(refusal.Raw))
	link := refusal.Str("connect_uri")
	linkCode := link[strings.LastIndex(link, "/")+1:]
	keep("the link code", linkCode)
	linkPath := strings.TrimPrefix(link, s.Front.URL)

	// Mallory opens Alice's link: refused, and a security event is logged.
	mallory := s.Browser()
	check("Mallory signs in", mallory.SignIn(stack.MalloryEmail, stack.MalloryPassword) == nil, "failed")
	mp, err := mallory.Get(linkPath)
	check("the link refuses Mallory", err == nil && strings.Contains(mp.Body, "another account"), mp.Status)

	// Alice opens it, presses Connect, and the GitHub callback arrives in another browser
	// (the system browser of a desktop app): the confirmation page, then Finish connecting.
	offer, err := alice.Get(linkPath)
	check("the link page", err == nil && offer.Status == http.StatusOK, offer.Status)
	toGitHub, err := alice.Press(offer, "Connect GitHub")
	check("connect", err == nil && toGitHub.Status == http.StatusSeeOther, toGitHub.Status)
	ghURL, _ := url.Parse(toGitHub.Location())
	keep("the upstream state", ghURL.Query().Get("state"))
	system := s.Browser()
	// Finishing in another browser needs a recent sign-in there as the person who started.
	check("the system browser signs in as Alice", system.SignIn(stack.AliceEmail, stack.AlicePassword) == nil, "failed")
	system.SignInGitHub(stack.AliceLogin)
	s.GitHub.Approve(stack.AliceLogin, stack.GitHubClientID)
	confirm, err := system.Follow(toGitHub)
	check("the confirmation page", err == nil && confirm.Status == http.StatusOK, confirm.Status)
	_, fields, ok := confirm.Form("Finish connecting")
	check("a Finish connecting button", ok, confirm.Body)
	keep("the confirmation token", fields.Get("confirm_token"))
	keep("the upstream code", fields.Get("code"))
	done, err := system.Press(confirm, "Finish connecting")
	check("finish connecting", err == nil && done.Status == http.StatusOK, done.Status)

	// The agent asks again and gets Alice's GitHub token; then GitHub's token expires and the
	// vault refreshes it.
	got, err := s.Exchange(ctx, subject)
	check("exchange hands out the GitHub token", err == nil && got.Status == http.StatusOK, string(got.Raw))
	keep("the GitHub access token", got.Str("access_token"))
	s.Clock.Advance(15 * time.Minute)
	got2, err := s.Exchange(ctx, subject)
	check("exchange after a refresh at GitHub", err == nil && got2.Status == http.StatusOK, string(got2.Raw))
	check("GitHub refreshed", got2.Str("access_token") != got.Str("access_token") && s.GitHub.RefreshCalls() == 1, s.GitHub.RefreshCalls())
	keep("the refreshed GitHub access token", got2.Str("access_token"))

	// Registration, client credentials, introspection, revocation, a wrong client secret.
	regReq, _ := http.NewRequest(http.MethodPost, s.Issuer+"/register", strings.NewReader(
		`{"client_name":"Log test","redirect_uris":["https://app.example/cb"],"token_endpoint_auth_method":"client_secret_basic"}`))
	regReq.Header.Set("Content-Type", "application/json")
	reg, err := stack.Do(regReq)
	check("registration", err == nil && reg.Status == http.StatusCreated, string(reg.Raw))
	keep("the registered client's secret", reg.Str("client_secret"))
	keep("the registration access token", reg.Str("registration_access_token"))
	cc, err := s.ClientCredentials(ctx)
	check("client credentials", err == nil && cc.Status == http.StatusOK, string(cc.Raw))
	keep("the service token", cc.Str("access_token"))
	bad := s.MustPost("/token", url.Values{"grant_type": {"client_credentials"}}, stack.Service, "lk_cs_wrong-secret-0123456789abcdefghijklmnop")
	check("a wrong client secret is refused", bad.Status == http.StatusUnauthorized, string(bad.Raw))
	keep("a wrong client secret", "lk_cs_wrong-secret-0123456789abcdefghijklmnop")
	s.MustPost("/introspect", url.Values{"token": {cc.Str("access_token")}}, stack.Service, stack.ServiceSecret)
	s.MustPost("/revoke", url.Values{"token": {ref.Str("refresh_token")}}, stack.Agent, stack.AgentSecret)

	for who, b := range map[string]*stack.Browser{"Alice's": alice, "Mallory's": mallory, "the system browser's": system} {
		for _, c := range b.Cookies() {
			if len(c.Value) >= 16 {
				keep(who+" cookie "+c.Name, c.Value)
			}
		}
	}
	if len(secrets) < 25 {
		t.Fatalf("only %d secrets collected", len(secrets))
	}

	logged := out.String()
	lines := strings.Split(strings.TrimSpace(logged), "\n")
	// Logging was on: requests and audit records were written, as JSON objects.
	var requests, audits int
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("a log line is not JSON: %q", l)
		}
		switch rec["msg"] {
		case "request":
			requests++
		case "audit":
			audits++
		}
	}
	if requests < 20 || audits < 3 {
		t.Fatalf("logged %d request and %d audit lines: the logger was not in use at the verbose level", requests, audits)
	}
	for what, v := range secrets {
		for _, form := range []string{v, url.QueryEscape(v), base64.StdEncoding.EncodeToString([]byte(v)), base64.RawURLEncoding.EncodeToString([]byte(v))} {
			if len(form) >= 8 && strings.Contains(logged, form) {
				t.Errorf("%s appears in the log: %s", what, lineWith(lines, form))
			}
		}
	}
	if strings.Contains(logged, "/account/services/link/"+linkCode[:8]) {
		t.Error("a link's path appears in the log")
	}
	t.Logf("%d log lines (%d requests, %d audit records), %d secrets looked for, none found", len(lines), requests, audits, len(secrets))
}

func lineWith(lines []string, s string) string {
	for _, l := range lines {
		if strings.Contains(l, s) {
			return fmt.Sprintf("%.300s", l)
		}
	}
	return ""
}

package fakegithub

import (
	"context"
	"encoding/json"
	"errors"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/testclock"

	"golang.org/x/oauth2"
)

const callback = "http://127.0.0.1:1/connectors/callback"

// clock is the injected clock: tests move it, nothing sleeps.
type clock = testclock.Clock

type env struct {
	fake  *Server
	srv   *httptest.Server
	clk   *clock
	conf  *oauth2.Config
	alice Account
}

func newEnv(t *testing.T, ttl time.Duration) *env {
	t.Helper()
	clk := testclock.New(time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC))
	alice := Account{ID: 583231, Login: "alice", Name: "Alice Liddell", Password: "wonderland",
		Repos: []Repo{{Name: "notes", Private: true}, {Name: "site"}}}
	fake := New(Options{
		ClientID: "Iv1.test", ClientSecret: "shh", Now: clk.Now, AccessTokenTTL: ttl,
		RedirectURIs: []string{callback},
		Accounts:     []Account{alice, {ID: 9, Login: "mallory", Password: "evil"}},
	})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return &env{fake: fake, srv: srv, clk: clk, alice: alice, conf: &oauth2.Config{
		ClientID: "Iv1.test", ClientSecret: "shh", RedirectURL: callback, Scopes: []string{"repo", "read:user"},
		Endpoint: oauth2.Endpoint{AuthURL: srv.URL + AuthorizePath, TokenURL: srv.URL + TokenPath, AuthStyle: oauth2.AuthStyleInParams},
	}}
}

// browser is a cookie-keeping client that stops at the callback instead of following it.
func browser(t *testing.T) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), "http://127.0.0.1:1/") {
			return http.ErrUseLastResponse
		}
		return nil
	}}
}

func get(t *testing.T, c *http.Client, u string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func post(t *testing.T, c *http.Client, u string, form url.Values) (*http.Response, string) {
	t.Helper()
	resp, err := c.PostForm(u, form)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

var hidden = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

// formFields reads the hidden fields of the page's form.
func formFields(page string) url.Values {
	v := url.Values{}
	for _, m := range hidden.FindAllStringSubmatch(page, -1) {
		v.Set(m[1], html.UnescapeString(m[2]))
	}
	return v
}

// callbackParams checks resp is a redirect to the callback and returns its query.
func callbackParams(t *testing.T, resp *http.Response) url.Values {
	t.Helper()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("status %d, want a redirect to the callback", resp.StatusCode)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || !strings.HasPrefix(loc.String(), callback) {
		t.Fatalf("redirected to %q, want the callback", resp.Header.Get("Location"))
	}
	return loc.Query()
}

func TestAuthorizeSignInApproveThenSkip(t *testing.T) {
	e := newEnv(t, 0)
	b := browser(t)
	verifier := oauth2.GenerateVerifier()
	authURL := e.conf.AuthCodeURL("st&ate=1", oauth2.S256ChallengeOption(verifier))

	// Not signed in: the sign-in form.
	resp, page := get(t, b, authURL)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "<button type=\"submit\">Sign in</button>") {
		t.Fatalf("want the sign-in page, got %d:\n%s", resp.StatusCode, page)
	}
	f := formFields(page)

	// A wrong password keeps you there.
	f.Set("login", "alice")
	f.Set("password", "nope")
	if resp, page := post(t, b, e.srv.URL+SessionPath, f); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, "Incorrect username or password") {
		t.Fatalf("wrong password: %d", resp.StatusCode)
	}

	// Signed in: the approval page, naming the account and the callback.
	f.Set("password", "wonderland")
	resp, page = post(t, b, e.srv.URL+SessionPath, f)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, ">Authorize</button>") || !strings.Contains(page, "<strong>alice</strong>") {
		t.Fatalf("want the approval page, got %d:\n%s", resp.StatusCode, page)
	}
	if got := resp.Header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("approval page Cache-Control %q", got)
	}
	approve := formFields(page)

	// Approving without the page's authenticity token does nothing.
	forged := url.Values{}
	for k, v := range approve {
		forged[k] = v
	}
	forged.Del("authenticity_token")
	forged.Set("authorize", "1")
	if resp, _ := post(t, b, e.srv.URL+AuthorizePath, forged); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("forged approval: status %d", resp.StatusCode)
	}
	if e.fake.Approved("alice", "Iv1.test") {
		t.Fatal("forged approval was recorded")
	}

	approve.Set("authorize", "1")
	resp, _ = post(t, b, e.srv.URL+AuthorizePath, approve)
	q := callbackParams(t, resp)
	if q.Get("state") != "st&ate=1" || q.Get("code") == "" {
		t.Fatalf("callback query %v", q)
	}

	// The code works once, with the right verifier.
	ctx := context.Background()
	if _, err := e.conf.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(oauth2.GenerateVerifier())); !isCode(err, "bad_verification_code") {
		t.Fatalf("wrong verifier: %v", err)
	}
	tok, err := e.conf.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok.AccessToken, "gho_") || tok.RefreshToken != "" || !tok.Expiry.IsZero() {
		t.Fatalf("classic token %+v", tok)
	}
	if _, err := e.conf.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(verifier)); !isCode(err, "bad_verification_code") {
		t.Fatalf("replayed code: %v", err)
	}

	user := getUser(t, e, tok.AccessToken, "Bearer")
	if user["login"] != "alice" || user["id"] != float64(583231) || user["name"] != "Alice Liddell" {
		t.Fatalf("/user = %v", user)
	}
	if user := getUser(t, e, tok.AccessToken, "token"); user["login"] != "alice" {
		t.Fatalf("/user with 'token' scheme = %v", user)
	}

	// Second time: approved before, so GitHub sends the browser straight back (what a forwarded authorization URL relies on).
	resp, _ = get(t, b, e.conf.AuthCodeURL("again", oauth2.S256ChallengeOption(verifier)))
	if q := callbackParams(t, resp); q.Get("state") != "again" || q.Get("code") == "" {
		t.Fatalf("second authorization: %v", q)
	}
	// Unless the app asks for consent again.
	resp, page = get(t, b, e.conf.AuthCodeURL("again", oauth2.SetAuthURLParam("prompt", "consent")))
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, ">Authorize</button>") {
		t.Fatalf("prompt=consent: %d", resp.StatusCode)
	}
}

func TestAuthorizeDeny(t *testing.T) {
	e := newEnv(t, 0)
	b := browser(t)
	u, _ := url.Parse(e.srv.URL)
	b.Jar.SetCookies(u, []*http.Cookie{e.fake.SessionCookie("alice")})
	_, page := get(t, b, e.conf.AuthCodeURL("s1"))
	f := formFields(page)
	f.Set("authorize", "0")
	resp, _ := post(t, b, e.srv.URL+AuthorizePath, f)
	q := callbackParams(t, resp)
	if q.Get("error") != "access_denied" || q.Get("state") != "s1" || q.Get("code") != "" {
		t.Fatalf("denial: %v", q)
	}
	if e.fake.Approved("alice", "Iv1.test") {
		t.Fatal("denial recorded an approval")
	}
}

func TestAuthorizeRejectsBadRequestsWithoutRedirect(t *testing.T) {
	e := newEnv(t, 0)
	b := browser(t)
	u, _ := url.Parse(e.srv.URL)
	b.Jar.SetCookies(u, []*http.Cookie{e.fake.SessionCookie("alice")})
	e.fake.Approve("alice", "Iv1.test")
	base := e.srv.URL + AuthorizePath + "?"
	for name, q := range map[string]url.Values{
		"foreign redirect_uri": {"client_id": {"Iv1.test"}, "redirect_uri": {"https://evil.example/cb"}, "state": {"x"}},
		"look-alike redirect":  {"client_id": {"Iv1.test"}, "redirect_uri": {callback + "/"}, "state": {"x"}},
		"unknown client":       {"client_id": {"nope"}, "redirect_uri": {callback}},
		"plain PKCE":           {"client_id": {"Iv1.test"}, "redirect_uri": {callback}, "code_challenge": {"abc"}, "code_challenge_method": {"plain"}},
	} {
		resp, _ := get(t, b, base+q.Encode())
		if resp.StatusCode < 400 || resp.Header.Get("Location") != "" {
			t.Errorf("%s: status %d, Location %q; want an error page", name, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	// No redirect_uri: GitHub uses the registered callback.
	resp, _ := get(t, b, base+url.Values{"client_id": {"Iv1.test"}, "state": {"x"}}.Encode())
	callbackParams(t, resp)
}

func TestTokenEndpointShapes(t *testing.T) {
	e := newEnv(t, 0)
	code := e.code(t, "alice", "")
	post := func(form url.Values, accept string, basic bool) (string, map[string]any, url.Values) {
		req, _ := http.NewRequest(http.MethodPost, e.srv.URL+TokenPath, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		if basic {
			req.SetBasicAuth("Iv1.test", "shh")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("token endpoint status %d (GitHub answers 200)", resp.StatusCode)
		}
		b, _ := io.ReadAll(resp.Body)
		var j map[string]any
		json.Unmarshal(b, &j)
		v, _ := url.ParseQuery(string(b))
		return resp.Header.Get("Content-Type"), j, v
	}
	// Wrong secret.
	ct, j, _ := post(url.Values{"client_id": {"Iv1.test"}, "client_secret": {"bad"}, "code": {code}}, "application/json", false)
	if !strings.HasPrefix(ct, "application/json") || j["error"] != "incorrect_client_credentials" || j["error_uri"] == nil {
		t.Fatalf("bad secret: %s %v", ct, j)
	}
	// Without Accept: JSON GitHub answers form-encoded; basic auth is accepted too.
	ct, _, v := post(url.Values{"code": {code}}, "", true)
	if !strings.HasPrefix(ct, "application/x-www-form-urlencoded") || !strings.HasPrefix(v.Get("access_token"), "gho_") || v.Get("token_type") != "bearer" || v.Get("scope") != "repo,read:user" {
		t.Fatalf("form answer: %s %v", ct, v)
	}
	_, j, _ = post(url.Values{"client_id": {"Iv1.test"}, "client_secret": {"shh"}, "grant_type": {"password"}}, "application/json", false)
	if j["error"] != "unsupported_grant_type" {
		t.Fatalf("password grant: %v", j)
	}
	// A code redeemed with a different redirect_uri than it was issued for.
	code = e.code(t, "alice", "")
	_, j, _ = post(url.Values{"code": {code}, "redirect_uri": {"https://evil.example/cb"}}, "application/json", true)
	if j["error"] != "redirect_uri_mismatch" {
		t.Fatalf("redirect mismatch: %v", j)
	}
}

func TestRefreshRotationAndExpiry(t *testing.T) {
	e := newEnv(t, 8*time.Hour)
	ctx := context.Background()
	tok, err := e.conf.Exchange(ctx, e.code(t, "alice", ""))
	if err != nil {
		t.Fatal(err)
	}
	// x/oauth2 does not ask for JSON, so this is GitHub's form-encoded answer.
	if !strings.HasPrefix(tok.AccessToken, "ghu_") || !strings.HasPrefix(tok.RefreshToken, "ghr_") || tok.Extra("expires_in") != int64(28800) {
		t.Fatalf("app token %+v", tok)
	}
	if got := tok.Extra("refresh_token_expires_in"); got != int64(15897600) {
		t.Fatalf("refresh_token_expires_in = %v", got)
	}

	refresh := func(rt string) (*oauth2.Token, error) {
		return e.conf.TokenSource(ctx, &oauth2.Token{RefreshToken: rt}).Token()
	}
	next, err := refresh(tok.RefreshToken)
	if err != nil {
		t.Fatal(err)
	}
	if next.RefreshToken == tok.RefreshToken || next.AccessToken == tok.AccessToken {
		t.Fatal("refresh did not rotate")
	}
	if _, err := refresh(tok.RefreshToken); !isCode(err, "bad_refresh_token") {
		t.Fatalf("old refresh token after rotation: %v", err)
	}
	if n := e.fake.RefreshCalls(); n != 2 {
		t.Fatalf("RefreshCalls = %d, want 2", n)
	}

	// Access tokens die on the fake's clock.
	e.clk.Advance(8*time.Hour + time.Second)
	if status := userStatus(t, e, next.AccessToken); status != http.StatusUnauthorized {
		t.Fatalf("expired token: /user status %d", status)
	}
	third, err := refresh(next.RefreshToken)
	if err != nil {
		t.Fatal(err)
	}
	if user := getUser(t, e, third.AccessToken, "Bearer"); user["login"] != "alice" {
		t.Fatalf("/user %v", user)
	}

	e.fake.SetFailRefresh(true)
	if _, err := refresh(third.RefreshToken); !isCode(err, "bad_refresh_token") {
		t.Fatalf("SetFailRefresh: %v", err)
	}
	e.fake.SetFailRefresh(false)
	if _, err := refresh(third.RefreshToken); err != nil {
		t.Fatalf("after SetFailRefresh(false): %v", err)
	}
}

func TestReposAndRevocation(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	tok, err := e.conf.Exchange(ctx, e.code(t, "alice", ""))
	if err != nil {
		t.Fatal(err)
	}
	repos := func(at string) []string {
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL+ReposPath, nil)
		req.Header.Set("Authorization", "Bearer "+at)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var list []struct {
			FullName string `json:"full_name"`
		}
		json.NewDecoder(resp.Body).Decode(&list)
		var names []string
		for _, r := range list {
			names = append(names, r.FullName)
		}
		return names
	}
	if got := strings.Join(repos(tok.AccessToken), ","); got != "alice/notes,alice/site" {
		t.Fatalf("repos with repo scope: %s", got)
	}
	e.conf.Scopes = []string{"read:user"}
	narrow, _ := e.conf.Exchange(ctx, e.code(t, "alice", ""))
	if got := strings.Join(repos(narrow.AccessToken), ","); got != "alice/site" {
		t.Fatalf("repos without repo scope: %s", got)
	}

	del := func(user, pass, body string) int {
		req, _ := http.NewRequest(http.MethodDelete, e.srv.URL+"/applications/Iv1.test/grant", strings.NewReader(body))
		req.SetBasicAuth(user, pass)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := del("Iv1.test", "wrong", `{"access_token":"`+tok.AccessToken+`"}`); s != http.StatusNotFound {
		t.Fatalf("revoke with a wrong secret: %d", s)
	}
	if s := del("Iv1.test", "shh", `{"access_token":"`+tok.AccessToken+`"}`); s != http.StatusNoContent {
		t.Fatalf("revoke: %d", s)
	}
	if userStatus(t, e, tok.AccessToken) != http.StatusUnauthorized || userStatus(t, e, narrow.AccessToken) != http.StatusUnauthorized {
		t.Fatal("revoking the grant left a token working")
	}
	if e.fake.Approved("alice", "Iv1.test") {
		t.Fatal("revoking the grant kept the approval")
	}
	if s := del("Iv1.test", "shh", `{"access_token":"`+tok.AccessToken+`"}`); s != http.StatusNotFound {
		t.Fatalf("revoking again: %d", s)
	}

	t3, _ := e.conf.Exchange(ctx, e.code(t, "alice", ""))
	e.fake.RevokeAll("alice")
	if userStatus(t, e, t3.AccessToken) != http.StatusUnauthorized || e.fake.ActiveTokens("alice") != 0 {
		t.Fatal("RevokeAll left a token working")
	}
}

func TestDelayHonoursClientTimeout(t *testing.T) {
	e := newEnv(t, 0)
	e.fake.SetDelay(time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := e.conf.Exchange(ctx, "whatever")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("delayed exchange: %v", err)
	}
}

// code signs login in, pre-approves the app and returns a fresh authorization code.
func (e *env) code(t *testing.T, login, verifier string) string {
	t.Helper()
	b := browser(t)
	u, _ := url.Parse(e.srv.URL)
	b.Jar.SetCookies(u, []*http.Cookie{e.fake.SessionCookie(login)})
	e.fake.Approve(login, "Iv1.test")
	var opts []oauth2.AuthCodeOption
	if verifier != "" {
		opts = append(opts, oauth2.S256ChallengeOption(verifier))
	}
	resp, _ := get(t, b, e.conf.AuthCodeURL("s", opts...))
	return callbackParams(t, resp).Get("code")
}

func isCode(err error, code string) bool {
	var re *oauth2.RetrieveError
	return errors.As(err, &re) && re.ErrorCode == code
}

func getUser(t *testing.T, e *env, at, scheme string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+UserPath, nil)
	req.Header.Set("Authorization", scheme+" "+at)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return m
}

func userStatus(t *testing.T, e *env, at string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+UserPath, nil)
	req.Header.Set("Authorization", "Bearer "+at)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		if m["message"] != "Bad credentials" {
			t.Fatalf("401 body %v", m)
		}
	}
	return resp.StatusCode
}

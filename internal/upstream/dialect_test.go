package upstream_test

import (
	"context"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/netguard"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/internal/upstream/fakeoauth"
)

var dialectAlice = fakeoauth.Account{ID: "U0ALICE", Login: "alice", Name: "Alice", Email: "alice@example.com"}

type fakeService struct {
	fake *fakeoauth.Server
	srv  *httptest.Server
	c    *config.Connector
}

func newFakeService(t *testing.T, shape fakeoauth.Shape, ttl time.Duration) *fakeService {
	t.Helper()
	fake := fakeoauth.New(fakeoauth.Options{Shape: shape, ClientID: "client-1", ClientSecret: "secret/with+chars",
		RedirectURI: callbackURL, Accounts: []fakeoauth.Account{dialectAlice}, AccessTokenTTL: ttl})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return &fakeService{fake: fake, srv: srv, c: fake.Connector(srv.URL, "default/"+string(shape), callbackURL)}
}

// connect plays the browser signed in at the service and returns the code the callback got.
func (f *fakeService) connect(t *testing.T, verifier string) string {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	u, _ := url.Parse(f.srv.URL)
	jar.SetCookies(u, []*http.Cookie{f.fake.SessionCookie(dialectAlice.Login)})
	b := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := b.Get(upstream.AuthURL(f.c, "st", verifier))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, _ := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || loc == nil || loc.Query().Get("code") == "" {
		t.Fatalf("authorize answered %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	return loc.Query().Get("code")
}

func (f *fakeService) requestsTo(path string) []fakeoauth.Request {
	var out []fakeoauth.Request
	for _, r := range f.fake.Requests() {
		if r.Path == path {
			out = append(out, r)
		}
	}
	return out
}

// TestDialectScopes: Slack's user scopes go in user_scope, joined by commas, and nothing
// configured can put them back in scope.
func TestDialectScopes(t *testing.T) {
	f := newFakeService(t, fakeoauth.Slack, 0)
	f.c.AuthParams = map[string]string{"user_scope": "admin", "team": "T1"}
	q := mustQuery(t, upstream.AuthURL(f.c, "st", upstream.NewVerifier()))
	if q.Get("user_scope") != "channels:history,chat:write" || q.Has("scope") || q.Get("team") != "T1" {
		t.Errorf("authorization query = %v; want user_scope joined by commas, no scope", q)
	}

	f.c.ScopeParam, f.c.ScopeSeparator = "", ""
	q = mustQuery(t, upstream.AuthURL(f.c, "st", upstream.NewVerifier()))
	if q.Get("scope") != "channels:history chat:write" {
		t.Errorf("RFC 6749 scope = %q", q.Get("scope"))
	}
}

func mustQuery(t *testing.T, raw string) url.Values {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query()
}

// TestDialectSlackNestedToken: the person's token is authed_user.access_token; the top-level
// bot token is never taken. Alice's account comes from auth.test.
func TestDialectSlackNestedToken(t *testing.T) {
	f := newFakeService(t, fakeoauth.Slack, 12*time.Hour)
	v := upstream.NewVerifier()
	acct, tok, err := upstream.Exchange(context.Background(), nil, f.c, f.connect(t, v), v)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok.AccessToken, "xoxp-") || !strings.HasPrefix(tok.RefreshToken, "xoxp-refresh-") || tok.ExpiresIn != 43200 || tok.Type() != "Bearer" {
		t.Errorf("token = %+v; want the user token with its refresh token", tok)
	}
	if acct.ID != dialectAlice.ID || acct.Name != dialectAlice.Login {
		t.Errorf("account = %+v", acct)
	}
	if !f.fake.Live(tok.AccessToken) {
		t.Error("the token handed over is not one the service issued to Alice")
	}
}

// TestDialectNestedTokenMissing plays a service that answers a code with its bot token only
// (authed_user absent, as Slack does when no user scope was granted): the exchange fails rather
// than keep the bot's token as the person's.
func TestDialectNestedTokenMissing(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/u" {
			// The user info endpoint answers for any token, the bot's too.
			w.Write([]byte(`{"ok":true,"id":"B0BOT","user":"the-bot"}`))
			return
		}
		w.Write([]byte(`{"ok":true,"access_token":"xoxb-bot","token_type":"bot","refresh_token":"xoxe-bot","scope":"commands"}`))
	}))
	defer srv.Close()
	c := &config.Connector{Key: "default/slack", ClientID: "c", ClientSecret: "s", CallbackURL: callbackURL,
		AuthURL: srv.URL + "/a", TokenURL: srv.URL + "/t", UserInfoURL: srv.URL + "/u",
		AccessTokenField: "authed_user.access_token", AllowedNetworks: netguard.Loopback}
	_, tok, err := upstream.Exchange(context.Background(), nil, c, "code", "v")
	if err == nil {
		t.Fatalf("exchange handed out %+v; the bot token must never become the person's", tok)
	}
}

// TestDialectClientAuth: the service sees the client's credentials where the connector says,
// and only there.
func TestDialectClientAuth(t *testing.T) {
	tests := []struct {
		auth string
		want string
	}{
		{config.TokenAuthBasic, "basic"},
		{config.TokenAuthPost, "post"},
		{"", "post"},
		{config.TokenAuthNone, ""},
	}
	for _, tt := range tests {
		t.Run("auth="+tt.auth, func(t *testing.T) {
			f := newFakeService(t, fakeoauth.Linear, time.Hour)
			f.c.TokenAuth = tt.auth
			v := upstream.NewVerifier()
			_, _, err := upstream.Exchange(context.Background(), nil, f.c, f.connect(t, v), v)
			if (err != nil) != (tt.want == "") {
				t.Errorf("exchange: %v", err)
			}
			reqs := f.requestsTo(fakeoauth.PathsOf(fakeoauth.Linear).Token)
			if len(reqs) != 1 || reqs[0].ClientAuth != tt.want {
				t.Fatalf("token requests = %+v; want one with client auth %q", reqs, tt.want)
			}
			if tt.want == "" && reqs[0].Params.Has("client_secret") {
				t.Error("client_secret sent with none")
			}
		})
	}
}

// TestDialectGraphQLUserInfo: Linear's account is read by POSTing a GraphQL query (the fake
// refuses anything else) and dotted paths into its answer.
func TestDialectGraphQLUserInfo(t *testing.T) {
	f := newFakeService(t, fakeoauth.Linear, time.Hour)
	v := upstream.NewVerifier()
	acct, _, err := upstream.Exchange(context.Background(), nil, f.c, f.connect(t, v), v)
	if err != nil {
		t.Fatal(err)
	}
	if acct.ID != dialectAlice.ID || acct.Name != dialectAlice.Email {
		t.Errorf("account = %+v", acct)
	}
	ui := f.requestsTo(fakeoauth.PathsOf(fakeoauth.Linear).UserInfo)
	if len(ui) != 1 || ui[0].Method != http.MethodPost || ui[0].ContentType != "application/json" || ui[0].Params.Get("query") != "{ viewer { id name email } }" {
		t.Errorf("user info requests = %+v", ui)
	}

	// The same connector by GET: the service refuses it, and so does the exchange.
	f.c.UserInfoMethod, f.c.UserInfoBody = "GET", ""
	v = upstream.NewVerifier()
	if _, _, err := upstream.Exchange(context.Background(), nil, f.c, f.connect(t, v), v); err == nil {
		t.Error("a GET to a GraphQL endpoint read an account")
	}
}

// TestDialectHeadersAndJSON: Notion wants a JSON token request with Basic credentials and its
// version header on every call, revocation included.
func TestDialectHeadersAndJSON(t *testing.T) {
	f := newFakeService(t, fakeoauth.Notion, 0)
	v := upstream.NewVerifier()
	acct, tok, err := upstream.Exchange(context.Background(), nil, f.c, f.connect(t, v), v)
	if err != nil {
		t.Fatal(err)
	}
	if acct.ID != dialectAlice.ID || acct.Name != dialectAlice.Email || !tok.Expiry.IsZero() || tok.RefreshToken != "" {
		t.Errorf("account %+v token %+v; want Alice and a token that does not expire", acct, tok)
	}
	reqs := f.fake.Requests()
	if len(reqs) < 3 {
		t.Fatalf("requests = %+v", reqs)
	}
	for _, r := range reqs[1:] { // the first is the browser's authorization request
		if r.Header.Get("Notion-Version") != fakeoauth.NotionVersion {
			t.Errorf("%s %s without Notion-Version", r.Method, r.Path)
		}
	}
	tr := f.requestsTo(fakeoauth.PathsOf(fakeoauth.Notion).Token)
	if len(tr) != 1 || tr[0].ContentType != "application/json" || tr[0].ClientAuth != "basic" || tr[0].Params.Get("code_verifier") != v {
		t.Errorf("token request = %+v", tr)
	}

	// Without the dialect the service refuses the exchange.
	f.c.TokenRequestJSON = false
	v = upstream.NewVerifier()
	if _, _, err := upstream.Exchange(context.Background(), nil, f.c, f.connect(t, v), v); err == nil {
		t.Error("a form token request was accepted by the JSON-only service")
	}
}

// TestDialectRevocationURLTemplate: {client_id} is filled in any revocation URL.
func TestDialectRevocationURLTemplate(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.URL.Path }))
	defer srv.Close()
	e := newVaultEnv(t, 0)
	conn := e.connect(t, alice.Login)
	c := *e.c
	c.RevocationURL, c.RevocationStyle = srv.URL+"/apps/{client_id}/revoke", config.RevokeRFC7009
	if err := e.v.Revoke(context.Background(), &c, conn); err != nil {
		t.Fatal(err)
	}
	if got != "/apps/"+c.ClientID+"/revoke" {
		t.Errorf("revocation went to %q", got)
	}
}

package mcp_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	latchkey "latchkey.dev/latchkey/mcp"
)

// fakeLatchkey stands in for one Latchkey project: /token (token exchange, with the connect
// refusal README.md shows) and /introspect (RFC 7662, with latchkey_subject_type), both
// client-authenticated.
type fakeLatchkey struct {
	t      *testing.T
	srv    *httptest.Server
	issuer string

	clientID, clientSecret string

	mu         sync.Mutex
	tokens     map[string]fakeToken // access token -> what introspection says
	connected  map[string]bool      // person|audience
	exchanges  int
	introspect int
	// down makes /introspect answer 500.
	down bool
}

type fakeToken struct {
	sub, client string
	aud         []string
	scope       string
	tokenType   string
	exp         time.Time
	active      bool
	// jkt binds the token to a DPoP key (introspection then reports cnf.jkt).
	jkt string
}

const (
	connectMessage = "Open this link to connect your GitHub account and let Repo Helper use it."
	upstreamPrefix = "gho_"
)

func newFakeLatchkey(t *testing.T) *fakeLatchkey {
	t.Helper()
	f := &fakeLatchkey{
		t:            t,
		clientID:     "mcp-repo-helper",
		clientSecret: "lks_s3cret+/=",
		tokens:       map[string]fakeToken{},
		connected:    map[string]bool{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /ns/demo/token", f.token)
	mux.HandleFunc("POST /ns/demo/introspect", f.introspection)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	f.issuer = f.srv.URL + "/ns/demo"
	return f
}

func (f *fakeLatchkey) exchanger() *latchkey.Exchanger {
	return &latchkey.Exchanger{TokenURL: f.issuer + "/token", ClientID: f.clientID, ClientSecret: f.clientSecret}
}

// issue registers an access token for person, issued to client for the resources in aud.
func (f *fakeLatchkey) issue(token, person string, aud ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tokens[token] = fakeToken{sub: person, client: "repo-helper-agent", aud: aud, scope: "repos:read", tokenType: "Bearer", exp: time.Now().Add(time.Hour), active: true}
}

func (f *fakeLatchkey) set(token string, ft fakeToken) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tokens[token] = ft
}

// connect is what happens when person opens their link and connects GitHub.
func (f *fakeLatchkey) connect(person, audience string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.connected[person+"|"+audience] = true
}

func (f *fakeLatchkey) setDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

func (f *fakeLatchkey) counts() (exchanges, introspections int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.exchanges, f.introspect
}

func (f *fakeLatchkey) linkFor(person string) string {
	return f.issuer + "/account/services/link/code-" + person
}

func (f *fakeLatchkey) clientAuthOK(r *http.Request) bool {
	id, secret, ok := r.BasicAuth()
	if !ok {
		return false
	}
	id, err1 := url.QueryUnescape(id)
	secret, err2 := url.QueryUnescape(secret)
	return err1 == nil && err2 == nil && id == f.clientID && secret == f.clientSecret
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// single returns the one value of name, failing on duplicates as Latchkey's token endpoint does.
func single(r *http.Request, name string) (string, bool) {
	v := r.PostForm[name]
	if len(v) != 1 {
		return "", false
	}
	return v[0], true
}

func (f *fakeLatchkey) token(w http.ResponseWriter, r *http.Request) {
	if !f.clientAuthOK(r) {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_client"})
		return
	}
	if err := r.ParseForm(); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_request"})
		return
	}
	want := map[string]string{
		"grant_type":           "urn:ietf:params:oauth:grant-type:token-exchange",
		"subject_token_type":   "urn:ietf:params:oauth:token-type:access_token",
		"requested_token_type": "urn:ietf:params:oauth:token-type:access_token",
	}
	for k, v := range want {
		if got, ok := single(r, k); !ok || got != v {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_request", "error_description": k})
			return
		}
	}
	subject, ok1 := single(r, "subject_token")
	audience, ok2 := single(r, "audience")
	if !ok1 || !ok2 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_request"})
		return
	}
	f.mu.Lock()
	f.exchanges++
	tok, known := f.tokens[subject]
	connected := f.connected[tok.sub+"|"+audience]
	f.mu.Unlock()
	if !known || !tok.active {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant", "error_description": "subject_token is not active"})
		return
	}
	if audience != "github" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_target", "error_description": "no connector with that audience"})
		return
	}
	if !connected {
		writeJSON(w, http.StatusBadRequest, map[string]any{
			"error":              "invalid_grant",
			"error_description":  "the person has not connected a GitHub account",
			"reason":             "connect_required",
			"connect_uri":        f.linkFor(tok.sub),
			"connect_id":         "c-" + tok.sub,
			"connect_expires_in": 1800,
			"connect_message":    connectMessage,
		})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"access_token":      upstreamPrefix + tok.sub,
		"issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
		"token_type":        "Bearer",
		"expires_in":        3600,
		"scope":             "repo",
	})
}

func (f *fakeLatchkey) introspection(w http.ResponseWriter, r *http.Request) {
	if !f.clientAuthOK(r) {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_client"})
		return
	}
	_ = r.ParseForm()
	f.mu.Lock()
	f.introspect++
	down := f.down
	tok, known := f.tokens[r.PostForm.Get("token")]
	f.mu.Unlock()
	if down {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "server_error"})
		return
	}
	if !known || !tok.active {
		writeJSON(w, http.StatusOK, map[string]any{"active": false})
		return
	}
	answer := map[string]any{
		"active":     true,
		"sub":        tok.sub,
		"client_id":  tok.client,
		"aud":        tok.aud,
		"scope":      tok.scope,
		"token_type": tok.tokenType,
		"exp":        tok.exp.Unix(),
		"iat":        tok.exp.Add(-time.Hour).Unix(),
		"iss":        f.issuer,
	}
	if tok.jkt != "" {
		answer["cnf"] = map[string]string{"jkt": tok.jkt}
	}
	writeJSON(w, http.StatusOK, answer)
}

// clock is an injected, settable time.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Now()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// bearer adds an Authorization header to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

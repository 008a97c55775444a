package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"

	latchkey "latchkey.dev/latchkey/mcp"
)

func TestProtectedResourceMetadata(t *testing.T) {
	s := newStack(t)
	if got, want := s.rs.MetadataPath(), "/.well-known/oauth-protected-resource/mcp"; got != want {
		t.Errorf("MetadataPath = %q, want %q", got, want)
	}
	base := strings.TrimSuffix(s.url, "/mcp")
	if got, want := s.rs.MetadataURL(), base+"/.well-known/oauth-protected-resource/mcp"; got != want {
		t.Errorf("MetadataURL = %q, want %q", got, want)
	}
	want := map[string]any{
		"resource":                 s.url,
		"authorization_servers":    []any{s.fake.issuer},
		"bearer_methods_supported": []any{"header"},
		"scopes_supported":         []any{"repos:read"},
		"resource_name":            "Repo Helper",
		// DPoP proofs are checked for bound tokens; exactly what the verifier accepts.
		"dpop_signing_alg_values_supported": []any{"ES256", "EdDSA", "PS256", "RS256"},
	}
	resp, err := http.Get(s.rs.MetadataURL())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" || !reflect.DeepEqual(got, want) {
		t.Errorf("metadata = %d %s %v\nwant %v", resp.StatusCode, resp.Header.Get("Content-Type"), got, want)
	}

	// Handler also answers the path-inserted URL when mounted at the root.
	h := s.rs.Handler(http.NotFoundHandler())
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/.well-known/oauth-protected-resource/mcp", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"resource":"`+s.url+`"`) {
		t.Errorf("Handler metadata = %d %s", rec.Code, rec.Body)
	}
}

func TestMetadataPathForRootResource(t *testing.T) {
	rs := &latchkey.ResourceServer{Resource: "https://mcp.example.com"}
	if got := rs.MetadataURL(); got != "https://mcp.example.com/.well-known/oauth-protected-resource" {
		t.Errorf("MetadataURL = %q", got)
	}
}

// What a request gets at the MCP endpoint, by token.
func TestProtectAnswers(t *testing.T) {
	s := newStack(t)
	s.fake.issue("lk_at_other", "alice", "https://other-mcp.example.com/mcp")
	s.fake.issue("lk_at_both", "alice", "https://other-mcp.example.com/mcp", s.url)
	s.fake.set("lk_at_expired", fakeToken{sub: "alice", aud: []string{s.url}, tokenType: "Bearer", exp: time.Now().Add(-time.Minute), active: true})
	s.fake.set("lk_rt_refresh", fakeToken{sub: "alice", aud: []string{s.url}, tokenType: "refresh_token", exp: time.Now().Add(time.Hour), active: true})
	s.fake.set("lk_at_revoked", fakeToken{sub: "alice", aud: []string{s.url}, tokenType: "Bearer", exp: time.Now().Add(time.Hour), active: false})
	s.fake.set("lk_at_nobody", fakeToken{aud: []string{s.url}, tokenType: "Bearer", exp: time.Now().Add(time.Hour), active: true})
	// An authorization server following RFC 9068 §2.2 names the client itself as the subject
	// of a client_credentials token (as Latchkey once did): still no person.
	s.fake.set("lk_at_itself", fakeToken{sub: "svc", client: "svc", aud: []string{s.url}, tokenType: "Bearer", exp: time.Now().Add(time.Hour), active: true})

	challenge := `Bearer resource_metadata="` + s.rs.MetadataURL() + `"`
	tests := []struct {
		name          string
		authorization string
		wantStatus    int
		wantBody      string
	}{
		{"no token", "", 401, "no bearer token"},
		{"not bearer", "Basic YTpi", 401, "no bearer token"},
		{"unknown token", "Bearer lk_at_guess", 401, "not active"},
		{"token for another MCP server", "Bearer lk_at_other", 401, "not issued for this server"},
		{"expired", "Bearer lk_at_expired", 401, "expired"},
		{"refresh token", "Bearer lk_rt_refresh", 401, "not an access token"},
		{"revoked", "Bearer lk_at_revoked", 401, "not active"},
		{"no person", "Bearer lk_at_nobody", 401, "names no person"},
		{"the client as its own subject", "Bearer lk_at_itself", 401, "names no person"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, s.url, strings.NewReader(`{}`))
			if tt.authorization != "" {
				req.Header.Set("Authorization", tt.authorization)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus || !strings.Contains(string(body), tt.wantBody) {
				t.Errorf("answer = %d %q, want %d containing %q", resp.StatusCode, body, tt.wantStatus, tt.wantBody)
			}
			// RFC 6750 §3.1: a request without a token learns only where the metadata is; a
			// refused token is told invalid_token and why.
			want := challenge
			if strings.HasPrefix(tt.authorization, "Bearer ") {
				want += `, error="invalid_token", error_description="`
			}
			got := resp.Header.Values("WWW-Authenticate")
			if len(got) != 1 || !strings.HasPrefix(got[0], want) || (want != challenge && !strings.Contains(got[0], tt.wantBody)) ||
				(want == challenge && got[0] != challenge) {
				t.Errorf("WWW-Authenticate = %q, want one starting %q", got, want)
			}
		})
	}

	// A token whose audience includes this server is accepted, and the MCP handler sees who.
	info, err := s.rs.Verify(t.Context(), "lk_at_both", nil)
	if err != nil {
		t.Fatalf("Verify(token for both servers): %v", err)
	}
	if info.UserID != "alice" || !reflect.DeepEqual(info.Scopes, []string{"repos:read"}) ||
		info.Extra[latchkey.TokenInfoToken] != "lk_at_both" || info.Extra[latchkey.TokenInfoClientID] != "repo-helper-agent" {
		t.Errorf("token info = %+v", info)
	}
}

func TestProtectRequiredScopes(t *testing.T) {
	f := newFakeLatchkey(t)
	rs := &latchkey.ResourceServer{
		Resource: "https://mcp.example.com/mcp", AuthorizationServer: f.issuer,
		ClientID: f.clientID, ClientSecret: f.clientSecret,
		RequiredScopes: []string{"repos:write"},
	}
	f.issue("lk_at_alice", "alice", rs.Resource)
	var reached bool
	h := rs.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached = true }))
	req := httptest.NewRequest(http.MethodPost, "/mcp", nil)
	req.Header.Set("Authorization", "Bearer lk_at_alice")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	// RFC 6750 §3.1: insufficient_scope, and (MCP 2025-11-25's recommended approach, for a
	// request without a newer version) the scope the token has plus the one it lacks.
	want := `Bearer error="insufficient_scope", scope="repos:read repos:write", resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp", error_description="this request needs more permission"`
	if rec.Code != 403 || reached || rec.Header().Get("WWW-Authenticate") != want {
		t.Errorf("answer = %d (reached %v) %q, want 403 %q", rec.Code, reached, rec.Header().Get("WWW-Authenticate"), want)
	}
}

// When Latchkey cannot answer, the caller is not told their token is bad, and learns nothing of
// why.
func TestIntrospectionUnavailable(t *testing.T) {
	tests := []struct {
		name  string
		setup func(f *fakeLatchkey, rs *latchkey.ResourceServer)
	}{
		{"introspection fails", func(f *fakeLatchkey, rs *latchkey.ResourceServer) { f.setDown(true) }},
		{"server's own credentials refused", func(f *fakeLatchkey, rs *latchkey.ResourceServer) { rs.ClientSecret = "wrong" }},
		{"unreachable", func(f *fakeLatchkey, rs *latchkey.ResourceServer) {
			rs.IntrospectionURL = "http://127.0.0.1:1/introspect"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeLatchkey(t)
			rs := &latchkey.ResourceServer{Resource: "https://mcp.example.com/mcp", AuthorizationServer: f.issuer, ClientID: f.clientID, ClientSecret: f.clientSecret}
			f.issue("lk_at_alice", "alice", rs.Resource)
			tt.setup(f, rs)
			_, err := rs.Verify(context.Background(), "lk_at_alice", nil)
			if err == nil || errors.Is(err, auth.ErrInvalidToken) {
				t.Fatalf("Verify = %v, want an unavailability error that is not ErrInvalidToken", err)
			}
			req := httptest.NewRequest(http.MethodPost, "/mcp", nil)
			req.Header.Set("Authorization", "Bearer lk_at_alice")
			rec := httptest.NewRecorder()
			rs.Handler(http.NotFoundHandler()).ServeHTTP(rec, req)
			if rec.Code != 500 || strings.Contains(rec.Body.String(), "127.0.0.1") || strings.Contains(rec.Body.String(), "invalid_client") {
				t.Errorf("answer = %d %q", rec.Code, rec.Body)
			}
		})
	}
}

func TestIntrospectionCache(t *testing.T) {
	f := newFakeLatchkey(t)
	c := newClock()
	rs := &latchkey.ResourceServer{
		Resource: "https://mcp.example.com/mcp", AuthorizationServer: f.issuer,
		ClientID: f.clientID, ClientSecret: f.clientSecret,
		CacheSize: 2, CacheTTL: time.Minute, Now: c.Now,
	}
	for _, p := range []string{"alice", "bob", "carol"} {
		f.issue("lk_at_"+p, p, rs.Resource)
	}
	verify := func(token string) {
		t.Helper()
		info, err := rs.Verify(context.Background(), token, nil)
		if err != nil {
			t.Fatalf("Verify(%s): %v", token, err)
		}
		if info.Extra[latchkey.TokenInfoToken] != token {
			t.Fatalf("Verify(%s) returned info for %v", token, info.Extra[latchkey.TokenInfoToken])
		}
	}
	introspections := func() int {
		_, n := f.counts()
		return n
	}

	verify("lk_at_alice")
	verify("lk_at_alice")
	if n := introspections(); n != 1 {
		t.Errorf("introspections after two checks = %d, want 1", n)
	}
	c.Advance(time.Minute)
	verify("lk_at_alice")
	if n := introspections(); n != 2 {
		t.Errorf("introspections after the TTL = %d, want 2", n)
	}

	// Bounded: a third token pushes out the least recently used.
	verify("lk_at_bob")
	verify("lk_at_carol") // alice, the oldest, goes
	verify("lk_at_carol")
	verify("lk_at_bob")
	if n := introspections(); n != 4 {
		t.Errorf("introspections = %d, want 4", n)
	}
	verify("lk_at_alice")
	if n := introspections(); n != 5 {
		t.Errorf("evicted token was not introspected again (%d)", n)
	}

	// Never longer than the token's own expiry, even within the TTL.
	f.set("lk_at_dave", fakeToken{sub: "dave", aud: []string{rs.Resource}, tokenType: "Bearer", exp: c.Now().Add(20 * time.Second), active: true})
	verify("lk_at_dave")
	before := introspections()
	c.Advance(20 * time.Second)
	if _, err := rs.Verify(context.Background(), "lk_at_dave", nil); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("Verify after exp = %v, want ErrInvalidToken", err)
	}
	if introspections() != before+1 {
		t.Error("expired cache entry was trusted")
	}

	// Refusals are not remembered: a token only now issued is accepted at once.
	if _, err := rs.Verify(context.Background(), "lk_at_erin", nil); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("Verify(unknown) = %v", err)
	}
	f.issue("lk_at_erin", "erin", rs.Resource)
	verify("lk_at_erin")

	// The cached entry does not keep a caller's changes.
	info, _ := rs.Verify(context.Background(), "lk_at_erin", nil)
	info.Scopes[0] = "admin"
	info.Extra[latchkey.TokenInfoClientID] = "someone-else"
	again, _ := rs.Verify(context.Background(), "lk_at_erin", nil)
	if again.Scopes[0] != "repos:read" || again.Extra[latchkey.TokenInfoClientID] != "repo-helper-agent" {
		t.Errorf("cache shares state with callers: %+v", again)
	}
}

func TestIntrospectionChecksIssuer(t *testing.T) {
	f := newFakeLatchkey(t)
	rs := &latchkey.ResourceServer{
		Resource: "https://mcp.example.com/mcp", AuthorizationServer: f.srv.URL + "/ns/other",
		IntrospectionURL: f.issuer + "/introspect", ClientID: f.clientID, ClientSecret: f.clientSecret,
	}
	f.issue("lk_at_alice", "alice", rs.Resource)
	if _, err := rs.Verify(context.Background(), "lk_at_alice", nil); !errors.Is(err, auth.ErrInvalidToken) || !strings.Contains(err.Error(), "another authorization server") {
		t.Errorf("Verify = %v, want refusal for another issuer", err)
	}
}

// A client-only token (client_credentials) reaches tools only from the clients the server's
// owner names: another client that got such a token for this server's URL, by declaring the
// URL in its own OAuthClient or through the Project's registration policy, is refused with
// 401 invalid_token. AllowClientOnlyTokens without a list still accepts every client.
func TestClientOnlyTokensFrom(t *testing.T) {
	f := newFakeLatchkey(t)
	const resource = "https://mcp.example.com/mcp"
	machine := func(client string) fakeToken {
		return fakeToken{client: client, aud: []string{resource}, tokenType: "Bearer", exp: time.Now().Add(time.Hour), active: true}
	}
	f.set("lk_at_batch", machine("lkc_batch"))
	f.set("lk_at_intruder", machine("lkc_intruder"))
	f.issue("lk_at_alice", "alice", resource)

	for _, tc := range []struct {
		name  string
		allow bool
		from  []string
		token string
		want  bool
	}{
		{"a named client", false, []string{"lkc_batch"}, "lk_at_batch", true},
		{"another client", false, []string{"lkc_batch"}, "lk_at_intruder", false},
		{"another client, AllowClientOnlyTokens set too", true, []string{"lkc_batch"}, "lk_at_intruder", false},
		{"any client without a list", true, nil, "lk_at_intruder", true},
		{"no client by default", false, nil, "lk_at_batch", false},
		{"a person, whatever the list", false, []string{"lkc_batch"}, "lk_at_alice", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := &latchkey.ResourceServer{Resource: resource, AuthorizationServer: f.issuer, ClientID: f.clientID, ClientSecret: f.clientSecret,
				AllowClientOnlyTokens: tc.allow, ClientOnlyTokensFrom: tc.from}
			var reached bool
			h := rs.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached = true }))
			req := httptest.NewRequest(http.MethodPost, "/mcp", nil)
			req.Header.Set("Authorization", "Bearer "+tc.token)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if reached != tc.want {
				t.Fatalf("reached the tools = %v, want %v (%d %s)", reached, tc.want, rec.Code, rec.Header().Get("WWW-Authenticate"))
			}
			if !tc.want && (rec.Code != 401 || !strings.Contains(rec.Header().Get("WWW-Authenticate"), `error="invalid_token"`)) {
				t.Errorf("answer = %d %q, want 401 invalid_token", rec.Code, rec.Header().Get("WWW-Authenticate"))
			}
		})
	}
}

package mcp_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	latchkey "latchkey.dev/latchkey/mcp"
	"latchkey.dev/latchkey/mcp/dpop"
)

// A DPoP-bound token (introspection reports cnf.jkt) passes only with its proof: as a bearer
// token, with another key's proof, for another URL or replayed, it is refused with a DPoP
// challenge. The replay store is pluggable for servers with several replicas.
func TestProtectDPoP(t *testing.T) {
	f := newFakeLatchkey(t)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	thief, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	jkt, _ := dpop.Thumbprint(key)
	const resource = "https://mcp.example.com/mcp"
	f.set("bound", fakeToken{sub: "alice", client: "agent", aud: []string{resource}, scope: "repos:read", tokenType: "DPoP", exp: time.Now().Add(time.Hour), active: true, jkt: jkt})
	f.issue("plain", "alice", resource)
	uses := 0
	seen := map[string]bool{}
	rs := &latchkey.ResourceServer{
		Resource: resource, AuthorizationServer: f.issuer, ClientID: f.clientID, ClientSecret: f.clientSecret,
		UseOnce: func(_ context.Context, k string, _ time.Time) (bool, error) {
			uses++
			fresh := !seen[k]
			seen[k] = true
			return fresh, nil
		},
	}
	reached := 0
	h := rs.Protect(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached++ }))
	call := func(scheme, token, proof string) (int, string) {
		r := httptest.NewRequest(http.MethodPost, "http://10.0.0.7:8080/mcp", strings.NewReader(`{}`))
		r.Header.Set("Authorization", scheme+" "+token)
		if proof != "" {
			r.Header.Set("DPoP", proof)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, strings.Join(w.Header().Values("WWW-Authenticate"), " | ")
	}
	sign := func(k *ecdsa.PrivateKey, method, u string) string {
		p, err := dpop.Sign(k, dpop.Claims{Method: method, URL: u, AccessToken: "bound"})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for name, c := range map[string]struct{ scheme, token, proof, want string }{
		"bound token as Bearer":   {"Bearer", "bound", "", `DPoP algs="ES256 EdDSA PS256 RS256"`},
		"no proof":                {"DPoP", "bound", "", `error="invalid_dpop_proof"`},
		"another key":             {"DPoP", "bound", sign(thief, "POST", resource), `error="invalid_token"`},
		"another URL":             {"DPoP", "bound", sign(key, "POST", "https://mcp.example.com/other"), `error="invalid_dpop_proof"`},
		"unbound token over DPoP": {"DPoP", "plain", sign(key, "POST", resource), `error="invalid_token"`},
	} {
		if code, ch := call(c.scheme, c.token, c.proof); code != http.StatusUnauthorized || !strings.Contains(ch, c.want) {
			t.Errorf("%s: %d %q, want 401 with %s", name, code, ch, c.want)
		}
	}
	good := sign(key, "POST", resource)
	if code, ch := call("DPoP", "bound", good); code != http.StatusOK || reached != 1 {
		t.Fatalf("the key holder: %d %q", code, ch)
	}
	if code, ch := call("DPoP", "bound", good); code != http.StatusUnauthorized || !strings.Contains(ch, "already used") {
		t.Errorf("replayed proof: %d %q", code, ch)
	}
	if uses != 2 {
		t.Errorf("UseOnce called %d times, want 2", uses)
	}
	if code, _ := call("Bearer", "plain", ""); code != http.StatusOK {
		t.Errorf("an unbound bearer token: %d", code)
	}
	rs2 := &latchkey.ResourceServer{Resource: resource, AuthorizationServer: f.issuer, ClientID: f.clientID, ClientSecret: f.clientSecret, RequireDPoP: true}
	if _, err := rs2.Verify(t.Context(), "plain", nil); err == nil {
		t.Error("RequireDPoP accepted a bearer token")
	}
	if !rs2.Metadata().DPOPBoundAccessTokensRequired {
		t.Error("the metadata does not say dpop_bound_access_tokens_required")
	}
}

// A DPoP-bound token without a tool's scope gets the scope challenge under the DPoP scheme
// (RFC 9449 §7.1), with algs, and the tool does not run.
func TestToolScopeChallengeDPoP(t *testing.T) {
	f := newFakeLatchkey(t)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	jkt, _ := dpop.Thumbprint(key)
	const resource = "https://mcp.example.com/mcp"
	f.set("bound", fakeToken{sub: "alice", client: "agent", aud: []string{resource}, scope: "notes:read", tokenType: "DPoP", exp: time.Now().Add(time.Hour), active: true, jkt: jkt})
	rs := &latchkey.ResourceServer{
		Resource: resource, AuthorizationServer: f.issuer, ClientID: f.clientID, ClientSecret: f.clientSecret,
		ToolScopes: map[string][]string{"write_notes": {"notes:write"}},
	}
	reached := 0
	h := rs.Protect(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached++ }))
	proof, err := dpop.Sign(key, dpop.Claims{Method: "POST", URL: resource, AccessToken: "bound"})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "http://10.0.0.7:8080/mcp",
		strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write_notes"}}`))
	r.Header.Set("Authorization", "DPoP bound")
	r.Header.Set("DPoP", proof)
	r.Header.Set("Mcp-Protocol-Version", latchkey.ProtocolInputRequired)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	want := `DPoP error="insufficient_scope", scope="notes:write", resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp", error_description="the tool write_notes needs more permission", algs="ES256 EdDSA PS256 RS256"`
	if got := w.Header().Get("WWW-Authenticate"); w.Code != http.StatusForbidden || got != want || reached != 0 {
		t.Errorf("answer = %d (reached %d) %q\nwant 403 %q", w.Code, reached, got, want)
	}
}

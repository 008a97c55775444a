package extauthz_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/extauthz"
)

// client starts the service in plaintext on a loopback listener and returns a real gRPC
// client of it.
func client(t *testing.T, s *stack.Stack) authv3.AuthorizationClient {
	t.Helper()
	return dial(t, serve(t, s, nil), insecure.NewCredentials())
}

// serve starts the service on a loopback listener, over TLS when cfg is set, until the test
// ends, and returns its address.
func serve(t *testing.T, s *stack.Stack, cfg *tls.Config) string {
	t.Helper()
	rep := s.Replicas[0]
	srv := extauthz.New(rep.Holder, rep.Server.Proxy(), nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return ln.Addr().String()
}

// check is what Envoy sends for a call through a route whose context extensions name the
// demo Project and GitHub.
func check(method, path, token string, ext map[string]string) *authv3.CheckRequest {
	h := map[string]string{"cookie": "s=1"}
	if token != "" {
		h["authorization"] = "Bearer " + token
	}
	if ext == nil {
		ext = map[string]string{extauthz.ContextProject: stack.ProjectKey, extauthz.ContextConnector: stack.Audience}
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: method, Path: path, Host: "gateway.example", Scheme: "https", Headers: h,
		}},
		ContextExtensions: ext,
	}}
}

func TestExtAuthzCheck(t *testing.T) {
	s := stack.New(t, stack.Options{DSN: "sqlite:" + filepath.Join(t.TempDir(), "latchkey.db")})
	s.Connector.Proxy = &config.Proxy{BaseURL: s.GitHubURL, Rules: []config.ProxyRule{{Methods: []string{"GET"}, PathPrefix: "/user"}}}
	s.ConnectGitHub(stack.AliceEmail, stack.AliceLogin)
	alice := s.AccessToken(stack.AliceEmail, stack.Agent)
	mallory := s.AccessToken(stack.MalloryEmail, stack.Agent)
	c := client(t, s)
	ctx := context.Background()

	t.Run("allowed: the person's token replaces the agent's", func(t *testing.T) {
		resp, err := c.Check(ctx, check("GET", "/user/repos?per_page=5", alice, nil))
		if err != nil {
			t.Fatal(err)
		}
		if codes.Code(resp.GetStatus().GetCode()) != codes.OK {
			t.Fatalf("status %v: %v", resp.GetStatus(), resp.GetDeniedResponse())
		}
		ok := resp.GetOkResponse()
		if len(ok.GetHeaders()) != 1 {
			t.Fatalf("headers %v", ok.GetHeaders())
		}
		h := ok.GetHeaders()[0]
		token, found := strings.CutPrefix(h.GetHeader().GetValue(), "Bearer gho_")
		if h.GetHeader().GetKey() != "authorization" || !found || token == "" || strings.Contains(h.GetHeader().GetValue(), alice) {
			t.Fatalf("header %v, want alice's GitHub token", h)
		}
		// The token works at GitHub, and is alice's.
		req, _ := http.NewRequest(http.MethodGet, s.GitHubURL+"/user", nil)
		req.Header.Set("Authorization", h.GetHeader().GetValue())
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var u map[string]any
		json.NewDecoder(r.Body).Decode(&u)
		r.Body.Close()
		if u["login"] != stack.AliceLogin {
			t.Fatalf("the token is %v's, want alice's", u["login"])
		}
		if rm := strings.Join(ok.GetHeadersToRemove(), ","); !strings.Contains(rm, "cookie") || !strings.Contains(rm, "dpop") {
			t.Errorf("headers to remove %q", rm)
		}
	})

	cases := []struct {
		name   string
		req    *authv3.CheckRequest
		status int32
		code   string
		grpc   codes.Code
	}{
		{"no token", check("GET", "/user", "", nil), 401, "invalid_token", codes.Unauthenticated},
		{"not connected", check("GET", "/user", mallory, nil), 403, "connect_required", codes.PermissionDenied},
		{"method not allowed", check("DELETE", "/user/repos", alice, nil), 403, "call_not_allowed", codes.PermissionDenied},
		{"path escape", check("GET", "/user/%2e%2e/orgs", alice, nil), 400, "invalid_path", codes.PermissionDenied},
		{"unknown project", check("GET", "/user", alice, map[string]string{extauthz.ContextProject: "team/other", extauthz.ContextConnector: "github"}), 404, "unknown_project", codes.PermissionDenied},
		{"unknown connector", check("GET", "/user", alice, map[string]string{extauthz.ContextProject: stack.ProjectKey, extauthz.ContextConnector: "gitlab"}), 404, "unknown_connector", codes.PermissionDenied},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := c.Check(ctx, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if codes.Code(resp.GetStatus().GetCode()) != tc.grpc {
				t.Errorf("gRPC status %v, want %v", resp.GetStatus(), tc.grpc)
			}
			d := resp.GetDeniedResponse()
			if int32(d.GetStatus().GetCode()) != tc.status {
				t.Fatalf("HTTP status %v, want %d: %s", d.GetStatus(), tc.status, d.GetBody())
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(d.GetBody()), &m); err != nil || m["type"] != "urn:latchkey:problem:"+tc.code {
				t.Fatalf("body %s, want %s", d.GetBody(), tc.code)
			}
			if tc.code == "connect_required" && !strings.HasPrefix(m["connect_uri"].(string), s.Issuer+"/") {
				t.Errorf("no connect link: %s", d.GetBody())
			}
		})
	}
}

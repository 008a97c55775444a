package oauth

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzReadForm feeds arbitrary bodies and content types to the form reader every POST endpoint
// uses (token, revocation, introspection). The answer is a form without repeated parameters
// (other than those RFC 8707 and RFC 8693 allow) or a 4xx error in RFC 6749's shape: never a
// panic, never a 500.
//
//	go test -run '^$' -fuzz FuzzReadForm ./webhook/oauth/
func FuzzReadForm(f *testing.F) {
	for _, seed := range []struct{ ct, body string }{
		{"application/x-www-form-urlencoded", "grant_type=client_credentials&scope=read+write"},
		{"application/x-www-form-urlencoded; charset=utf-8", "grant_type=authorization_code&code=abc&code=def"},
		{"application/x-www-form-urlencoded", "resource=https%3A%2F%2Fa&resource=https%3A%2F%2Fb&audience=x&audience=y"},
		{"application/x-www-form-urlencoded", "a=%zz&b=%"},
		{"application/x-www-form-urlencoded", "grant_type=%FF%FE%00;x=1"},
		{"application/json", `{"grant_type":"client_credentials"}`},
		{"", "grant_type=x"},
		{"application/x-www-form-urlencoded; boundary=\"", "x"},
		{"text/plain", strings.Repeat("a=1&", 100)},
	} {
		f.Add(seed.ct, []byte(seed.body))
	}
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/team/demo/token", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", contentType)
		form, err := ReadForm(httptest.NewRecorder(), req)
		if err != nil {
			var e Error
			if !errors.As(err, &e) || e.Code != "invalid_request" || e.Status < 400 || e.Status > 499 {
				t.Fatalf("ReadForm error %T %+v: want invalid_request with a 4xx", err, err)
			}
			if !utf8.ValidString(e.Description) || len(e.Description) > 200 {
				t.Fatalf("description %q echoes too much", e.Description)
			}
			return
		}
		if len(body) > MaxFormBytes {
			t.Fatalf("a body of %d bytes was read", len(body))
		}
		for k, v := range form {
			if len(v) > 1 && !repeatable[k] {
				t.Fatalf("parameter %q repeated %d times got through", k, len(v))
			}
		}
	})
}

// FuzzParseScope: whatever the scope parameter, the result is a list of distinct, valid scope
// tokens (RFC 6749 §3.3) no longer than the limit, or invalid_scope.
func FuzzParseScope(f *testing.F) {
	for _, s := range []string{"openid profile", "  read  read write ", "a\"b", "x\\y", "\x00", "é", strings.Repeat("s ", 60)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		scopes, err := ParseScope(s)
		if err != nil {
			var e Error
			if !errors.As(err, &e) || e.Code != "invalid_scope" {
				t.Fatalf("ParseScope error %v: want invalid_scope", err)
			}
			return
		}
		if len(scopes) > maxScopes {
			t.Fatalf("%d scopes accepted", len(scopes))
		}
		for i, sc := range scopes {
			if sc == "" || !scopeToken(sc) || len(sc) > maxScopeLen || slices.Contains(scopes[:i], sc) {
				t.Fatalf("scope %q accepted from %q", sc, s)
			}
		}
	})
}

// FuzzParseResources: accepted resource indicators are absolute URIs without a fragment, within
// the limits, or the answer is invalid_target.
func FuzzParseResources(f *testing.F) {
	for _, s := range []string{"https://mcp.example/mcp", "not absolute", "https://a/#x", "urn:x:y", "https://a/" + strings.Repeat("p", 3000)} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		out, err := ParseResources([]string{a, b})
		if err != nil {
			var e Error
			if !errors.As(err, &e) || e.Code != "invalid_target" {
				t.Fatalf("ParseResources error %v: want invalid_target", err)
			}
			return
		}
		for _, r := range out {
			if strings.Contains(r, "#") || len(r) > maxResourceLen || r == "" {
				t.Fatalf("resource %q accepted", r)
			}
		}
	})
}
